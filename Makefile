# Entry points: `make demo`, `make test` and `make install` (the venv alone, for the
# README's first app: `make install && . .venv/bin/activate`). Each creates or
# refreshes .venv first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install demo test lint typecheck clean

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
	$(BIN)/ruff check fairstream tests examples benchmarks
	$(BIN)/ruff format --check fairstream tests examples benchmarks

typecheck: $(STAMP)
	$(BIN)/mypy fairstream tests/typing

test: lint typecheck
	$(BIN)/pytest

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
