# The gpu-tenant-operator image: `gputenant run` plus the pinned helm binary it drives (pyhelm3).
#
# The development machines have no container engine, so this file is not built there. The e2e tests
# build the same image without one (e2e/kubeplane/operator_image.py: Debian's python3 and
# python3-venv, the project's wheel and its dependencies in /opt/gputenant, the pinned helm, and
# this file's ENTRYPOINT, CMD, ENV and USER with the same passwd entry) and run it in-cluster from
# the chart (e2e/tests/test_operator_incluster.py, which checks the two still agree). Change both
# together. Build and push it from a machine with Docker or Buildah:
#   docker build -t <registry>/gpu-tenant-operator:0.3.0 .
#
# Stage 1: helm, from the same pinned Go module as the test tools (tools/helm, tools/build.sh).
FROM golang:1.26-bookworm AS helm
ARG HELM_VERSION=v3.22.0
WORKDIR /src
COPY tools/helm/ ./
RUN CGO_ENABLED=0 GOFLAGS=-buildvcs=false go build -trimpath \
      -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=${HELM_VERSION}" \
      -o /out/helm helm.sh/helm/v3/cmd/helm

# Stage 2: the Python package in a virtual environment.
FROM python:3.12-slim-bookworm AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY operator/ operator/
COPY templates/ templates/
RUN python -m venv /opt/gputenant && /opt/gputenant/bin/pip install --no-cache-dir .

# Stage 3: runtime. Non-root (65532, as the chart's securityContext expects), read-only root
# filesystem in the chart: helm's cache and the guard's generated certificates go to /tmp.
FROM python:3.12-slim-bookworm
COPY --from=build /opt/gputenant /opt/gputenant
COPY --from=helm /out/helm /usr/local/bin/helm
# A name for the uid: kopf names the operator's identity after getpass.getuser(), which fails for a
# uid /etc/passwd does not know.
RUN echo 'nonroot:x:65532:65532:nonroot:/tmp:/usr/sbin/nologin' >> /etc/passwd \
 && echo 'nonroot:x:65532:' >> /etc/group
ENV PATH=/opt/gputenant/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp
USER 65532:65532
ENTRYPOINT ["gputenant"]
CMD ["run", "--config", "/etc/gputenant/config.yaml", "--liveness", "http://0.0.0.0:8080/healthz"]
