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

What counts as other work is decided so that an idle broker never rests:

* the chunk's own end-of-turn step (dispatching and replicating what it just wrote) is the
  chunk's work: it runs inside the chunk (``end_chunk(own_step)``), before the yield.
  Left to run during the yield, it made the yield look late after every chunk;
* work and lag are read on the loop thread's CPU clock, not the wall clock: on a busy
  machine the process is descheduled now and then, and a yield across such a gap looked
  like other work on the loop, and the gap inside a chunk like work, so delivery rested
  nine times a pause that was nobody's work on this loop.

Either made delivery rest on a broker with nothing else to do, up to nine tenths of the
time, and that was most of what a slot's timers waited past its end (docs/timers.md).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from ledgermq.clock import thread_cpu_seconds

Sleep = Callable[[float], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class PaceSettings:
    chunk: int = 32  # puts between yields (~1 ms of loop time)
    busy_share: float = 0.10  # at most this share of a busy loop goes to delivery
    busy_lag_s: float = 0.0005  # loop-thread CPU spent by others during a yield: more means other work ran


class Pace:
    def __init__(
        self,
        settings: PaceSettings | None = None,
        *,
        perf: Callable[[], float] = thread_cpu_seconds,  # the loop thread's CPU seconds
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        self.settings = settings or PaceSettings()
        self.perf = perf
        self.sleep = sleep
        self._chunk_started = perf()
        self.rests = 0

    def start_chunk(self) -> None:
        self._chunk_started = self.perf()

    async def end_chunk(self, own_step: Callable[[], None] | None = None) -> None:
        """Run ``own_step`` (the chunk's end-of-turn step), yield, and rest if the loop
        turned out to be busy with other work."""
        if own_step is not None:
            own_step()
        perf = self.perf
        worked = perf() - self._chunk_started
        before = perf()
        await asyncio.sleep(0)
        lag = perf() - before
        if lag > self.settings.busy_lag_s:
            share = self.settings.busy_share
            rest = worked * (1 - share) / share
            self.rests += 1
            await self.sleep(rest)
        self._chunk_started = perf()
