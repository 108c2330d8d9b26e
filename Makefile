# The two set-up commands (README): `make run` and `make test`. Both create .venv when missing.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

# Python's bytecode caches are written (a machine's PYTHONDONTWRITEBYTECODE=1 would make every
# process compile every module it imports, and pytest rewrite every test module, each time)
export PYTHONDONTWRITEBYTECODE :=

DEBS   := bubblewrap python3-venv e2fsprogs haproxy
TEST_DEBS := chromium pebble git prometheus
# what `podman kube play` of a rendered pod needs on this host (docs/kubernetes.md, "Running a
# rendered pod under podman"): podman with runc (crun, podman's first choice, refuses our hybrid
# cgroups), its network stack (netavark, aardvark-dns, iptables) and catatonit for the pod's
# infra image, which podman builds locally instead of pulling
K8S_DEBS := podman runc conmon netavark aardvark-dns iptables catatonit

.PHONY: run test lint types unit warm quick slow-list e2e conformance bench clean system-deps test-deps k8s-deps k8s-e2e

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

# Debian packages, installed when missing and when we may (root with apt-get): idempotent,
# and quiet when everything is there. `make run` needs what the app sandbox needs (bubblewrap;
# Debian's python3 with venv inside it); `make test` also the browser the OAuth e2e test drives
# (chromium, through Playwright: no browser is downloaded) and the Prometheus the metrics e2e
# test scrapes with (tests/e2e/test_prometheus_e2e.py). Two clones installing at once wait
# for each other's dpkg lock instead of failing.
define apt_install
	@if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  missing=""; for p in $(1); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	  if [ -n "$$missing" ]; then \
	    echo "installing Debian packages:$$missing"; \
	    apt-get -o DPkg::Lock::Timeout=600 update -qq && DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq $$missing >/dev/null; \
	  fi; \
	fi
endef

system-deps:
	$(call apt_install,$(DEBS))

test-deps:
	$(call apt_install,$(DEBS) $(TEST_DEBS) $(K8S_DEBS))

k8s-deps:
	$(call apt_install,$(K8S_DEBS))

run: $(STAMP) system-deps
	$(BIN)/appdeck serve --dev

lint: $(STAMP)
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench
	$(BIN)/lint-imports --no-cache

types: $(STAMP)
	$(BIN)/mypy

# the tests wait on processes and sockets far more than on the CPU: several workers at once
# (each module on one worker: its PostgreSQL database is the module's)
TEST_WORKERS ?= 4

unit: $(STAMP) test-deps
	$(BIN)/pytest -q --durations=15 -n $(TEST_WORKERS) --dist loadfile

# the inner loop: SQLite only, no end-to-end server process, no podman, none of the tests
# tests/slow.txt names (issue 26 §3); `make test` runs everything
QUICK = $(BIN)/pytest -q -n $(TEST_WORKERS) --dist loadfile --ignore=tests/e2e -k "not postgresql"
quick: $(STAMP)
	$(QUICK) -m "not e2e and not podman and not slow"

# tests/slow.txt again, from the durations of a quick run with the slow tests in
slow-list: $(STAMP)
	$(QUICK) -m "not e2e and not podman" --durations=0 -p no:cacheprovider > .slow-durations.log || { tail -n 20 .slow-durations.log; exit 1; }
	$(BIN)/python scripts/slow_tests.py .slow-durations.log > tests/slow.txt
	rm -f .slow-durations.log

conformance: $(STAMP) system-deps
	scripts/conformance

# the bytecode of src and pytest's rewritten test modules, written by one process before the
# suite, so that its workers load them instead of each compiling and rewriting everything
# (~8 CPU-s a worker); a collection error is left for `unit` to report
warm: $(STAMP)
	@$(BIN)/pytest -q --collect-only -p no:cacheprovider >/dev/null 2>&1 || true

# the Debian packages first (conformance's server needs HAProxy and bubblewrap); then lint,
# types, conformance and warm side by side (mostly one core each, conformance mostly waiting),
# then the suite, which takes both cores by itself (issue 26 §3)
test: test-deps
	$(MAKE) --no-print-directory -j4 --output-sync=target lint types conformance warm
	$(MAKE) --no-print-directory unit

# The Kubernetes driver and router against the cluster in KUBECONFIG (kind, k3s, a cloud): README,
# "Kubernetes (e2e against a real cluster)". Not part of `make test` (tests/k8s_e2e is in
# pytest's norecursedirs); refuses, never passes, when there is no cluster to run against.
k8s-e2e: $(STAMP)
	@test -n "$$KUBECONFIG" || { echo "make k8s-e2e: refused: KUBECONFIG is not set: point it at the cluster's kubeconfig (README, 'Kubernetes (e2e against a real cluster)')" >&2; exit 2; }
	$(BIN)/python -m tests.k8s_e2e.preflight
	$(BIN)/pytest -s -v tests/k8s_e2e

bench: $(STAMP)
	$(BIN)/python bench/run.py

clean:
	rm -rf $(VENV) .appdeck .mypy_cache .pytest_cache .ruff_cache
