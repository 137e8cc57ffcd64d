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
# Under Airflow 2.11, make test skips the tests marked main_airflow_only; AIRFLOW2_TESTS=all runs them too.
AIRFLOW2_TESTS ?= -m "not main_airflow_only"

.PHONY: help
help: ## Show the targets
	@grep -hE '^[a-zA-Z0-9_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "  make %-16s %s\n", $$1, $$2}'

# uv itself comes from a lock too: requirements/uv.txt pins uv $(UV_VERSION) with its hashes.
$(UV):
	@echo ">> installing uv $(UV_VERSION) into $(KUBETRAIN_CACHE)/tools"
	@$(PYTHON) -m venv $(KUBETRAIN_CACHE)/tools/uv-$(UV_VERSION)
	@$(KUBETRAIN_CACHE)/tools/uv-$(UV_VERSION)/bin/pip install -q --require-hashes -r requirements/uv.txt

# Every environment is the lock of its own under requirements/ (docs/security.md#the-supply-chain):
# exactly those versions, each checked against its hashes, then kubetrain itself from this checkout
# with no dependencies of its own, built by the lock's setuptools. Nothing unpinned or unhashed lands
# in it. `make lock` re-resolves the locks after a change to pyproject.toml or requirements/*.in.
# $(call install_locked,<interpreter>,<lock>)
define install_locked
	@$(UV) pip sync -q --compile-bytecode --require-hashes -p $(1) $(2)
	@$(UV) pip install -q --compile-bytecode --no-deps --no-build-isolation -p $(1) -e .
endef

$(VENV)/.installed: pyproject.toml Makefile requirements/dev.txt | $(UV)
	@echo ">> creating $(VENV) (kubetrain with the controller, dev, train, objectstore, hf and lightning extras; torch is large the first time)"
	@test -x $(PY) || $(UV) venv -q -p $(PYTHON) $(VENV)
	$(call install_locked,$(PY),requirements/dev.txt)
	@touch $@

.PHONY: venv
venv: $(VENV)/.installed ## Create the development virtual environment

# The Airflow provider is tested under both supported Airflow lines, each in its
# own environment (Airflow pins many packages, so it never shares .venv).
# Each also has what `kubetrain dev airflow up` runs on (requirements/airflow3.in, airflow2.in).
# Their locks are Airflow installed with constraints: every package Airflow brings is pinned with its
# hashes, resolved by uv (docs/security.md says how they differ from Airflow's own constraints files).
AIRFLOW3_VENV := .venv-airflow
AIRFLOW2_VENV := .venv-airflow2

$(AIRFLOW3_VENV)/.installed: pyproject.toml Makefile requirements/airflow3.txt | $(UV)
	@echo ">> creating $(AIRFLOW3_VENV) (Airflow 3 with the kubetrain provider)"
	@test -x $(AIRFLOW3_VENV)/bin/python || $(UV) venv -q -p $(PYTHON) $(AIRFLOW3_VENV)
	$(call install_locked,$(AIRFLOW3_VENV)/bin/python,requirements/airflow3.txt)
	@touch $@

$(AIRFLOW2_VENV)/.installed: pyproject.toml Makefile requirements/airflow2.txt | $(UV)
	@echo ">> creating $(AIRFLOW2_VENV) (Airflow 2.11 with the kubetrain provider)"
	@test -x $(AIRFLOW2_VENV)/bin/python || $(UV) venv -q -p $(PYTHON) $(AIRFLOW2_VENV)
	$(call install_locked,$(AIRFLOW2_VENV)/bin/python,requirements/airflow2.txt)
	@touch $@

.PHONY: airflow-venvs
airflow-venvs: $(AIRFLOW3_VENV)/.installed $(AIRFLOW2_VENV)/.installed ## Create the Airflow 3 and Airflow 2.11 test environments

# KFP pins kubernetes<31, which the Airflow provider cannot live with: its own environment too.
KFP_VENV := .venv-kfp

$(KFP_VENV)/.installed: pyproject.toml Makefile requirements/kfp.txt | $(UV)
	@echo ">> creating $(KFP_VENV) (kfp with the kubetrain components)"
	@test -x $(KFP_VENV)/bin/python || $(UV) venv -q -p $(PYTHON) $(KFP_VENV)
	$(call install_locked,$(KFP_VENV)/bin/python,requirements/kfp.txt)
	@touch $@

.PHONY: kfp-venv
kfp-venv: $(KFP_VENV)/.installed ## Create the KFP environment

# The upstream Python SDKs, unchanged: kubeflow-training (Training Operator v1, TrainingClient) and
# kubeflow (Trainer v2, TrainerClient). Their pins agree (kubernetes 35), so one environment holds
# both; it has torch too, because tests/sdk starts its own cluster from it and the process node runs
# pods with this interpreter. (Both packages ship kubeflow/__init__.py: the last one installed wins,
# and neither SDK reads it.)
SDK_VENV := .venv-sdk

$(SDK_VENV)/.installed: pyproject.toml requirements/sdk.txt | $(UV)
	@echo ">> creating $(SDK_VENV) (the kubeflow-training and kubeflow SDKs, with torch for the process node)"
	@test -x $(SDK_VENV)/bin/python || $(UV) venv -q -p $(PYTHON) $(SDK_VENV)
	$(call install_locked,$(SDK_VENV)/bin/python,requirements/sdk.txt)
	@touch $@

.PHONY: sdk-venv
sdk-venv: $(SDK_VENV)/.installed ## Create the environment of the upstream SDKs' tests

