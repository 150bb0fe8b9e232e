# llmscale — the two commands a new user needs are `make demo` and `make test`.
# Everything installs itself into .venv (ignored); the local cluster's binaries are built once
# into $(LLMSCALE_CACHE) (outside the clone) and reused by every later clone on the machine.

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
export LLMSCALE_CACHE ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/llmscale
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: help install binaries lint unit e2e test demo crd requirements clean

help:
	@echo "make demo   - build/start the local cluster, run the demo, stop everything"
	@echo "make test   - lint, type-check, unit + integration + e2e tests (side by side)"
	@echo "make install - create .venv with llmscale and its test tools (.venv/bin/llmscale)"
	@echo "make crd    - regenerate crds/ from the pydantic models (and the chart's and kustomize's copies)"
	@echo "make requirements - re-pin the image's runtime dependencies (requirements/image.txt)"

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

lint: $(STAMP)
	$(BIN)/ruff check operator tests e2e
	$(BIN)/mypy
	$(BIN)/lint-imports

# The local cluster's binaries (kube-apiserver, etcd, KWOK, kubectl, the LeaderWorkerSet controller), Debian's prometheus, Helm
# (built from its Go module), actionlint (built from its Go module), checkov (own venv) and real vLLM on
# CPU with a tiny model (own venv, for the real-engine scenarios and the mock-vs-real metrics test): once
# per machine into $(LLMSCALE_CACHE).
binaries:
	bash e2e/cluster/build.sh
	bash operator/llmscale/localcluster/build-lws.sh
	bash operator/llmscale/localcluster/build-vllm.sh
	bash tools/build-helm.sh
	bash tools/build-actionlint.sh
	bash tools/build-helm-docs.sh
	bash tools/install-checkov.sh

# Side by side (pytest-xdist): the unit tests on every core, the tests of the one local cluster on
# one worker of them; the e2e scenarios in their own namespaces on one cluster, those marked `alone`
# (chaos, every GPU) by themselves (e2e/conftest.py). The slowest 15 tests are listed at the end.
UNIT_WORKERS ?= auto
E2E_WORKERS ?= 3
UNIT_PYTEST = $(BIN)/pytest tests -q -n $(UNIT_WORKERS) --dist loadscope --durations=15
# make test's split of the unit suite: the `timing` tests (latencies a client measures over real
# HTTP) run once the e2e suite has ended, not beside it (tools/test-side-by-side.sh).
TIMING_PYTEST = $(BIN)/pytest tests -q -n 3 --timing-tests=only --durations=5
E2E_PYTEST = $(BIN)/pytest e2e -q -n $(E2E_WORKERS) --dist loadscope --durations=15
unit: $(STAMP) binaries
	$(UNIT_PYTEST)

# The e2e suite starts (and stops) the local cluster itself; it fails, never skips, without one.
e2e: $(STAMP) binaries
	$(E2E_PYTEST)

# Both suites at once: the unit suite starts beside the e2e suite once its real-vLLM scenarios (which
# take every core) are done, at nice 19, into a log printed at the end; its `timing` tests after the
# e2e suite has ended (tools/test-side-by-side.sh).
test: lint binaries
	bash tools/test-side-by-side.sh "$(E2E_PYTEST)" "$(UNIT_PYTEST) --timing-tests=without" "$(TIMING_PYTEST)"

# The CRD from the pydantic models, then its copies in the chart and the kustomize base. Written
# through a temporary file, so that a failing `llmscale crd` leaves the checked-in file intact.
crd: $(STAMP)
	$(BIN)/llmscale crd > crds/llmdeployments.llmscale.dev.yaml.tmp
	mv crds/llmdeployments.llmscale.dev.yaml.tmp crds/llmdeployments.llmscale.dev.yaml
	bash tools/sync-chart-crds.sh

# requirements/image.txt: the exact version and hashes of every runtime dependency, installed by
# the Dockerfile with --require-hashes. Resolved by pip-tools in a venv of its own (nothing of .venv
# leaks in), from the package index only. Run after changing [project].dependencies; existing pins
# are kept where they still fit (PIP_COMPILE_ARGS=--upgrade moves every pin to the newest allowed).
PIP_TOOLS := $(LLMSCALE_CACHE)/pip-tools
requirements:
	test -x $(PIP_TOOLS)/bin/pip-compile || { $(PYTHON) -m venv $(PIP_TOOLS) \
	  && $(PIP_TOOLS)/bin/pip install --quiet pip==25.3 pip-tools==7.6.2; }
	PIP_FIND_LINKS= CUSTOM_COMPILE_COMMAND="make requirements" $(PIP_TOOLS)/bin/pip-compile --quiet \
	  --generate-hashes --strip-extras --allow-unsafe --no-emit-index-url --no-emit-find-links \
	  $(PIP_COMPILE_ARGS) --output-file requirements/image.txt pyproject.toml

demo: $(STAMP)
	$(BIN)/llmscale demo

clean:
	rm -rf $(VENV) .cluster
