"""``ledgermq bench timers``: timer messages at scale, against a real broker process.

Three phases, each on a fresh name server and broker (processes, data under a work dir):

* **memory**: the broker's RSS idle, then with ``pending`` timers stored and filed into the
  wheel (all due an hour or more later). Anonymous RSS (the heap: what the process owns)
  must not grow with pending timers; file RSS (pages of the mapped commit log, timer log
  and wheel) is the kernel's page cache, which it evicts under pressure; it grows with
  any million messages written, timers or not, and is shown apart.
* **lateness**: ``lateness_timers`` timers due over ``lateness_spread_s`` seconds; once all
  are delivered the broker stops and the store is read directly: each delivered message's
  store timestamp (when it became visible) minus the time its producer asked for
  (TIMER_DELIVER_MS), p50 / p99 / max.
* **burst**: ordinary sends from ``senders`` concurrent senders for ``window_s`` seconds
  (A), then while ``burst`` timers due in the same second are being delivered (B), then
  again once they all are (A'): B / mean(A, A') is the share of send throughput a burst
  leaves (goal >= 0.8).

The host's 1-minute load average is sampled in every phase: the machine is shared, and
every figure means more next to it.
"""

from __future__ import annotations

import asyncio
import math
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ledgermq.admin.client import AdminClient
from ledgermq.bench.broker_bench import _spawn, _wait_port, _wait_route, spawn_namesrv, stop_processes
from ledgermq.bench.procstat import load_average, rss_split
from ledgermq.client import Message, Producer
from ledgermq.client.message import SendStatus
from ledgermq.config import StoreConfig
from ledgermq.protocol import properties as P
from ledgermq.protocol.message import decode_record
from ledgermq.store.native_store import NativeMessageStore
from ledgermq.testing.ports import free_port

TIMER_TOPIC = "BenchTimers"
PLAIN_TOPIC = "BenchPlain"
QUEUES = 4
PHASES = ("memory", "lateness", "burst")
Progress = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class TimerBenchSettings:
    """What the bench does; the defaults are the figures quoted in docs/benchmarks.md."""

    pending: int = 1_000_000
    lateness_timers: int = 100_000
    lateness_spread_s: float = 60.0
    burst: int = 200_000
    window_s: float = 20.0
    senders: int = 64
    precision_ms: int = 1000
    body_size: int = 100
    phases: tuple[str, ...] = PHASES
    data: Path | None = None


@dataclass(frozen=True, slots=True)
class MemoryFigures:
    pending: int
    send_s: float
    idle_anon: int
    idle_file: int
    pending_anon: int
    pending_file: int
    load: float

    @property
    def anon_growth(self) -> int:
        return self.pending_anon - self.idle_anon

    @property
    def total_growth(self) -> int:
        return self.pending_anon + self.pending_file - self.idle_anon - self.idle_file


@dataclass(frozen=True, slots=True)
class LatenessFigures:
    timers: int
    delivered: int
    duplicates: int
    p50_ms: float
    p99_ms: float
    max_ms: float
    early: int  # visible before the time asked for: must be 0
    load: float


@dataclass(frozen=True, slots=True)
class BurstFigures:
    burst: int
    before_per_s: float
    during_per_s: float
    after_per_s: float
    delivered_during: int  # timers delivered while the "during" window ran
    load: float

    @property
    def ratio(self) -> float:
        base = (self.before_per_s + self.after_per_s) / 2
        return self.during_per_s / base if base else 0.0


@dataclass(slots=True)
class TimerBenchReport:
    settings: TimerBenchSettings
    memory: MemoryFigures | None = None
    lateness: LatenessFigures | None = None
    burst: BurstFigures | None = None
    loads: list[float] = field(default_factory=list)


class TimerBroker:
    """A name server and one broker as processes (killed on exit), with the timer keys given."""

    def __init__(self, work: Path, precision_ms: int) -> None:
        self.work = work
        self.precision_ms = precision_ms
        self.ns_port = free_port()
        self.port = free_port(span=2)
        self.store_dir = work / "store"
        self.procs: list[subprocess.Popen[bytes]] = []

    @property
    def namesrv(self) -> str:
        return f"127.0.0.1:{self.ns_port}"

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        return int(self.procs[-1].pid)

    def __enter__(self) -> TimerBroker:
        self.work.mkdir(parents=True, exist_ok=True)
        self.procs.append(spawn_namesrv(self.work, self.ns_port))
        conf = self.work / "broker.properties"
        lines = [
            "brokerName=bench-timers",
            "brokerIP1=127.0.0.1",
            f"listenPort={self.port}",
            f"namesrvAddr={self.namesrv}",
            f"storePathRootDir={self.store_dir}",
            "mappedFileSizeCommitLog=268435456",
            f"timerPrecisionMs={self.precision_ms}",
            f"defaultTopicQueueNums={QUEUES}",
        ]
        conf.write_text("\n".join(lines) + "\n")
        broker = _spawn(["ledgermq.cli.main", "broker", "-c", str(conf)], self.work / "broker.log")
        self.procs.append(broker)
        _wait_port(self.port, broker)
        _wait_route(self.namesrv, "TBW102", broker)
        return self

    def stop(self) -> None:
        stop_processes(self.procs)
        self.procs.clear()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def status(self) -> dict[str, str]:
        async with AdminClient(self.namesrv, timeout=10.0) as admin:
            return await admin.broker_runtime_info(self.addr)


