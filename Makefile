# ledgermq developer entry points. Everything installs into .venv; nothing is needed by hand.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install test run lint bench clean

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

test: $(STAMP)
	$(BIN)/ruff check src tests
	$(BIN)/ruff format --check src tests
	$(BIN)/mypy
	$(BIN)/python -m pytest -q

lint: $(STAMP)
	$(BIN)/ruff check src tests
	$(BIN)/ruff format --check src tests
	$(BIN)/mypy

run: $(STAMP)
	$(BIN)/ledgermq cluster up --data ./data

bench: $(STAMP)
	$(BIN)/ledgermq bench store --data ./data/bench

clean:
	rm -rf $(VENV) build dist .pytest_cache .ruff_cache .mypy_cache
