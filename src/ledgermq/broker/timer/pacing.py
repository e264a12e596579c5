"""How hard delivery may push while the broker has other work (sends, pulls).

Delivering is CPU work on the event loop (each message is put like a send). A burst of
a million timers due in the same second must not starve sends: after every small chunk
of puts the service yields, and if the loop had other work waiting (the yield came back
late) it rests long enough to use at most ``busy_share`` of the loop; on an idle loop it
goes at full speed. The share is judged chunk by chunk, so it follows load within
milliseconds. 10%, not more: with 15% a burst of 200,000 timers cost concurrent senders
23% of their throughput in ``ledgermq bench timers``, more than the 20% allowed (the
reading of due records in a worker thread, which this does not count, takes its part of
the interpreter too); with 10% they kept 86% (docs/benchmarks.md, "Timer messages").
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from ledgermq.clock import perf_seconds


@dataclass(frozen=True, slots=True)
class PaceSettings:
    chunk: int = 32  # puts between yields (~1 ms of loop time)
    busy_share: float = 0.10  # at most this share of a busy loop goes to delivery
    busy_lag_s: float = 0.0005  # a yield that came back later than this means other work ran


class Pace:
    def __init__(self, settings: PaceSettings | None = None) -> None:
        self.settings = settings or PaceSettings()
        self._chunk_started = perf_seconds()
        self.rests = 0

    def start_chunk(self) -> None:
        self._chunk_started = perf_seconds()

    async def end_chunk(self) -> None:
        """Yield; rest if the loop turned out to be busy."""
        worked = perf_seconds() - self._chunk_started
        before = perf_seconds()
        await asyncio.sleep(0)
        lag = perf_seconds() - before
        if lag > self.settings.busy_lag_s:
            share = self.settings.busy_share
            self.rests += 1
            await asyncio.sleep(worked * (1 - share) / share)
        self._chunk_started = perf_seconds()
