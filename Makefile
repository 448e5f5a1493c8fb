# P-FTP: one Makefile for the whole repository. Works on a machine with only
# python3 and make: `make install` builds .venv with all three packages.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
PKG_FILES := constraints.txt requirements-dev.txt common/pyproject.toml server/pyproject.toml \
             client/pyproject.toml probe-agent/pyproject.toml lab/pyproject.toml

.PHONY: install compile system-deps test test-fast lint demo bench bench-quick bench-coordinator \
        bench-congestion bench-loopback clean

install: $(STAMP)

$(STAMP): $(PKG_FILES)
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -c constraints.txt -e common -e server -e client -e probe-agent -e lab \
		-r requirements-dev.txt
	@touch $@

# Editable installs are not byte-compiled, and PYTHONDONTWRITEBYTECODE (set in some
# shells and CI images) stops Python from caching them: every `pftp` run would compile
# the client again (~65 ms). Cheap to repeat; runs before the tests, demo and benches.
compile: install
	@$(PY) -m compileall -q common/src client/src server/src probe-agent/src lab/src

system-deps:
	@bash scripts/install-system-deps.sh

lint: install
	$(VENV)/bin/ruff check .

test: install compile system-deps lint
	$(PY) -m pytest

test-fast: install
	$(PY) -m pytest -m "not lab"

demo: install compile
	$(PY) demo/run_demo.py

bench: install compile system-deps
	$(PY) -m bench.lab_bench

bench-quick: install compile system-deps
	$(PY) -m bench.lab_bench --quick

bench-coordinator: install compile system-deps
	$(PY) -m bench.coordinator_bench

bench-congestion: install compile system-deps
	$(PY) -m bench.congestion_bench

bench-loopback: install compile system-deps
	$(PY) -m bench.loopback_throughput

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
