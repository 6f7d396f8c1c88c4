# The two commands a newcomer needs: `make dev` (the local demo) and `make test` (everything CI runs).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: dev test unit tools venv bench

venv: $(VENV)/.installed
$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $@

tools:
	bash tools/build.sh

## dev: start a local control plane, the operator and the example tenants, and watch them become Ready
## (DEV_ARGS=--exit-when-ready stops once they are Ready, for CI)
dev: venv tools
	$(BIN)/gputenant dev up $(DEV_ARGS)

## test: unit tests and tests against the real local control plane
test: venv tools
	$(BIN)/pytest -ra

## unit: the fast tests that need no control plane
unit: venv
	$(BIN)/pytest -ra -m 'not plane'

## bench: benchmarks against the local control plane (prints tables; docs/performance.md).
## Options through BENCH_ARGS, e.g. make bench BENCH_ARGS=--quick or BENCH_ARGS="--sizes 50,100,200"
bench: venv tools
	$(BIN)/python -m bench $(BENCH_ARGS)
