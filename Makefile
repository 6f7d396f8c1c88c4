# The two commands a newcomer needs: `make dev` (the local demo) and `make test` (everything CI
# runs). `make help` lists the rest; docs/development.md explains them.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
LINTED := operator e2e bench release tools/kai/key_uses.py
# Test processes, each with its own planes: the tests against real vClusters mostly wait, so two
# cores keep three busy (docs/development.md, "How long the suite takes").
TEST_WORKERS ?= 3

# The opt-in check of the oldest supported Kubernetes minor (docs/install.md, Supported versions):
# the onboarding journey on a plane of KUBE_COMPAT_VERSION, which `make tools-compat` builds.
KUBE_COMPAT_VERSION := $(shell sed -n 's/^KUBE_COMPAT_VERSION=//p' tools/versions.env)
COMPAT_TESTS := e2e/tests/test_kube_version.py e2e/tests/test_render_apiserver.py e2e/tests/test_chart_install.py \
	e2e/tests/test_reconciler_inprocess.py e2e/tests/test_dev_up.py

.DEFAULT_GOAL := help
.PHONY: help dev test test-vcluster test-compat unit bench lint generate venv tools tools-compat release

##@ General

help: ## Show the targets and what they do
	@awk 'BEGIN {FS = ":.*##"; printf "Usage: make \033[36m<target>\033[0m\n"} \
		/^[a-zA-Z_-]+:.*?##/ { printf "  \033[36m%-10s\033[0m %s\n", $$1, $$2 } \
		/^##@/ { printf "\n\033[1m%s\033[0m\n", substr($$0, 5) }' $(MAKEFILE_LIST)

##@ Development

dev: venv tools ## Local demo: control plane, operator, example tenants; status until Ready (DEV_ARGS=--exit-when-ready for CI)
	$(BIN)/python -m kubeplane.demo up $(DEV_ARGS)

release: venv tools ## The release into dist/: the image as an OCI archive, the packaged chart naming it by digest, an SPDX SBOM, SHA256SUMS (RELEASE_ARGS=--fresh)
	$(BIN)/python -m release $(RELEASE_ARGS)

generate: venv ## Rewrite every generated file: the CRD, its field reference, the chart's values schema, the docs' tables
	$(BIN)/gputenant crd > crds/tenant.yaml
	$(BIN)/gputenant crd --placement > crds/placement.yaml
	$(BIN)/gputenant crd --markdown > docs/reference/gputenant.md
	$(BIN)/python charts/gpu-tenant-operator/generate_schema.py
	$(BIN)/python tools/kai/key_uses.py
	$(BIN)/python docs/generate.py

lint: venv ## ruff, import-linter's layering contracts (.importlinter) and mypy on the package and the test harness
	$(BIN)/ruff check $(LINTED)
	$(BIN)/lint-imports
	$(BIN)/mypy

##@ Test

test: venv tools ## Unit tests and tests against the real local control plane (what CI runs after lint; TEST_WORKERS=1 runs them in one process)
	$(BIN)/pytest -ra $(if $(filter-out 1,$(TEST_WORKERS)),-n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder)

test-vcluster: venv tools ## Only the real vCluster 0.36.1 tests (part of `make test`): the operator driving one per example tenant
	$(BIN)/pytest -ra e2e/tests/test_vcluster_real_operator.py

test-compat: venv tools tools-compat ## Opt-in, not in CI: the onboarding journey on a plane of the oldest supported Kubernetes (KUBE_COMPAT_VERSION in tools/versions.env)
	GPUTENANT_KUBE_VERSION=$(KUBE_COMPAT_VERSION) $(BIN)/pytest -ra $(COMPAT_TESTS)

unit: venv ## Only the fast tests that need no control plane (seconds)
	$(BIN)/pytest -ra -m 'not plane'

bench: venv tools ## Benchmarks against the local control plane, printed as tables (BENCH_ARGS=--quick, --sizes 50,100,200)
	$(BIN)/python -m bench $(BENCH_ARGS)

##@ Setup

venv: $(VENV)/.installed ## Create .venv with the package and its test and lint tools (pinned in pyproject.toml)
$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	@# The test harness (e2e/kubeplane) is importable in the venv but no part of the wheel or image.
	echo '$(CURDIR)/e2e' > "$$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/kubeplane-harness.pth"
	touch $@

tools: venv ## Build the pinned control-plane tools into ~/.cache/gputenant-operator/tools (cached), and check the vCluster chart (made from its Go module without ../shared)
	bash tools/build.sh
	$(BIN)/python -m kubeplane.vcluster_chart

tools-compat: ## Opt-in: build the six Kubernetes binaries at KUBE_COMPAT_VERSION into the tools cache's kube-<version>/bin (cached; the pinned ones untouched)
	bash tools/build.sh --compat
