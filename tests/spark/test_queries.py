"""``queries.run_to_end`` against fake queries: it restarts a query only when Spark's Python worker
did not connect back, at most ``WORKER_START_RETRIES`` times, and hands every other end back."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.spark.queries import WORKER_START_FAILURE, WORKER_START_RETRIES, WorkerStartRetry, run_to_end

pytest.importorskip("pyspark", reason="pyspark is not installed (the 'spark' extra)")

CONNECT_BACK = f"[STREAM_FAILED] Query terminated with exception: {WORKER_START_FAILURE}. SQLSTATE: XXKST"


class FakeQuery:
    """Ends with ``failure`` (None: success); ``hangs``: still running at the timeout."""

    def __init__(self, failure: str | None, *, hangs: bool = False) -> None:
        self.failure, self.hangs, self.stopped = failure, hangs, False

    def awaitTermination(self, timeout: float) -> bool:
        from pyspark.errors import StreamingQueryException

        if self.hangs:
            return False
        if self.failure is not None:
            raise StreamingQueryException(self.failure)
        return True

    def exception(self) -> str | None:
        return self.failure

    def stop(self) -> None:
        self.stopped = True


def starts(*queries: FakeQuery) -> tuple[Callable[[], FakeQuery], list[FakeQuery]]:
    started: list[FakeQuery] = []
    pending = list(queries)

    def start() -> FakeQuery:
        started.append(pending.pop(0))
        return started[-1]

    return start, started


def test_a_query_that_ends_is_returned_without_a_restart() -> None:
    start, started = starts(FakeQuery(None), FakeQuery(None))
    assert run_to_end(start, 1).exception() is None
    assert len(started) == 1


def test_other_failures_come_back_unchanged() -> None:
    start, started = starts(FakeQuery("deleted by retention before they were read"), FakeQuery(None))
    assert run_to_end(start, 1).exception() == "deleted by retention before they were read"
    assert len(started) == 1


def test_a_worker_that_did_not_connect_back_restarts_the_query() -> None:
    start, started = starts(FakeQuery(CONNECT_BACK), FakeQuery(CONNECT_BACK), FakeQuery(None))
    with pytest.warns(WorkerStartRetry, match=WORKER_START_FAILURE):
        assert run_to_end(start, 1).exception() is None
    assert len(started) == 3


def test_restarts_are_bounded_and_the_last_failure_is_returned() -> None:
    start, started = starts(*(FakeQuery(CONNECT_BACK) for _ in range(WORKER_START_RETRIES + 2)))
    with pytest.warns(WorkerStartRetry):
        assert run_to_end(start, 1).exception() == CONNECT_BACK
    assert len(started) == WORKER_START_RETRIES + 1


def test_a_query_still_running_at_the_timeout_is_stopped_and_fails_the_test() -> None:
    start, started = starts(FakeQuery(None, hangs=True))
    with pytest.raises(AssertionError, match="did not end"):
        run_to_end(start, 1)
    assert started[0].stopped
