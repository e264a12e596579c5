"""Placing a driver kill at an exact point of the sink's commit, for the fault tests.

The sink calls ``failpoint(...)`` on the driver right after every task of a micro-batch has
returned (``spark.sink.before_commit``: the rows are all sent and acknowledged, nothing is
committed and Spark has not recorded the batch) and, with ``exactlyOnce``, inside the commit
(``spark.eo.after_started``, ``spark.eo.after_end``, ``spark.eo.before_done``). A point does
nothing unless armed, and only test code arms one:

* the driver (``eo_pipeline``) writes through ``ledgermq-fault-points``, the ledgermq data
  source whose ``streamWriter`` first arms the points named by ``HOLD_ENV``
  (``point,point=FLAG``). Spark runs a streaming commit in a Python worker of the driver,
  which builds its writer with ``streamWriter`` and inherits the driver's environment, so
  the points are armed exactly where the commit runs; the executors get the plain writer
  and neither the variable nor this module;
* an armed point does nothing while the file FLAG is absent. Once the test creates it, the
  next commit that reaches the point appends its pid to FLAG and holds there (sleeps) until
  the test has killed it and the driver (``held_pids``), so the kill lands at that point
  and nowhere else. A holder nobody kills gives up after ``HOLD_MAX_S`` by raising, which
  fails the commit loudly.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

from pyspark.sql.datasource import DataSourceStreamWriter
from pyspark.sql.types import StructType

from ledgermq import failpoints
from ledgermq.spark.eo_commit import AFTER_END, AFTER_STARTED, BEFORE_DONE
from ledgermq.spark.sink import BEFORE_COMMIT
from ledgermq.spark.source import LedgerMQDataSource

NAME = "ledgermq-fault-points"
HOLD_ENV = "LEDGERMQ_SPARK_TEST_HOLD"
POINTS = (BEFORE_COMMIT, AFTER_STARTED, AFTER_END, BEFORE_DONE)
HOLD_MAX_S = 300.0
POLL_S = 0.05


def hold_spec(points: list[str], flag: Path) -> str:
    """The value of ``HOLD_ENV`` that arms ``points`` behind ``flag``."""
    unknown = [p for p in points if p not in POINTS]
    if unknown:
        raise ValueError(f"not a fault point of the sink: {unknown}")
    return f"{','.join(points)}={flag}"


def hold_while(flag: Path) -> Callable[[], None]:
    def action() -> None:
        if not flag.exists():
            return
        with open(flag, "a") as out:
            out.write(f"{os.getpid()}\n")
        deadline = time.monotonic() + HOLD_MAX_S
        while flag.exists():
            if time.monotonic() > deadline:
                raise OSError(f"held at a fault point for {HOLD_MAX_S:.0f}s and nobody killed this process")
            time.sleep(POLL_S)

    return action


def arm_from_env() -> None:
    spec = os.environ.get(HOLD_ENV)
    if not spec:
        return
    points, _, flag = spec.rpartition("=")
    for point in points.split(","):
        failpoints.arm(point, hold_while(Path(flag)))


def held_pids(flag: Path) -> list[int]:
    """The processes holding at a point behind ``flag`` (none while nobody reached one)."""
    try:
        text = flag.read_text()
    except FileNotFoundError:
        return []
    return [int(line) for line in text.split() if line.isdigit()]


class FaultPointDataSource(LedgerMQDataSource):
    """The ledgermq data source whose stream writers arm the points of ``HOLD_ENV`` first."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        arm_from_env()
        return super().streamWriter(schema, overwrite)
