# ledgermq developer entry points. Everything installs into .venv; nothing is needed by hand.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
# Two installs: what running a cluster and the console needs (`make run`: the package and its
# run-time dependencies only, no test tools and no PySpark), and everything else on top of it
# (`make install`, `make test`: the test, Spark and Spark Connect extras).
RUN_STAMP := $(VENV)/.installed-run
STAMP := $(VENV)/.installed
# The Spark tests need a Java runtime (17 or 21), the console's browser tests Debian's
# chromium (driven by Playwright; never `playwright install`); apt-get installs them when missing.
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: install install-run cc java chromium test test-long run lint bench bench-timers chaos chaos-rot soak example-spark spark-faults clean

$(RUN_STAMP): pyproject.toml setup.py src/ledgermq/_recordc.c src/ledgermq/_record_decode.c src/ledgermq/_index_put.c src/ledgermq/_recordc.h
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e .
	touch $(RUN_STAMP)

# The test install builds the C record path (src/ledgermq/_recordc.c) with the machine's C
# compiler, which apt-get installs when missing; without one, ledgermq runs pure Python.
$(STAMP): $(RUN_STAMP) | cc
	$(BIN)/pip install --quiet -e '.[test,spark,spark-connect]'
	touch $(STAMP)

install-run: $(RUN_STAMP)

install: $(STAMP)

cc:
	@command -v cc >/dev/null 2>&1 || ($(SUDO) apt-get update && $(SUDO) apt-get install -y --no-install-recommends gcc libc6-dev)

java:
	@command -v java >/dev/null 2>&1 || ($(SUDO) apt-get update && $(SUDO) apt-get install -y --no-install-recommends openjdk-17-jre-headless)

chromium:
	@[ -x /usr/bin/chromium ] || ($(SUDO) apt-get update && $(SUDO) apt-get install -y --no-install-recommends chromium)

# Two pytest workers: most tests wait on real processes and sockets, not on the CPU, so two
# run side by side in about half the time on two cores (tests use free ports and their own
# directories; the suite is written to pass under load, docs/testing.md). A file's tests stay
# on one worker (--dist loadfile) so module fixtures start once; the Spark tests are one unit,
# handed out first, so their JVMs start once (-p tests.spark.xdist_scope).
PYTEST_WORKERS ?= 2
test: $(STAMP) java chromium
	$(BIN)/ruff check src tests
	$(BIN)/ruff format --check src tests
	$(BIN)/mypy
	$(BIN)/python -m pytest -q -n $(PYTEST_WORKERS) --dist loadfile -p tests.spark.xdist_scope -m "not long" --durations=20
	# The send paths, the reput's record scan and the pulled records' decode again with the compiled record path turned off (ledgermq/speedups.py).
	LEDGERMQ_PURE_PYTHON=1 $(BIN)/python -m pytest -q -p no:cacheprovider tests/store/test_batch_put.py \
		tests/protocol/test_batch.py tests/broker/test_send.py tests/protocol/test_javahash.py tests/protocol/test_command.py \
		tests/store/test_batch_records_c.py::test_the_compiled_record_path_is_built_unless_turned_off \
		tests/store/test_single_records_c.py::test_the_pure_python_run_builds_every_record_in_python \
		tests/store/test_window_dispatch.py tests/store/test_record_scan_c.py::test_the_compiled_scan_is_built_unless_turned_off \
		tests/store/test_index_put_c.py::test_the_compiled_index_put_is_used_unless_turned_off \
		tests/protocol/test_record_decode_c.py tests/protocol/test_message_fuzz.py tests/protocol/test_message_record.py

# The whole-profile fault runs kept out of `make test` for time (the one-minute soak, the
# SYNC_FLUSH data-fault profile, the TLS chaos profiles of the SYNC_MASTER and controller layouts,
# Spark Connect through a server started by PySpark's start-connect-server.sh).
test-long: $(STAMP) java
	$(BIN)/python -m pytest -q -m long

