"""python -m release [--dist DIR] [--fresh]: the release artifacts into DIR (default dist/).

--fresh builds the image even when the tools cache holds one for the same inputs; two fresh runs
giving the same SHA256SUMS is what shows the release reproducible (docs/install.md, "Releases")."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from kubeplane.operator_image import manifest_digest
from release.build import IMAGE_NAME, REPO_ROOT, build, project_version, uncommitted_changes


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m release", description=__doc__.split("\n\n")[0])
    parser.add_argument("--dist", type=Path, default=REPO_ROOT / "dist")
    parser.add_argument("--fresh", action="store_true", help="build the image even if the cache holds it")
    parser.add_argument("--allow-uncommitted", action="store_true",
                        help="release a tree with uncommitted changes (its artifacts then match no commit)")
    parser.add_argument("--image-repository", help="where the image will be pushed, e.g. ghcr.io/org/gpu-tenant-operator "
                        "(the packaged chart names it there); default: the chart's image.repository")
    arguments = parser.parse_args()
    changes = uncommitted_changes()
    if changes and not arguments.allow_uncommitted:
        print(f"release: the tree has uncommitted changes ({len(changes)}: {changes[0].strip()} ...); commit them, "
              "or pass --allow-uncommitted", file=sys.stderr)
        return 2
    try:
        built = build(arguments.dist, arguments.fresh, image_repository=arguments.image_repository)
    except ValueError as error:
        print(f"release: {error}", file=sys.stderr)
        return 2
    print(built["checksums"].read_text(), end="")
    print(f"version {project_version()}, image {IMAGE_NAME}@{manifest_digest(built['image'])}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
