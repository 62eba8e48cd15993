# Two entry points: `make demo` and `make test`. Each creates .venv and installs what it needs.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo test lint bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(VENV)/.core: $(BIN)/python pyproject.toml
	$(BIN)/python -m pip install --quiet -e .
	touch $@

$(VENV)/.test: $(BIN)/python pyproject.toml
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $@

demo: $(VENV)/.core
	$(BIN)/python -m dpkit.demo

test: $(VENV)/.test
	$(BIN)/ruff check src tests bench
	$(BIN)/mypy src
	$(BIN)/python -m pytest -q -n 2

lint: $(VENV)/.test
	$(BIN)/ruff check src tests bench
	$(BIN)/mypy src

bench: $(VENV)/.test
	$(BIN)/python -m pip install --quiet -e '.[bench]'
	$(BIN)/python bench/noise.py

clean:
	rm -rf $(VENV) build src/*.egg-info
