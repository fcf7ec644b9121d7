# Two commands do all set-up on a fresh machine:
#   make test   installs what the tests need (venv, packages, Java, Chromium) and runs them
#   make demo   runs a local multi-site mission
# and one to try it by hand:
#   make lab    a lab of four sites whose links and servers you cut, fade, heal, kill and restart
VENV    := .venv
PY      := $(VENV)/bin/python
STAMP   := $(VENV)/.installed-stamp
PYTHON  ?= python3

.PHONY: test demo lab sysdeps bench clean docs

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $(STAMP)

sysdeps:
	bash deploy/sysdeps.sh

# Lint and types first (seconds), then the suite on four pytest-xdist workers on the two cores (most tests
# wait on timers, links and processes: the suite used 65% of the two cores with three workers; four took
# 395 s against 406-411 s with three, measured 2026-11-27): a test module stays on one worker (but the
# simulator's and the scenario runner's long tests spread), and the Spark tests that use the in-process
# SparkSession are two units of about equal length, a worker and a SparkSession each (tests/conftest.py); a
# short --basetemp keeps the runs' Unix socket paths under the kernel's 108 bytes (kept after a red run, for
# its logs).
# Bytecode is cached for the run, under .venv/pycache rather than beside the sources, even where the environment
# says not to write it (PYTHONDONTWRITEBYTECODE, set on this machine): the suite starts hundreds of servers and
# four workers that each compiled every module anew (collection 17 -> 5 CPU-s a worker; docs/testing.md).
test: $(STAMP) sysdeps
	$(PY) -m ruff check -q
	$(PY) -m mypy
	t="$$(mktemp -d /tmp/rcmt.XXXXXX)" && PYTHONDONTWRITEBYTECODE= PYTHONPYCACHEPREFIX="$(CURDIR)/$(VENV)/pycache" \
		$(PY) -m pytest -q -n 4 --basetemp="$$t" && rm -rf "$$t"

demo: $(STAMP)
	bash deploy/sysdeps.sh java
	$(PY) -m spark_archive.cds    # the archive job's JVM then maps Spark's classes (spark_archive/cds.py)
	$(PY) -m deploy demo

lab: $(STAMP)
	$(PY) -m deploy lab

bench: $(STAMP)
	$(PY) bench/rcm_latency.py
	$(PY) bench/rcm_throughput.py
	$(PY) bench/rcm_wire.py

docs: $(STAMP)
	$(PY) -m rcm.docs > docs/rcm-state-machines.md

clean:
	rm -rf var bench/results .pytest_cache