async def send_all(
    namesrv: str, messages: Callable[[int], Message], count: int, senders: int, group: str
) -> tuple[int, float]:
    """``count`` sends, message ``i`` from ``messages(i)``, by ``senders`` concurrent senders;
    (acknowledged, seconds). A refused send is retried: every one of them counts."""
    async with Producer(group, namesrv, send_timeout=30.0) as producer:
        await producer.send(Message(PLAIN_TOPIC, b"warm-up"))
        next_i = 0
        ok = 0

        async def sender() -> None:
            nonlocal next_i, ok
            while next_i < count:
                i = next_i
                next_i += 1
                for _attempt in range(5):
                    result = await producer.send(messages(i))
                    if result.status is SendStatus.SEND_OK:
                        ok += 1
                        break

        started = time.perf_counter()
        await asyncio.gather(*(sender() for _ in range(senders)))
        return ok, time.perf_counter() - started


async def send_for(namesrv: str, seconds: float, senders: int, body: bytes, group: str) -> float:
    """Ordinary sends for ``seconds`` by ``senders`` concurrent senders; acknowledged per second."""
    async with Producer(group, namesrv, send_timeout=30.0) as producer:
        await producer.send(Message(PLAIN_TOPIC, body))
        ok = 0
        deadline = time.perf_counter() + seconds

        async def sender() -> None:
            nonlocal ok
            while time.perf_counter() < deadline:
                if (await producer.send(Message(PLAIN_TOPIC, body))).status is SendStatus.SEND_OK:
                    ok += 1

        started = time.perf_counter()
        await asyncio.gather(*(sender() for _ in range(senders)))
        return ok / (time.perf_counter() - started)


async def wait_status(broker: TimerBroker, done: Callable[[dict[str, str]], bool], timeout: float) -> dict[str, str]:
    deadline = time.monotonic() + timeout
    while True:
        st = await broker.status()
        if done(st):
            return st
        if time.monotonic() > deadline:
            raise RuntimeError(f"the broker did not get there within {timeout:.0f}s: {st}")
        await asyncio.sleep(0.5)


def _filed(count: int) -> Callable[[dict[str, str]], bool]:
    return lambda st: int(st.get("timerOffsetBehind", "1")) == 0 and int(st.get("timerCongestNum", "0")) >= count


async def _settled_rss(pid: int, seconds: float = 3.0) -> tuple[int, int]:
    """RSS (anon, file) after ``seconds`` of quiet, the last of a few samples."""
    end = time.monotonic() + seconds
    sample = rss_split(pid)
    while time.monotonic() < end:
        await asyncio.sleep(0.5)
        sample = rss_split(pid)
    return sample


def run_memory(s: TimerBenchSettings, work: Path, progress: Progress) -> MemoryFigures:
    with TimerBroker(work, s.precision_ms) as broker:
        body = b"t" * s.body_size

        async def run() -> MemoryFigures:
            await send_all(broker.namesrv, lambda i: Message(PLAIN_TOPIC, body), 100, 4, "bench-warm")
            idle = await _settled_rss(broker.pid, 5.0)
            progress(f"idle broker: anon {idle[0] >> 20} MiB, file {idle[1] >> 20} MiB; sending {s.pending:,} timers")
            ok, seconds = await send_all(
                broker.namesrv,
                lambda i: Message(TIMER_TOPIC, body, delay=3600 + i % 3600),  # an hour or two ahead, 3,600 slots
                s.pending,
                s.senders,
                "bench-timers-mem",
            )
            progress(f"{ok:,} timers sent in {seconds:.0f}s; waiting until filed")
            await wait_status(broker, _filed(ok), 600)
            pending = await _settled_rss(broker.pid, 5.0)
            return MemoryFigures(ok, seconds, idle[0], idle[1], pending[0], pending[1], load_average())

        return asyncio.run(run())


