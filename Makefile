# Two commands do all set-up on a fresh machine:
#   make test   installs what the tests need (venv, packages, Java, Chromium) and runs them
#   make demo   runs a local multi-site mission
VENV    := .venv
PY      := $(VENV)/bin/python
STAMP   := $(VENV)/.installed-stamp
PYTHON  ?= python3

.PHONY: test demo sysdeps bench clean docs

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $(STAMP)

sysdeps:
	bash deploy/sysdeps.sh

test: $(STAMP) sysdeps
	$(PY) -m pytest -q

demo: $(STAMP)
	bash deploy/sysdeps.sh java
	$(PY) -m deploy demo

bench: $(STAMP)
	$(PY) bench/rcm_latency.py
	$(PY) bench/rcm_throughput.py
	$(PY) bench/rcm_wire.py

docs: $(STAMP)
	$(PY) -m rcm.docs > docs/rcm-state-machines.md

clean:
	rm -rf var bench/results .pytest_cache