# The Spark sink's fault test at full length (docs/spark.md, "Exactly-once writing"): a
# standalone Spark cluster, SPARK_FAULT_ROUNDS rounds of executor SIGKILLs and driver
# kill/restart with exactlyOnce=true (every row exactly once) and half as many with it off
# (duplicates expected); `make test` runs 1 round of each. Figures are printed at the end.
SPARK_FAULT_ROUNDS ?= 20
SPARK_FAULT_SEED ?= 1
spark-faults: $(STAMP) java
	mkdir -p data
	LEDGERMQ_SPARK_FAULT_ROUNDS=$(SPARK_FAULT_ROUNDS) LEDGERMQ_SPARK_FAULT_SEED=$(SPARK_FAULT_SEED) \
	  $(BIN)/python -m pytest -q -s -p no:cacheprovider --basetemp=./data/spark-faults tests/spark/test_exactly_once_faults.py

example-spark: $(STAMP) java
	$(BIN)/python examples/spark_pipeline.py

lint: $(STAMP)
	$(BIN)/ruff check src tests
	$(BIN)/ruff format --check src tests
	$(BIN)/mypy

# A local cluster and the web console (its URL in the banner): by default a name server with
# a controller inside and two brokers in controller mode (kill -9 the master and the slave
# takes over within ~1 s);
# RUN_MODE=master-slave or RUN_MODE=dledger for the other layouts.
RUN_MODE ?= controller
run: $(RUN_STAMP)
	$(BIN)/ledgermq cluster up --mode $(RUN_MODE) --data ./data

bench: $(STAMP)
	$(BIN)/ledgermq bench store --data ./data/bench

# Timer messages at scale (not part of `make test`, ~20 min): a million pending timers (broker
# RSS), lateness with 100,000 pending, send throughput while 200,000 come due at once
# (docs/benchmarks.md, "Timer messages"); JSON in ./data/bench-timers.json.
bench-timers: $(STAMP)
	mkdir -p data
	$(BIN)/ledgermq bench timers --data ./data/bench-timers --json ./data/bench-timers.json

