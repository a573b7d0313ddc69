# Entry points: `make demo`, `make test`, `make docs` and `make install` (the venv alone, for the
# README's first app: `make install && . .venv/bin/activate`). Each creates or
# refreshes .venv first.
PYTHON ?= python3
# The suite mostly waits on brokers (rebalances, session timeouts), not on the CPU: two
# pytest workers, each with its own embedded brokers, halve its time on two cores.
# A file stays on one worker (--dist loadfile), so module fixtures and order hold.
PYTEST_WORKERS ?= 2
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install demo test lint typecheck docs clean

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

test: lint typecheck docs
	$(BIN)/pytest -n $(PYTEST_WORKERS) --dist loadfile

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache site
