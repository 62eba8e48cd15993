# Two entry points: `make demo` and `make test`. Each creates .venv and installs what it needs.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo test lint bench bench-peers-venv bench-engine clean

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

bench: $(VENV)/.test bench-peers-venv
	$(BIN)/python -m pip install --quiet -e '.[bench]'
	$(BIN)/python bench/noise.py

# The query-engine peers cannot share an environment with dpkit or with each other on Python 3.11
# (see bench/engine.py): one venv each under .venv-peers, which ignores itself.
PEERS := .venv-peers
bench-peers-venv: $(PEERS)/opendp/.done $(PEERS)/smartnoise/.done $(PEERS)/tumult/.done

$(PEERS)/.gitignore:
	mkdir -p $(PEERS)
	echo '*' > $@

$(PEERS)/opendp/.done: $(PEERS)/.gitignore
	$(PYTHON) -m venv $(PEERS)/opendp
	$(PEERS)/opendp/bin/python -m pip install --quiet 'opendp[polars]==0.16.0'
	touch $@

$(PEERS)/smartnoise/.done: $(PEERS)/.gitignore
	$(PYTHON) -m venv $(PEERS)/smartnoise
	$(PEERS)/smartnoise/bin/python -m pip install --quiet 'smartnoise-sql==1.0.10' pyarrow
	touch $@

$(PEERS)/tumult/.done: $(PEERS)/.gitignore
	$(PYTHON) -m venv $(PEERS)/tumult
	$(PEERS)/tumult/bin/python -m pip install --quiet 'tmlt-analytics==0.21.0'
	touch $@

bench-engine: $(VENV)/.test bench-peers-venv
	$(BIN)/python -m pip install --quiet -e '.[bench]'
	$(BIN)/python bench/engine.py --rows 1000000 10000000 --spark

clean:
	rm -rf $(VENV) build src/*.egg-info