# The long chaos profile: 100 seeded fault cycles against each layout, the two master-slave
# ones, a 3-broker DLedger group, a controller-mode pair (its master and slave faults and the
# controller's own: three controller nodes, the leader killed or isolated), and the SYNC_MASTER
# and controller-mode groups with SYNC_FLUSH (~11 min each); JSON summaries in
# ./data/chaos/{sync,async,dledger,controller,sync-flush,controller-sync-flush}.json. Every layout runs even
# when one fails; the target fails if any lost an acknowledged message (beyond what its
# flush mode allows through a power loss: reported, not failed), served one with other
# content, or diverged. Only SYNC_FLUSH keeps every SEND_OK through a power loss, so the
# sync-flush run is where power-loss must cost nothing (docs/chaos.md, "What each mode
# promises through a power loss").
# ASYNC_MASTER with ASYNC_FLUSH answers SEND_OK before a message is durable anywhere, so an
# OS crash of its master (tail-loss) may lose the last messages its slave had not copied yet:
# that is the mode's contract, as in RocketMQ, so the async layout runs without tail-loss
# (docs/chaos.md; `make chaos CHAOS_FAULTS_ASYNC=...` puts it back). tail-loss does not apply
# to DLedger (SEND_OK needs a quorum's persistence). A full disk fail-stops a DLedger node's
# Raft driver; the broker re-recovers its store and restarts the driver by itself once the
# disk is free, so disk-full runs in the dledger profile too (docs/dledger.md).
CHAOS_SEED ?= 1
CHAOS_CYCLES ?= 100
CHAOS_PAIRS := kill+disk-full,partition+restart,kill-in-recovery
CHAOS_FAULTS_SYNC ?= kill,suspend,partition,tail-loss,disk-full,power-loss,slow-disk,clock-jump,$(CHAOS_PAIRS)
CHAOS_FAULTS_ASYNC ?= kill,suspend,partition,disk-full,power-loss,slow-disk,clock-jump,$(CHAOS_PAIRS)
CHAOS_FAULTS_DLEDGER ?= kill,suspend,partition,disk-full,power-loss,slow-disk,clock-jump,$(CHAOS_PAIRS)
CHAOS_FAULTS_SYNC_FLUSH ?= kill,power-loss,slow-disk,kill-in-recovery
# Controller mode (allAckInSyncStateSet): every master-slave kind against the roles the
# controller assigns (a partition isolates the master or the slave from its peer and the
# controller), and the controller leader's kill and isolation.
CHAOS_FAULTS_CONTROLLER ?= kill,suspend,partition,tail-loss,disk-full,power-loss,slow-disk,clock-jump,$(CHAOS_PAIRS),controller-kill,controller-partition
# Bit rot and lost segments: they pass only once the store finds damaged ranges and a
# replica repairs them (docs/chaos.md); a separate target until then.
CHAOS_FAULTS_ROT ?= bitflip,segment-loss,kill
chaos: $(STAMP)
	mkdir -p data/chaos
	rc=0; \
	$(BIN)/ledgermq chaos run --layout sync --cycles $(CHAOS_CYCLES) --seed $(CHAOS_SEED) \
	  --faults $(CHAOS_FAULTS_SYNC) --data ./data/chaos --json ./data/chaos/sync.json || rc=1; \
	$(BIN)/ledgermq chaos run --layout async --cycles $(CHAOS_CYCLES) --seed $(CHAOS_SEED) \
	  --faults $(CHAOS_FAULTS_ASYNC) --data ./data/chaos --json ./data/chaos/async.json || rc=1; \
	$(BIN)/ledgermq chaos run --layout dledger --cycles $(CHAOS_CYCLES) --seed $(CHAOS_SEED) \
	  --faults $(CHAOS_FAULTS_DLEDGER) --data ./data/chaos --json ./data/chaos/dledger.json || rc=1; \
	$(BIN)/ledgermq chaos run --layout sync --flush sync --cycles $(CHAOS_CYCLES) --seed $(CHAOS_SEED) \
	  --faults $(CHAOS_FAULTS_SYNC_FLUSH) --data ./data/chaos --json ./data/chaos/sync-flush.json || rc=1; \
	$(BIN)/ledgermq chaos run --layout controller --cycles $(CHAOS_CYCLES) --seed $(CHAOS_SEED) \
	  --faults $(CHAOS_FAULTS_CONTROLLER) --data ./data/chaos --json ./data/chaos/controller.json || rc=1; \
	$(BIN)/ledgermq chaos run --layout controller --flush sync --cycles $(CHAOS_CYCLES) --seed $(CHAOS_SEED) \
	  --faults $(CHAOS_FAULTS_SYNC_FLUSH) --data ./data/chaos --json ./data/chaos/controller-sync-flush.json || rc=1; \
	exit $$rc

chaos-rot: $(STAMP)
	mkdir -p data/chaos
	rc=0; \
	for layout in sync async dledger controller; do \
	  $(BIN)/ledgermq chaos run --layout $$layout --cycles $(CHAOS_CYCLES) --seed $(CHAOS_SEED) \
	    --faults $(CHAOS_FAULTS_ROT) --data ./data/chaos-rot --json ./data/chaos/rot-$$layout.json || rc=1; \
	done; \
	exit $$rc

# The soak profile (not part of `make test`): SOAK_MINUTES of mixed, checked load (ordered,
# delayed, transactional and filtered flows beside the chaos workload) with a seeded fault
# every SOAK_FAULT_EVERY seconds, each broker's RSS and descriptors sampled; fails on a lost
# or corrupt message, divergence, a flow problem or growth (docs/chaos.md, "Soak").
# `make soak SOAK_LAYOUT=dledger` runs it on a 3-broker DLedger group.
SOAK_MINUTES ?= 60
SOAK_LAYOUT ?= sync
SOAK_SEED ?= 1
SOAK_FAULT_EVERY ?= 180
soak: $(STAMP)
	mkdir -p data/soak
	$(BIN)/ledgermq chaos soak --layout $(SOAK_LAYOUT) --minutes $(SOAK_MINUTES) --seed $(SOAK_SEED) \
	  --fault-every $(SOAK_FAULT_EVERY) --data ./data/soak --json ./data/soak/$(SOAK_LAYOUT).json

clean:
	rm -rf $(VENV) build dist .pytest_cache .ruff_cache .mypy_cache
