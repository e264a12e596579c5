"""``ledgermq bench memory``: does a broker's memory stay flat under a big backlog and a slow consumer?

A master with one slave (processes) takes a backlog of ``messages`` (batches sent a few at
once), holds it, then feeds a consumer that takes only ``slow_rate`` messages a second
while a producer keeps sending ``feed_rate`` a second. Every ``sample_interval_s`` the
bench reads each broker's memory from /proc.

Two figures per broker, because they mean different things:

* **anonymous RSS** (``RssAnon``): the heap, buffers and queues the process owns. A
  backlog or a slow consumer must not make this grow: if it does, memory is held per
  message and a long enough outage of a consumer ends in the OOM killer.
* **file RSS** (``RssFile``): pages of the mapped commit log the process has touched. The
  kernel owns and evicts them; they grow with what was recently written or read, bounded
  by the page cache, not by the broker.

"Flat" is judged on anonymous RSS: its growth from the end of the warm-up to the end of
each phase, against the bytes that phase moved.
"""

from __future__ import annotations

import asyncio
import math
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ledgermq.bench.broker_bench import _wait_port
from ledgermq.bench.procstat import load_average, rss_split
from ledgermq.bench.replication_bench import MIB, HAPair, _wait_quiet

TOPIC = "MemTopic"
WARMUP, FILL, HOLD, SLOW = "warm-up", "fill", "hold", "slow consumer"
PHASES = (WARMUP, FILL, HOLD, SLOW)


@dataclass(frozen=True, slots=True)
class MemorySettings:
    """What the bench does; the defaults are the figures quoted in docs/benchmarks.md."""

    messages: int = 1_000_000
    size: int = 1024
    batch: int = 64
    in_flight: int = 4  # batches sent at once while filling
    hold_s: float = 10.0
    slow_s: float = 60.0
    slow_rate: int = 200  # messages a second the slow consumer takes
    feed_rate: int = 2_000  # messages a second sent while it consumes
    sample_interval_s: float = 1.0
    segment_mib: int = 256
    data: Path | None = None


@dataclass(frozen=True, slots=True)
class Sample:
    at_s: float
    phase: str
    broker: str
    anon: int
    file: int
    load: float


@dataclass(frozen=True, slots=True)
class PhaseFigures:
    """One broker in one phase: anonymous RSS at its start, peak and end (bytes), peak file RSS."""

    phase: str
    broker: str
    anon_start: int
    anon_max: int
    anon_end: int
    file_max: int
    load_max: float


@dataclass(slots=True)
class MemoryReport:
    settings: MemorySettings
    samples: list[Sample] = field(default_factory=list)
    sent: int = 0
    consumed: int = 0
    fed: int = 0
    phase_seconds: dict[str, float] = field(default_factory=dict)

    def phases(self) -> list[PhaseFigures]:
        out = []
        for broker in ("master", "slave"):
            for phase in PHASES:
                mine = [s for s in self.samples if s.broker == broker and s.phase == phase and s.anon >= 0]
                if not mine:
                    continue
                out.append(
                    PhaseFigures(
                        phase,
                        broker,
                        mine[0].anon,
                        max(s.anon for s in mine),
                        mine[-1].anon,
                        max(s.file for s in mine),
                        max(s.load for s in mine),
                    )
                )
        return out

    def growth_after_warmup(self, broker: str) -> int:
        """Anonymous RSS at the end of the run minus at the end of the warm-up (bytes)."""
        mine = [s for s in self.samples if s.broker == broker and s.anon >= 0]
        warm = [s for s in mine if s.phase == WARMUP]
        if not warm or not mine:
            return 0
        return mine[-1].anon - warm[-1].anon

    def peak_over_warmup(self, broker: str) -> int:
        mine = [s for s in self.samples if s.broker == broker and s.anon >= 0]
        warm = [s for s in mine if s.phase == WARMUP]
        if not warm:
            return 0
        return max(s.anon for s in mine) - warm[-1].anon


class _Sampler:
    """Samples both brokers every interval on the bench's loop, labelled with the phase."""

    def __init__(self, report: MemoryReport, pids: dict[str, int]) -> None:
        self.report = report
        self.pids = pids
        self.phase = WARMUP
        self._t0 = time.monotonic()

    def sample(self) -> None:
        load = load_average()
        at = time.monotonic() - self._t0
        for broker, pid in self.pids.items():
            anon, file = rss_split(pid)
            self.report.samples.append(Sample(at, self.phase, broker, anon, file, load))

    def enter(self, phase: str) -> None:
        """Close the current phase with a sample and open ``phase`` with one, so a phase
        shorter than the interval still has its start and end."""
        self.sample()
        self.phase = phase
        self.sample()

    async def run(self) -> None:
        while True:
            self.sample()
            await asyncio.sleep(self.report.settings.sample_interval_s)


