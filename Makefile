# ledgermq developer entry points. Everything installs into .venv; nothing is needed by hand.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# The Spark tests need a Java runtime (17 or 21); installed with apt-get when missing.
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: install java test run lint bench chaos example-spark clean

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

# The long chaos profile: every fault kind against both master-slave layouts (~15 min each
# at the defaults); JSON summaries in ./data/chaos/{sync,async}.json. Both layouts run even
# when the first fails; the target fails if either lost an acknowledged message or diverged.
CHAOS_SEED ?= 1
CHAOS_CYCLES ?= 100
CHAOS_FAULTS ?= kill,suspend,partition,tail-loss,disk-full
chaos: $(STAMP)
	mkdir -p data/chaos
	rc=0; for layout in sync async; do \
	  $(BIN)/ledgermq chaos run --layout $$layout --cycles $(CHAOS_CYCLES) --seed $(CHAOS_SEED) \
	    --faults $(CHAOS_FAULTS) --data ./data/chaos --json ./data/chaos/$$layout.json || rc=1; \
	done; exit $$rc

clean:
	rm -rf $(VENV) build dist .pytest_cache .ruff_cache .mypy_cache