def run_lateness(s: TimerBenchSettings, work: Path, progress: Progress) -> LatenessFigures:
    with TimerBroker(work, s.precision_ms) as broker:
        body = b"l" * s.body_size
        n = s.lateness_timers

        async def run() -> tuple[int, float]:
            # every timer is sent before the first comes due: about twice the time the sends take
            probe_ok, probe_s = await send_all(
                broker.namesrv, lambda i: Message(PLAIN_TOPIC, body), 2000, s.senders, "bench-probe"
            )
            send_s = n / max(probe_ok / probe_s, 1.0)
            first_due = time.time() + 2 * send_s + 10
            progress(f"sending {n:,} timers due over {s.lateness_spread_s:.0f}s from {2 * send_s + 10:.0f}s on")
            ok, seconds = await send_all(
                broker.namesrv,
                lambda i: Message(TIMER_TOPIC, body, deliver_at=first_due + s.lateness_spread_s * i / n),
                n,
                s.senders,
                "bench-timers-late",
            )
            if time.time() > first_due:
                progress(f"warning: the sends took {seconds:.0f}s, past the first timer's time")
            await wait_status(broker, lambda st: int(st.get("timerPending", "1")) == 0, 3 * s.lateness_spread_s + 600)
            return ok, load_average()

        sent, load = asyncio.run(run())
        broker.stop()
    progress("reading the delivered timers back from the store")
    return _lateness_from_store(work / "store", sent, load)


def _lateness_from_store(root: Path, timers: int, load: float) -> LatenessFigures:
    store = NativeMessageStore(StoreConfig(root_dir=str(root), mapped_file_size_commitlog=268435456))
    store.start()
    late: list[float] = []
    seen: set[str] = set()
    duplicates = 0
    try:
        for qid in range(QUEUES):
            offset = 0
            while True:
                got = store.get_message(TIMER_TOPIC, qid, offset, 256)
                if not got.message_count:
                    break
                for raw in got.messages:
                    rec = decode_record(raw, check_crc=False)
                    asked = int(rec.properties[P.TIMER_DELIVER_MS])
                    uid = rec.properties.get(P.UNIQ_KEY, str(offset))
                    if uid in seen:
                        duplicates += 1
                        continue
                    seen.add(uid)
                    late.append(rec.store_timestamp - asked)
                offset += got.message_count
    finally:
        store.shutdown()
    late.sort()

    def pct(q: float) -> float:
        return late[min(len(late) - 1, int(q * len(late)))] if late else math.nan

    return LatenessFigures(
        timers, len(late), duplicates, pct(0.5), pct(0.99), late[-1] if late else math.nan,
        sum(1 for x in late if x < 0), load,
    )  # fmt: skip


def run_burst(s: TimerBenchSettings, work: Path, progress: Progress) -> BurstFigures:
    with TimerBroker(work, s.precision_ms) as broker:
        body = b"b" * s.body_size

        async def run() -> BurstFigures:
            before = await send_for(broker.namesrv, s.window_s, s.senders, body, "bench-before")
            progress(f"ordinary sends, no timers: {before:,.0f}/s; sending {s.burst:,} timers due in one second")
            due = time.time() + 2 * s.burst / max(before, 1.0) + 10
            ok, seconds = await send_all(
                broker.namesrv, lambda i: Message(TIMER_TOPIC, body, deliver_at=due), s.burst, s.senders, "bench-burst"
            )
            await wait_status(broker, _filed(ok), 600)
            if time.time() < due + s.precision_ms / 1000:
                await asyncio.sleep(due + s.precision_ms / 1000 - time.time())
            else:
                progress(f"warning: the timer sends took {seconds:.0f}s, past their time")
            delivered0 = int((await broker.status()).get("timerDelivered", "0"))
            during = await send_for(broker.namesrv, s.window_s, s.senders, body, "bench-during")
            delivered1 = int((await broker.status()).get("timerDelivered", "0"))
            progress(f"during the burst: {during:,.0f}/s, {delivered1 - delivered0:,} timers delivered meanwhile")
            await wait_status(broker, lambda st: int(st.get("timerPending", "1")) == 0, 1800)
            after = await send_for(broker.namesrv, s.window_s, s.senders, body, "bench-after")
            return BurstFigures(ok, before, during, after, delivered1 - delivered0, load_average())

        return asyncio.run(run())


def run_timer_bench(settings: TimerBenchSettings, progress: Progress = lambda _m: None) -> TimerBenchReport:
    unknown = set(settings.phases) - set(PHASES)
    if unknown:
        raise ValueError(f"unknown phases {sorted(unknown)}; choose from {PHASES}")
    report = TimerBenchReport(settings)
    work = settings.data or Path(tempfile.mkdtemp(prefix="ledgermq-timer-bench-"))
    try:
        if "memory" in settings.phases:
            report.memory = run_memory(settings, work / "memory", progress)
            report.loads.append(report.memory.load)
        if "lateness" in settings.phases:
            report.lateness = run_lateness(settings, work / "lateness", progress)
            report.loads.append(report.lateness.load)
        if "burst" in settings.phases:
            report.burst = run_burst(settings, work / "burst", progress)
            report.loads.append(report.burst.load)
    finally:
        if settings.data is None:
            shutil.rmtree(work, ignore_errors=True)
    return report


def median_load(report: TimerBenchReport) -> float:
    return statistics.median(report.loads) if report.loads else math.nan
