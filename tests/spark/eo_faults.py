"""Rounds of faults against a streaming query that copies a topic through the ledgermq sink on
a real Spark standalone cluster (``standalone.SparkStandalone``) and a real name server and
broker (``tests.compat.cluster.Cluster``).

A round: new input rows (keys ``r<round>-<i>``) are produced; the driver
(``eo_pipeline``, a process of its own) starts from the checkpoint; once the output topic
grows, an executor JVM is SIGKILLed by pid (chosen and timed by the seeded generator); then
the driver is killed, in one of two ways the round's place in ``schedule`` decides:

* **placed**: the test arms a point of the sink's commit (``fault_points``), produces the
  round's second half of rows so that another micro-batch must come, and kills the driver's
  process group (and the Python worker holding at the point) once a commit reaches it.
  At ``spark.sink.before_commit`` every row of the batch has been sent and acknowledged and
  Spark has not recorded the batch: the restarted driver runs it again, which without
  ``exactlyOnce`` writes each of its rows a second time, every time;
* **random**: the driver's process group is SIGKILLed a seeded moment later, wherever it is.

After the last round the driver runs once more in ``availableNow`` mode to the end of the
input, and the output is counted by key.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TypeVar

from ledgermq.client import Message, Producer
from ledgermq.client import records as R
from ledgermq.spark.broker import BrokerSession
from ledgermq.spark.broker import PullStatus as Status
from ledgermq.spark.eo_commit import AFTER_END, AFTER_STARTED, BEFORE_DONE
from ledgermq.spark.sink import BEFORE_COMMIT
from tests.compat.cluster import Cluster, tail
from tests.spark.fault_points import HOLD_ENV, held_pids, hold_spec
from tests.spark.standalone import SparkStandalone, cmdline

T = TypeVar("T")
DRAIN_TIMEOUT = 600.0
# from a driver's start: a JVM, executors and Python workers starting on a loaded machine
# took 2 minutes before a first batch was committed (load average 12 on 2 cores)
PROGRESS_TIMEOUT = 600.0
ROOT = Path(__file__).parents[2]
RANDOM = "random"  # a round whose driver is killed at a seeded moment, not at a point

# Which driver kill each round gets, in turn (round r takes entry r modulo the length). The
# first is the same placed fault for both: the short run of make test has it in both tests.
EO_SCHEDULE = (BEFORE_COMMIT, AFTER_END, RANDOM, AFTER_STARTED, BEFORE_DONE)
ALO_SCHEDULE = (BEFORE_COMMIT, RANDOM)


def schedule(exactly_once: bool, r: int) -> str:
    kinds = EO_SCHEDULE if exactly_once else ALO_SCHEDULE
    return kinds[r % len(kinds)]


@dataclass
class FaultReport:
    exactly_once: bool
    rounds: int
    seed: int
    rows: int = 0
    executor_kills: int = 0
    driver_kills: int = 0
    placed: Counter[str] = field(default_factory=Counter)  # driver kills at each point
    seconds: float = 0.0
    counts: Counter[str] = field(default_factory=Counter)
    expected: set[str] = field(default_factory=set)

    @property
    def missing(self) -> list[str]:
        return sorted(k for k in self.expected if self.counts[k] == 0)

    @property
    def duplicated(self) -> int:
        """Rows written more than once (each extra copy counted)."""
        return sum(n - 1 for n in self.counts.values() if n > 1)

    @property
    def unexpected(self) -> list[str]:
        return sorted(k for k in self.counts if k not in self.expected)

    def summary(self) -> str:
        load = Path("/proc/loadavg").read_text().split()[:3]
        return (
            f"exactlyOnce={str(self.exactly_once).lower()} seed={self.seed} rounds={self.rounds}: {self.rows} rows, "
            f"{self.executor_kills} executor kills, {self.driver_kills} driver kills "
            f"({', '.join(f'{n} at {p}' for p, n in sorted(self.placed.items())) or 'none placed'}); output: "
            f"{len(self.counts)} distinct keys, {self.duplicated} duplicates, {len(self.missing)} missing, "
            f"{len(self.unexpected)} unexpected; {self.seconds:.0f}s (load average {' '.join(load)})"
        )


def produce(namesrv: str, topic: str, keys: list[str]) -> None:
    async def run() -> None:
        async with Producer("spark-eo-faults-input", namesrv) as producer:
            for i in range(0, len(keys), 100):
                msgs = [Message(topic, f"value of {k}".encode(), keys=k) for k in keys[i : i + 100]]
                await producer.send_batch(msgs)

    asyncio.run(run())


def count_keys(namesrv: str, topic: str) -> Counter[str]:
    """How many messages of ``topic`` carry each key (every queue read from its first offset)."""
    counts: Counter[str] = Counter()
    with BrokerSession([namesrv]) as s:
        for q in s.run(s.queues(topic)):
            offset, end = s.run(s.min_offset(q)), s.run(s.max_offset(q))
            while offset < end:
                pulled = s.run(s.pull(q, "spark-eo-faults-check", offset, 512))
                if pulled.status is Status.FOUND:
                    for rec in R.decode_records(pulled.raw, check_crc=True):
                        counts[rec.properties.get(R.KEYS, "")] += 1
                if pulled.next_offset <= offset:
                    break
                offset = pulled.next_offset
    return counts


def total(namesrv: str, topic: str) -> int:
    with BrokerSession([namesrv]) as s:
        return sum(s.run(s.max_offset(q)) for q in s.run(s.queues(topic)))


class Driver:
    """One life of ``eo_pipeline`` in its own process group (killed by the group's pid)."""

    def __init__(self, root: Path, args: list[str], life: int, hold: str | None = None) -> None:
        """``hold``: the ``fault_points.HOLD_ENV`` of this life (its Python workers inherit it;
        ``PYTHONPATH`` lets them import ``tests.spark.fault_points``)."""
        self.log_path = root / f"driver-{life}.log"
        self._log: IO[bytes] = open(self.log_path, "wb")  # noqa: SIM115 - closed in kill()/wait()
        env = {k: v for k, v in os.environ.items() if k != HOLD_ENV}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
        if hold is not None:
            env[HOLD_ENV] = hold
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.spark.eo_pipeline", *args],
            stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True,
            cwd=str(ROOT), env=env,
        )  # fmt: skip

    def alive(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"the driver exited with {self.proc.returncode}:\n{tail(self.log_path, 60)}")
        return True

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)
        self._log.close()

    def wait(self, timeout: float) -> int:
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(
                f"the draining driver did not finish in {timeout:.0f}s:\n{tail(self.log_path, 60)}"
            ) from None
        self._log.close()
        return rc


