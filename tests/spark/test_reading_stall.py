"""A range reader that makes no progress gives up after pollTimeoutMs on its injected clock
(spark/reading.py), whatever the real time its backoff sleeps took. No broker: a stub
session answers every pull with NO_NEW_MSG and moves the clock."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any, TypeVar

import pytest

from ledgermq.client.instance.pull_api import PullStatus
from ledgermq.clock import ManualClock
from ledgermq.spark.broker import Pulled
from ledgermq.spark.offsets import QueueId
from ledgermq.spark.options import parse_read_options
from ledgermq.spark.planning import QueueRange
from ledgermq.spark.reading import RangeReader, ReadTimeoutError

T = TypeVar("T")


class NothingNew:
    """Every pull: the queue holds nothing past offset 0; each pull costs ``step`` seconds
    of the clock."""

    def __init__(self, clock: ManualClock, step: float) -> None:
        self.clock = clock
        self.step = step
        self.pulls = 0

    def run(self, coro: Awaitable[T]) -> T:
        async def wrapped() -> T:
            return await coro

        return asyncio.run(wrapped())

    async def pull(self, q: QueueId, group: str, offset: int, max_nums: int, **_: Any) -> Pulled:
        self.pulls += 1
        self.clock.advance(self.step)
        return Pulled(PullStatus.NO_NEW_MSG, offset, 0, 0, b"", False, "127.0.0.1:1")


def test_a_stalled_read_times_out_by_its_clock() -> None:
    opts = parse_read_options(
        {"namesrvAddr": "127.0.0.1:1", "subscribe": "T", "pollTimeoutMs": "1000"}, streaming=False
    )
    clock = ManualClock()
    session = NothingNew(clock, step=0.4)
    reader = RangeReader(opts, QueueRange(QueueId("T", "b", 0), 0, 10), session, clock)  # type: ignore[arg-type]
    with pytest.raises(ReadTimeoutError, match=r"after 1\.2s \(pollTimeoutMs=1000\)"):
        list(reader.batches())
    # the stall began at the first answer (clock 0.4); the fourth (1.6) came 1.2 s later, past 1 s
    assert session.pulls == 4
