"""``make example-spark``'s check (examples/spark_pipeline.py): it waits for the streaming
query to read every event it produced and fails otherwise.

The wait is tested against a fake query and a fake clock: running the example itself
starts its own Spark session and broker processes (30-60 s on the 2-core machine), more
than this check is worth in every ``make test``; ``make example-spark`` runs it for real."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "spark_pipeline.py"


def example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("spark_pipeline_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


class FakeQuery:
    """Micro-batches of ``rows`` each, one per poll, while active; keeps the last 3 reports
    (as recentProgress keeps the last 100)."""

    def __init__(self, rows: list[int], dies_after: int | None = None) -> None:
        self.rows, self.dies_after, self.polls = rows, dies_after, 0
        self.reports: list[dict[str, Any]] = []

    @property
    def isActive(self) -> bool:
        return self.dies_after is None or self.polls <= self.dies_after

    @property
    def recentProgress(self) -> list[dict[str, Any]]:
        if self.polls < len(self.rows) and self.isActive:
            self.reports = [*self.reports, {"batchId": self.polls, "numInputRows": self.rows[self.polls]}][-3:]
        self.polls += 1
        return self.reports

    def exception(self) -> str:
        return "boom"


class FakeTime:
    def __init__(self) -> None:
        self.now = 0.0

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_the_wait_ends_as_soon_as_every_event_was_read() -> None:
    ex, t = example(), FakeTime()
    query = FakeQuery([0, 100, 0, 250, 150, 500])  # more batches than recentProgress keeps
    progress, failure = ex.wait_for_input(query, lambda: 500, 180.0, 0.5, t.clock, t.sleep)
    assert failure is None
    assert (progress.rows, progress.batches) == (500, 3)
    assert t.now == 2.0  # five polls, not the whole timeout


def test_too_few_events_by_the_deadline_fail_with_the_counts() -> None:
    ex, t = example(), FakeTime()
    progress, failure = ex.wait_for_input(FakeQuery([0, 0]), lambda: 5000, 180.0, 0.5, t.clock, t.sleep)
    assert progress.rows == 0
    assert failure is not None and "read 0 events in 0 micro-batches within 180s" in failure
    assert "waiting for 5000 events" in failure
    assert t.now == 180.0


def test_a_producer_still_running_is_waited_for_and_a_dead_query_fails_at_once() -> None:
    ex, t = example(), FakeTime()
    sent: list[int | None] = [None]
    query = FakeQuery([10, 10, 10])

    def expected() -> int | None:
        if query.polls == 3:
            sent[0] = 30  # the producer finished meanwhile
        return sent[0]

    progress, failure = ex.wait_for_input(query, expected, 180.0, 0.5, t.clock, t.sleep)
    assert failure is None and progress.rows == 30

    t = FakeTime()
    progress, failure = ex.wait_for_input(
        FakeQuery([10, 10, 10], dies_after=1), lambda: 30, 180.0, 0.5, t.clock, t.sleep
    )
    assert failure == "the streaming query stopped after 20 events: boom"
    assert t.now < 2
