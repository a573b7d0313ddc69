# Entry points: `make demo`, `make test`, `make docs`, `make dist` (the wheel and sdist into
# dist/, README "Your first app") and `make install` (the venv alone:
# `make install && . .venv/bin/activate`). Each creates or refreshes .venv first.
PYTHON ?= python3
# The suite waits on brokers (rebalances, session timeouts) besides computing (a quiet
# run kept two cores ~77% busy, Spark's JVMs and Python workers ~40% of that), so it
# runs more pytest workers than there are cores, each with its own embedded brokers.
# From a clean clone on two cores (2026-11-29, .ci/run, install included): -n 4 403 s
# quiet (before that day's test cuts) and 514 s half busy; -n 5 369-393 s quiet; -n 6
# ~320 s quiet once (stop 44), 376-379 s at 45b0007 (which ran ten in a row green, eight of
# them two side by side: 604-698 s), 323 s quiet and 620-665 s side by side once the Spark
# JVMs ran on the quick compiler and the serial collector (stop 47); 302-315 s quiet and
# 487-550 s side by side in ten runs in a row at e9685a0 (stop 48).
# Six first failed side by side on a Spark query whose Python worker
# missed the 10 s Spark 4.3 gives it to connect back (hard-coded in PythonWorkerFactory):
# the Spark tests' processes now run at a raised priority (tests/spark/conftest.py),
# and two suites beside a benchmark held at -n 5 with it.
# A file stays on one worker (--dist loadfile), so module fixtures and order hold; tests/spark
# runs as two such units, so two Spark JVMs run at once, not one a worker
# (tests/support/xdist_files.py).
# pytest prints the ten slowest tests at the end (--durations=10, pyproject.toml).
PYTEST_WORKERS ?= 6
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install demo test lint typecheck docs dist clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/python examples/demo.py

lint: $(STAMP)
	$(BIN)/ruff check fairstream pyspark_fairstream.py tests examples benchmarks docs
	$(BIN)/ruff format --check fairstream pyspark_fairstream.py tests examples benchmarks docs

typecheck: $(STAMP)
	$(BIN)/mypy fairstream pyspark_fairstream.py tests/typing

# The site (README sections, a page per CLI command, the API from the docstrings) into
# site/; any warning, such as a broken link or an unparsable docstring, fails it.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet --site-dir site

# The wheel and sdist into dist/, with their metadata checked as PyPI would. The wheel is
# built from the sdist (build's default), so a file missing from the sdist fails here.
# build and twine come with the dev extra; tests/cli/test_extras.py builds them the same
# way and installs the wheel into a fresh venv.
dist: $(STAMP)
	rm -rf dist
	$(BIN)/python -m build --outdir dist .
	$(BIN)/python -m twine check --strict dist/*

test: lint typecheck docs
	$(BIN)/pytest -n $(PYTEST_WORKERS) --dist loadfile

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache site dist build fairstream.egg-info
