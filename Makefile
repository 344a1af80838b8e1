# Walras developer entry points. `make help` lists them.
SHELL := /usr/bin/env bash
.SHELLFLAGS := -o errexit -o nounset -o pipefail -c
.DEFAULT_GOAL := help

VENV    ?= .venv
PY      := $(VENV)/bin/python
STAMP   := $(VENV)/.installed
# Where hack/ caches built binaries (kube-apiserver, etcd, kwok, helm, kubectl).
export WALRAS_CACHE ?= $(HOME)/.cache/walras

.PHONY: help install tools test test-unit test-integration lint bench demo verify crds crds-sync image lock clean

help: ## List the targets
	@grep -hE '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk -F':.*?## ' '{printf "  %-18s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test,torch,plots]'
	touch $(STAMP)

install: $(STAMP) ## Create .venv and install walras with its test, torch and plots extras

tools: ## Build/fetch kube-apiserver, etcd, kwok, kubelet, JobSet controller, kubectl, helm, pause + workload images into $(WALRAS_CACHE); apt: buildah, debootstrap, containerd, runc, CNI
	bash hack/control-plane.sh build
	bash hack/install-tools.sh
	bash hack/real-node.sh build-tools

test: install tools ## Run the whole test suite (unit + integration on a real local control plane)
	WALRAS_REQUIRE_APISERVER=$${WALRAS_REQUIRE_APISERVER:-1} $(PY) -m pytest

test-unit: install ## Run only the pure allocator tests (no Kubernetes)
	$(PY) -m pytest tests/unit

lint: install ## ruff + mypy --strict + import contracts + shellcheck + hadolint
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check src tests bench
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports
	$(VENV)/bin/shellcheck --severity=warning hack/*.sh hack/lib/*.sh .ci/run
	$(VENV)/bin/hadolint Dockerfile

bench: install ## Benchmarks: one JSON line per case
	$(PY) bench/run.py

demo: install ## Run the demo
	$(PY) -m walras.demo

verify: install ## Fail when generated artefacts (crds/ from the models, chart CRDs) differ from their source
	PYTHON=$(PY) bash hack/verify.sh

crds: install ## Regenerate crds/ from the pydantic models (walras.core.schema) and copy them into the chart
	$(PY) hack/gen_crds.py
	bash hack/sync-crds.sh

crds-sync: ## Copy crds/ into the Helm chart
	bash hack/sync-crds.sh

# `make image VARIANT=cuda IMAGE_TAG=walras:0.1.0-cuda IMAGE_ARCHIVE=walras.tar`
VARIANT       ?= cpu
IMAGE_TAG     ?=
IMAGE_ARCHIVE ?=
image: ## Build the container image from the Dockerfile (docker, else buildah; see hack/build-image.sh)
	bash hack/build-image.sh --variant $(VARIANT) $(if $(IMAGE_TAG),--tag $(IMAGE_TAG)) \
		$(if $(IMAGE_ARCHIVE),--archive $(IMAGE_ARCHIVE))

lock: install ## Re-resolve the image's hash-pinned dependency locks (locks/) after a pyproject.toml change
	bash hack/lock.sh

clean: ## Remove the virtualenv and caches (not the binary cache)
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
