# The two set-up commands (README): `make run` and `make test`. Both create .venv when missing.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

DEBS   := bubblewrap python3-venv

.PHONY: run test lint types unit e2e conformance bench clean system-deps

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

# The Debian packages the app sandbox needs (bubblewrap; Debian's python3 with venv inside
# it), installed when missing and when we may (root with apt-get): idempotent, and quiet when
# everything is there.
system-deps:
	@if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  missing=""; for p in $(DEBS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	  if [ -n "$$missing" ]; then \
	    echo "installing Debian packages:$$missing"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	  fi; \
	fi

run: $(STAMP) system-deps
	$(BIN)/appdeck serve --dev

lint: $(STAMP)
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench
	$(BIN)/lint-imports --no-cache

types: $(STAMP)
	$(BIN)/mypy

unit: $(STAMP) system-deps
	$(BIN)/pytest -q

conformance: $(STAMP)
	scripts/conformance

test: lint types unit conformance

bench: $(STAMP)
	$(BIN)/python bench/run.py

clean:
	rm -rf $(VENV) .appdeck .mypy_cache .pytest_cache .ruff_cache