# The locks, one per environment and one for the image: what each installs, pinned, with hashes.
# uv keeps every version a lock already has that still fits; `make lock UPGRADE=--upgrade` moves them
# all to the newest that fit. Resolved for every platform from Python 3.11 up (--universal), so one
# lock serves every machine and the image. tests/unit/test_supply_chain.py fails until a change to
# pyproject.toml or requirements/*.in is followed by `make lock`.
UPGRADE ?=
COMPILE = $(UV) pip compile -q --universal --python-version 3.11 --generate-hashes $(UPGRADE) --custom-compile-command 'make lock'
LOCK = $(COMPILE) pyproject.toml

.PHONY: lock
lock: | $(UV) ## Re-resolve requirements/*.txt (pinned, hashed) from pyproject.toml and requirements/*.in
	@$(LOCK) --extra controller --extra dev --extra train --extra objectstore --extra hf --extra lightning requirements/build.in -o requirements/dev.txt
	@$(LOCK) --extra airflow --extra controller --extra dev requirements/airflow3.in requirements/build.in -o requirements/airflow3.txt
	@$(LOCK) --extra airflow --extra controller --extra dev requirements/airflow2.in requirements/build.in -o requirements/airflow2.txt
	@$(LOCK) --extra kfp --extra controller --extra dev requirements/build.in -o requirements/kfp.txt
	@$(LOCK) --extra controller --extra dev --extra train --extra objectstore requirements/sdk.in requirements/build.in -o requirements/sdk.txt
	@$(LOCK) --extra controller --extra kfp -o requirements/image.txt
	@echo 'uv==$(UV_VERSION)' | $(COMPILE) - -o requirements/uv.txt

.PHONY: components
components: kfp-venv ## Recompile the KFP components' YAML under components/
	@$(KFP_VENV)/bin/python -m kubetrain.components.compile

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

# The Airflow provider is type-checked in the Airflow 3 environment, where Airflow is installed;
# everything else in .venv. Each run keeps a cache of its own.
.PHONY: lint
lint: venv $(AIRFLOW3_VENV)/.installed ## ruff, the import layers and mypy --strict
	@$(VENV)/bin/ruff check .
	@$(VENV)/bin/ruff format --check .
	@$(VENV)/bin/pytest -q -p no:cacheprovider --no-header --durations=0 --durations-min=60 tests/unit/test_layers.py
	@rm -rf build/typecheck && mkdir -p build/typecheck/kubetrain
	@for f in kubetrain/*; do ln -s ../../../$$f build/typecheck/kubetrain/; done
	@for d in controller operators components; do ln -s ../../../$$d build/typecheck/kubetrain/$$d; done
	@MYPYPATH=build/typecheck $(VENV)/bin/mypy -p kubetrain.api -p kubetrain.trainjob -p kubetrain.client -p kubetrain.devcluster -p kubetrain.kube -p kubetrain.controller -m kubetrain.checkpoint -m kubetrain.plot -m kubetrain.quantity -m kubetrain.naming -m kubetrain.components.launch -m kubetrain.jobs_cli -m kubetrain.cli -m kubetrain.tabular -m kubetrain.checkpoint_objects -m kubetrain.checkpoint_sharded -m kubetrain.checkpoint_async -p tests.faultinjection
	@MYPYPATH=build/typecheck $(AIRFLOW3_VENV)/bin/mypy --cache-dir .mypy_cache/airflow -p kubetrain.operators

.PHONY: test-unit
test-unit: venv ## Unit tests only (no cluster)
	@$(VENV)/bin/pytest -m unit $(PYTEST_ARGS)

# One fresh cluster (with its S3 server) serves the first four test runs; its process node runs pods with
# .venv's interpreter (torch), whichever environment the tests run in. The upstream SDKs' pods
# name no node, so tests/sdk starts a small cluster of its own with --process-node-default
# (the other suites rely on simulated nodes taking such pods).
.PHONY: test
test: build lint airflow-venvs kfp-venv sdk-venv ## Everything: lint, unit, integration, e2e, Airflow, KFP, Kueue and upstream SDK tests on fresh local clusters
	@state=$$(mktemp -d -t kubetrain-test-XXXXXX); \
	trap '$(KUBETRAIN) dev down --state-dir "$$state" >/dev/null' EXIT; \
	$(KUBETRAIN) dev up --state-dir "$$state" --gpu-nodes 2 --gpus-per-node 8 --cpu-nodes 2 --object-store && \
	export KUBETRAIN_TEST_CLUSTER="$$state" && \
	echo ">> core tests" && $(VENV)/bin/pytest $(PYTEST_ARGS) && \
	echo ">> Airflow 3 provider tests" && $(AIRFLOW3_VENV)/bin/pytest tests/airflow $(PYTEST_ARGS) && \
	echo ">> Airflow 2.11 provider tests" && $(AIRFLOW2_VENV)/bin/pytest tests/airflow $(if $(filter all,$(AIRFLOW2_TESTS)),,$(AIRFLOW2_TESTS)) $(PYTEST_ARGS) && \
	echo ">> KFP component tests" && $(KFP_VENV)/bin/pytest tests/kfp $(PYTEST_ARGS) && \
	$(KUBETRAIN) dev down --state-dir "$$state" >/dev/null 2>&1 && \
	echo ">> Kueue tests (their own cluster, with --kueue)" && $(VENV)/bin/pytest tests/kueue $(PYTEST_ARGS) && \
	echo ">> upstream SDK tests (their own cluster)" && $(SDK_VENV)/bin/pytest tests/sdk $(PYTEST_ARGS)

.PHONY: demo
demo: build $(AIRFLOW3_VENV)/.installed $(KFP_VENV)/.installed ## Set up the local cluster and run the main job (Airflow, then KFP)
	@$(PY) examples/demo.py

.PHONY: demo-down
demo-down: venv ## Stop everything the demo started
	@$(KUBETRAIN) dev down
