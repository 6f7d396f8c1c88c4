"""`make release`: what a platform team installs, built here from the repository into `dist/`.

- the operator's image as an OCI image-layout archive, built without a container engine by the
  Dockerfile's recipe (kubeplane.operator_image), named by tag and by digest;
- the packaged Helm chart, its version and appVersion the project's version (pyproject.toml), its
  image named by that digest, packed so the same input gives the same bytes;
- an SPDX software bill of materials of the image (Debian packages, Python packages, helm);
- SHA256SUMS of the three.

The pipeline that signs and pushes them from the public repository is .github/workflows/release.yml.
"""
