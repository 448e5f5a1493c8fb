# P-FTP: one Makefile for the whole repository. Works on a machine with only
# python3 and make: `make install` builds .venv with all three packages.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
PKG_FILES := constraints.txt requirements-dev.txt common/pyproject.toml server/pyproject.toml \
             client/pyproject.toml probe-agent/pyproject.toml lab/pyproject.toml

.PHONY: install system-deps test test-fast lint demo bench bench-quick bench-coordinator \
        bench-congestion clean

install: $(STAMP)

$(STAMP): $(PKG_FILES)
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -c constraints.txt -e common -e server -e client -e probe-agent -e lab \
		-r requirements-dev.txt
	@touch $@

system-deps:
	@bash scripts/install-system-deps.sh

lint: install
	$(VENV)/bin/ruff check .

test: install system-deps lint
	$(PY) -m pytest

test-fast: install
	$(PY) -m pytest -m "not lab"

demo: install
	$(PY) demo/run_demo.py

bench: install system-deps
	$(PY) -m bench.lab_bench

bench-quick: install system-deps
	$(PY) -m bench.lab_bench --quick

bench-coordinator: install system-deps
	$(PY) -m bench.coordinator_bench

bench-congestion: install system-deps
	$(PY) -m bench.congestion_bench

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
