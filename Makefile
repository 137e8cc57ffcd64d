# kubetrain developer entry points. `make help` lists them.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
KUBETRAIN_CACHE ?= $(HOME)/.cache/kubetrain
export KUBETRAIN_CACHE
UV_VERSION := 0.13.8
UV := $(KUBETRAIN_CACHE)/tools/uv-$(UV_VERSION)/bin/uv
VENV := .venv
PY := $(VENV)/bin/python
KUBETRAIN := $(VENV)/bin/kubetrain
PYTEST_ARGS ?=

.PHONY: help
help: ## Show the targets
	@grep -hE '^[a-zA-Z0-9_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "  make %-16s %s\n", $$1, $$2}'

$(UV):
	@echo ">> installing uv $(UV_VERSION) into $(KUBETRAIN_CACHE)/tools"
	@$(PYTHON) -m venv $(KUBETRAIN_CACHE)/tools/uv-$(UV_VERSION)
	@$(KUBETRAIN_CACHE)/tools/uv-$(UV_VERSION)/bin/pip install -q uv==$(UV_VERSION)

$(VENV)/.installed: pyproject.toml | $(UV)
	@echo ">> creating $(VENV) (kubetrain with the controller, dev and train extras; torch is large the first time)"
	@test -x $(PY) || $(UV) venv -q -p $(PYTHON) $(VENV)
	@$(UV) pip install -q --compile-bytecode -p $(PY) -e '.[controller,dev,train]'
	@touch $@

.PHONY: venv
venv: $(VENV)/.installed ## Create the development virtual environment

.PHONY: build
build: venv ## Build the control-plane binaries from Go modules (cached outside the repo)
	@$(KUBETRAIN) dev build

.PHONY: up
up: build ## Start the local cluster
	@$(KUBETRAIN) dev up

.PHONY: down
down: venv ## Stop the local cluster
	@$(KUBETRAIN) dev down

.PHONY: status
status: venv ## Show the local cluster's components
	@$(KUBETRAIN) dev status

.PHONY: crds
crds: venv ## Regenerate deploy/crds from the models in kubetrain/api
	@$(PY) -m kubetrain.api.crdgen deploy/crds

.PHONY: k8s-openapi
k8s-openapi: venv ## Refresh the embedded Kubernetes type schemas from the running dev cluster
	@$(KUBETRAIN) dev openapi

.PHONY: fmt
fmt: venv ## Format and fix what ruff can
	@$(VENV)/bin/ruff format .
	@$(VENV)/bin/ruff check --fix .

.PHONY: lint
lint: venv ## ruff and mypy --strict
	@$(VENV)/bin/ruff check .
	@$(VENV)/bin/ruff format --check .
	@rm -rf build/typecheck && mkdir -p build/typecheck/kubetrain
	@for f in kubetrain/*; do ln -s ../../../$$f build/typecheck/kubetrain/; done
	@for d in controller operators components; do ln -s ../../../$$d build/typecheck/kubetrain/$$d; done
	@MYPYPATH=build/typecheck $(VENV)/bin/mypy -p kubetrain.api -p kubetrain.client -p kubetrain.devcluster -p kubetrain.controller -m kubetrain.checkpoint -m kubetrain.quantity -m kubetrain.naming

.PHONY: test-unit
test-unit: venv ## Unit tests only (no cluster)
	@$(VENV)/bin/pytest -m unit $(PYTEST_ARGS)

.PHONY: test
test: build lint ## Everything: lint, unit, integration and e2e tests on a fresh local cluster
	@$(VENV)/bin/pytest $(PYTEST_ARGS)

.PHONY: demo
demo: build ## Set up the local cluster and run the main job
	@$(PY) examples/demo.py

.PHONY: demo-down
demo-down: venv ## Stop everything the demo started
	@$(KUBETRAIN) dev down
