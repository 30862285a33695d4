# minutiae — two commands on a fresh machine: `make demo` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
SERVICES := $(CURDIR)/.services

.PHONY: all venv demo test test-fast lint services services-down bench clean

all: test

$(BIN)/minutiae: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev,lightning]'
	@touch $@

venv: $(BIN)/minutiae

demo: venv
	$(BIN)/minutiae demo

# ruff (incl. complexity), mypy --strict, and the architecture contracts in .importlinter
lint: venv
	$(BIN)/ruff check src tests bench
	$(BIN)/mypy
	$(BIN)/lint-imports

services: venv
	scripts/services/up.sh $(SERVICES)

services-down:
	scripts/services/down.sh $(SERVICES)

# Installs what it needs, starts the real services (Slurm, Prometheus, kube-apiserver),
# runs lint and the whole suite, and stops the services whatever the outcome.
test: venv
	@set -e; scripts/services/up.sh $(SERVICES); \
	trap 'scripts/services/down.sh $(SERVICES)' EXIT; \
	. $(SERVICES)/env; export MINUTIAE_REQUIRE_SERVICES=1; \
	$(MAKE) --no-print-directory lint; \
	$(BIN)/pytest -q -p no:cacheprovider

# The suite without the real services (their tests skip, naming what is missing).
test-fast: venv
	$(BIN)/pytest -q -x -p no:cacheprovider

bench: venv
	@for b in bench/*/run.py bench/*.py; do [ -f $$b ] && $(BIN)/python $$b; done; true

clean:
	rm -rf $(VENV) build dist *.egg-info minutiae-report demo-out
