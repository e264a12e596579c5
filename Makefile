# ledgermq developer entry points. Everything installs into .venv; nothing is needed by hand.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# The Spark tests need a Java runtime (17 or 21); installed with apt-get when missing.
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: install java test run lint bench example-spark clean

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test,spark]'
	touch $(STAMP)

install: $(STAMP)

java:
	@command -v java >/dev/null 2>&1 || ($(SUDO) apt-get update && $(SUDO) apt-get install -y --no-install-recommends openjdk-17-jre-headless)

test: $(STAMP) java
	$(BIN)/ruff check src tests
	$(BIN)/ruff format --check src tests
	$(BIN)/mypy
	$(BIN)/python -m pytest -q

example-spark: $(STAMP) java
	$(BIN)/python examples/spark_pipeline.py

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
