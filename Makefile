# dralet developer entry points. Every target installs what it needs into .venv first.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip

.PHONY: install demo test check lint typecheck imports protos-check bench clean k8s

# A third-party driver package, installed the way a vendor's is: its entry point in the
# dralet.drivers group is what lets `dralet run --driver acme-fpga` find it.
EXAMPLE_DRIVER := examples/dralet-example-vendor

$(VENV)/.installed: pyproject.toml $(EXAMPLE_DRIVER)/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -e . --group dev
	$(PIP) install -q -e $(EXAMPLE_DRIVER)
	touch $@

install: $(VENV)/.installed

demo: install
	$(VENV)/bin/dralet demo

# pytest exits 5 when it collected nothing: a broken suite, never a green one.
# TEST_WORKERS pytest-xdist workers (0: in one process); the tests that share host-wide
# things (real kubelets, podman) or run against a real control plane all run on one of
# them, in turn (tests/conftest.py), the rest spread over all. The base of the tests'
# temporary folders is short (a new one each run): unix socket paths in them must stay
# within 107 bytes, and xdist adds a level.
TEST_WORKERS ?= 2
test: install
	@base=$$(mktemp -d /tmp/dralet-t.XXXXXX); \
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadscope --basetemp="$$base"; rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest collected no tests" >&2; fi; exit $$rc

lint: install
	$(VENV)/bin/ruff check src tests benchmarks examples
	$(VENV)/bin/ruff format --check src tests benchmarks examples

typecheck: install
	$(VENV)/bin/mypy
	$(VENV)/bin/mypy --strict $(EXAMPLE_DRIVER)/src

imports: install
	$(VENV)/bin/lint-imports

# The committed stubs must be what the pinned generator makes from the .proto files.
# The generator gets its own venv: it pins an older protobuf than the runtime uses.
CODEGEN_VENV ?= .venv-codegen
$(CODEGEN_VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(CODEGEN_VENV)
	$(CODEGEN_VENV)/bin/pip install -q --upgrade pip
	$(CODEGEN_VENV)/bin/pip install -q --group codegen
	touch $@

protos-check: $(CODEGEN_VENV)/.installed
	PYTHON=$(CODEGEN_VENV)/bin/python scripts/gen-protos
	git diff --exit-code -- src/dralet/protocol/proto

check: lint typecheck imports protos-check

# Helm, built once from its Go module into a per-version cache dir (a no-op when present),
# against the pins of the Kubernetes release its client-go is from (scripts/helm-build), so
# it shares most of its compiled packages with that release's control plane and kubectl.
# tests/deploy render the chart with it; exported so `make test` finds this version.
HELM_VERSION ?= v4.3.2
HELM_DIR ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/dralet/helm/$(HELM_VERSION)
export DRALET_HELM := $(HELM_DIR)/helm

$(HELM_DIR)/helm:
	@echo "building helm $(HELM_VERSION) into $(HELM_DIR) (once; a few minutes)"
	scripts/helm-build $(HELM_VERSION) $(HELM_DIR)

.PHONY: helm
helm: $(HELM_DIR)/helm

# The real control planes the `k8s`-marked tests start (etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler, kubelet), one per release in k8s/releases, built
# from the Go module in k8s/ into a cache folder per release, and containerd once; nothing to
# do when they are there. One release alone: scripts/k8s-build 1.38.
k8s:
	scripts/k8s-build

# kubectl, built from the same Kubernetes module pins as the default release's control plane
# (k8s/v1.<minor>/go.mod) into a cache folder of its own, so the control plane's folders stay
# current (a no-op when present; about 1.5 min with Go's build cache warm from `make k8s`).
# The install tests run the README's kubectl commands with it; exported so `make test` finds it.
export DRALET_KUBECTL := $(shell scripts/kubectl-build --print 2>/dev/null)

.PHONY: kubectl
kubectl:
	scripts/kubectl-build >/dev/null

# The driver image from the Dockerfile, built with podman. Without PYTHON_IMAGE its base is
# made from this machine's Debian packages (scripts/build-base-image): no registry needed.
.PHONY: image
image:
	scripts/build-image

# `dralet simulate` against the real kube-scheduler of every release on many random clusters
# (CI plays 40 per release): SCENARIOS of them from seed FIRST_SEED, e.g.
# `make simulate-differential SCENARIOS=400 FIRST_SEED=1000`. Needs `make k8s`.
SCENARIOS ?= 300
FIRST_SEED ?= 0
.PHONY: simulate-differential
simulate-differential: install k8s
	DRALET_SIMULATE_SCENARIOS=$(SCENARIOS) DRALET_SIMULATE_FIRST_SEED=$(FIRST_SEED) \
		$(PY) -m pytest -m k8s tests/k8s/test_simulate_generated.py -q

# bench_apiserver.py runs upstream's Go test driver beside dralet when Go can build it.
bench: install
	DRALET_GO_DRIVER="$$(scripts/dra-test-driver-build 2>/dev/null || true)" $(PY) benchmarks/run_all.py

# validate against a real kube-apiserver of every release in k8s/releases, on every
# generated mutant (CI sends a sample); DRALET_VALIDATE_MUTANTS=N sends N. Needs `make k8s`.
.PHONY: validate-differential
validate-differential: install
	DRALET_VALIDATE_MUTANTS=$${DRALET_VALIDATE_MUTANTS:-all} $(PY) -m pytest -m k8s -p no:randomly -s \
		tests/k8s/test_validate_differential.py

# The documentation site from docs/ into site/ (mkdocs.yml); a broken link, anchor or
# reference fails the build. tests/docs runs every command the pages show.
.PHONY: docs
docs: install
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

# The release: sdist and wheel into dist/, checked as an index would check them.
.PHONY: dist
dist: install
	rm -rf dist
	$(PY) -m build --outdir dist .
	$(VENV)/bin/twine check --strict dist/*

clean:
	rm -rf $(VENV) $(CODEGEN_VENV) .mypy_cache .ruff_cache .pytest_cache site dist