def wait_for(what: str, check: Callable[[], T], driver: Driver) -> T:
    """Poll ``check`` while the driver lives, at most ``PROGRESS_TIMEOUT``."""
    deadline = time.monotonic() + PROGRESS_TIMEOUT
    while not (value := check()):
        driver.alive()
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: nothing in {PROGRESS_TIMEOUT:.0f}s:\n{tail(driver.log_path)}")
        time.sleep(0.2)
    return value


def run_rounds(
    work: Path,
    cluster: Cluster,
    spark: SparkStandalone,
    *,
    exactly_once: bool,
    rounds: int,
    seed: int,
    rows_per_round: int = 1000,
    max_per_trigger: int = 250,
) -> FaultReport:
    rng = random.Random(seed)
    name = "Eo" if exactly_once else "Alo"
    src, dst = f"SparkFaults{name}In{seed}", f"SparkFaults{name}Out{seed}"
    from tests.spark.helpers import create_topic

    for t in (src, dst):
        create_topic(cluster.namesrv_addr, [cluster.broker_addr], t, queues=2)
    report = FaultReport(exactly_once, rounds, seed)
    args = ["--master", spark.master_url, "--namesrv", cluster.namesrv_addr, "--src", src, "--dst", dst,
            "--checkpoint", str(work / f"ckpt-{name}"), "--exactly-once", str(exactly_once).lower(),
            "--max-per-trigger", str(max_per_trigger)]  # fmt: skip
    began = time.monotonic()
    for r in range(rounds):
        kind = schedule(exactly_once, r)
        keys = [f"r{r}-{i}" for i in range(rows_per_round)]
        report.expected.update(keys)
        report.rows += len(keys)
        # a placed round keeps half of its rows back, to be sure a batch reaches the point
        first, second = (keys, []) if kind == RANDOM else (keys[: len(keys) // 2], keys[len(keys) // 2 :])
        produce(cluster.namesrv_addr, src, first)
        before = total(cluster.namesrv_addr, dst)
        flag = work / f"hold-{r}"
        hold = None if kind == RANDOM else hold_spec([kind], flag)
        driver = Driver(work, [*args, "--mode", "run"], r, hold)
        try:
            wait_for(f"round {r}: output", lambda b=before: total(cluster.namesrv_addr, dst) > b, driver)
            time.sleep(rng.uniform(0.0, 3.0))
            executors = spark.executor_pids()
            if executors and spark.kill_executor(rng.choice(executors)):
                report.executor_kills += 1
            time.sleep(rng.uniform(0.5, 5.0))
            if kind != RANDOM:
                flag.touch()
                produce(cluster.namesrv_addr, src, second)
                wait_for(f"round {r}: a commit at {kind}", lambda f=flag: held_pids(f), driver)
                report.placed[kind] += 1
        finally:
            driver.kill()
            # the driver's Python worker held at the point is not in the driver's process group
            for pid in held_pids(flag):
                if "pyspark" in cmdline(pid):
                    os.kill(pid, signal.SIGKILL)
            flag.unlink(missing_ok=True)
        report.driver_kills += 1
    drain = Driver(work, [*args, "--mode", "drain"], rounds)
    rc = drain.wait(DRAIN_TIMEOUT)
    assert rc == 0, f"the draining driver failed ({rc}):\n{tail(drain.log_path, 60)}"
    report.seconds = time.monotonic() - began
    # every commit was answered before the driver finished; give the broker's dispatch a moment
    deadline = time.monotonic() + 20
    report.counts = count_keys(cluster.namesrv_addr, dst)
    while report.missing and time.monotonic() < deadline:
        time.sleep(0.5)
        report.counts = count_keys(cluster.namesrv_addr, dst)
    return report