async def _fill(producer: Any, s: MemorySettings, body: bytes) -> int:
    from ledgermq.client import Message

    batches = math.ceil(s.messages / s.batch)
    next_batch = 0
    sent = 0

    async def sender() -> None:
        nonlocal next_batch, sent
        while next_batch < batches:
            next_batch += 1
            await producer.send_batch([Message(TOPIC, body) for _ in range(s.batch)])
            sent += s.batch

    await asyncio.gather(*(sender() for _ in range(s.in_flight)))
    return sent


async def _slow_consumer(pair: HAPair, producer: Any, s: MemorySettings, body: bytes) -> tuple[int, int]:
    """A push consumer held to ``slow_rate`` a second while ``feed_rate`` a second arrive."""
    from ledgermq.client import Message
    from ledgermq.client.consumer.common import ConsumeFromWhere
    from ledgermq.client.push.consume_service import ConsumeConcurrentlyStatus
    from ledgermq.client.push.consumer import PushConsumer
    from ledgermq.protocol.message import MessageRecord

    consumed = 0
    pace = asyncio.Lock()  # one listener call at a time, whatever the consumer's concurrency

    async def listener(msgs: list[MessageRecord], _context: object) -> ConsumeConcurrentlyStatus:
        nonlocal consumed
        async with pace:
            await asyncio.sleep(len(msgs) / s.slow_rate)
            consumed += len(msgs)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    consumer = PushConsumer("mem-slow", pair.namesrv, consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
    consumer.subscribe(TOPIC)
    consumer.register_listener(listener)
    await consumer.start()
    fed = 0
    try:
        start = time.monotonic()
        end = start + s.slow_s
        while (now := time.monotonic()) < end:
            due = int((now - start) * s.feed_rate)
            while fed < due:
                await producer.send(Message(TOPIC, body))
                fed += 1
            await asyncio.sleep(0.01)
    finally:
        try:
            await asyncio.wait_for(consumer.shutdown(), 15.0)
        except TimeoutError:
            pass
    return consumed, fed


async def _run(pair: HAPair, report: MemoryReport, progress: Callable[[str], None]) -> None:
    from ledgermq.client import Message, Producer

    s = report.settings
    body = b"m" * s.size
    pids = {"master": pair.procs[1].pid, "slave": pair.procs[2].pid}
    producer = Producer("mem-bench", pair.namesrv, send_timeout=30.0)
    await producer.start()
    sampler = _Sampler(report, pids)
    sampling = asyncio.create_task(sampler.run())
    try:
        t = time.monotonic()
        for _ in range(200):  # route, topic creation, connections, first pages: not the backlog
            await producer.send(Message(TOPIC, body))
        await asyncio.sleep(3 * s.sample_interval_s)
        report.phase_seconds[WARMUP] = time.monotonic() - t

        progress(f"filling {s.messages:,} messages of {s.size} bytes")
        sampler.enter(FILL)
        t = time.monotonic()
        report.sent = await _fill(producer, s, body)
        await _wait_quiet(pair, 300.0)  # the slave holds it all too
        report.phase_seconds[FILL] = time.monotonic() - t

        progress(f"holding the backlog for {s.hold_s:.0f} s")
        sampler.enter(HOLD)
        t = time.monotonic()
        await asyncio.sleep(s.hold_s)
        report.phase_seconds[HOLD] = time.monotonic() - t

        progress(f"slow consumer: {s.slow_rate}/s taken, {s.feed_rate}/s sent, for {s.slow_s:.0f} s")
        sampler.enter(SLOW)
        t = time.monotonic()
        report.consumed, report.fed = await _slow_consumer(pair, producer, s, body)
        report.phase_seconds[SLOW] = time.monotonic() - t
        sampler.sample()
    finally:
        sampling.cancel()
        try:
            await asyncio.wait_for(producer.shutdown(), 15.0)
        except TimeoutError:
            pass


def run_memory_bench(settings: MemorySettings, progress: Callable[[str], None] = lambda _m: None) -> MemoryReport:
    """Run the whole bench; every process it starts is stopped before it returns."""
    from ledgermq.aio.loops import new_event_loop

    work = settings.data or Path(tempfile.mkdtemp(prefix="ledgermq-mem-"))
    report = MemoryReport(settings)
    pair = HAPair(work, "ASYNC_MASTER", settings.segment_mib * MIB)
    loop = new_event_loop()
    try:
        with pair:
            pair.start_master()
            slave = pair.spawn_slave()
            _wait_port(pair.slave_port, slave)
            loop.run_until_complete(_run(pair, report, progress))
    finally:
        loop.close()
        if settings.data is None:
            shutil.rmtree(work, ignore_errors=True)
    return report
