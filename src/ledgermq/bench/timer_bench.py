"""``ledgermq bench timers``: timer messages at scale, against real broker processes.

Three phases, each on fresh name servers and brokers (processes, data under a work dir):

* **memory**, like for like: (1) an idle broker; (2) an idle broker holding ``pending``
  ordinary messages of the same stored size (bodies padded by the ~90 bytes of properties
  a timer's record carries more, so both commit logs are as large); (3) a broker holding
  ``pending`` timers, filed
  into the wheel (all due an hour or more later). Each is read from /proc/<pid>/status
  (VmRSS, RssAnon, RssFile) once the store settled: written, dispatched and filed, and the
  resident set steady for a few seconds. RssAnon (the heap: what the process owns) must not
  grow with pending timers; RSS is judged against (2), because any million messages leave
  pages of the mapped commit log resident (file RSS, page cache the kernel evicts under
  pressure), timers or not. (1) and (3) are the same broker, (2) is another one, run after.
* **lateness**: ``lateness_timers`` timers due over ``lateness_spread_s`` seconds, all sent
  before the first is due; once all are delivered the broker stops and the store is read
  directly: each delivered message's store timestamp (when it was written) minus the time
  its producer asked for (TIMER_DELIVER_MS), p50 / p99 / max; and minus the end of the step
  it was filed under (TIMER_OUT_MS + precision): what delivery adds to the step, the part
  of the lateness that is not the rounding up to a step. The broker's CPU seconds from the
  first timer's time to the last delivery, per timer, say what delivering costs whatever
  the load. A run whose sends ended after the first timer's time says so: its figures
  measure a backlog, not lateness.
* **burst**: rounds of ordinary sends from ``senders`` concurrent senders for ``window_s``
  seconds each, alternating without (A) and with (B) ``burst`` timers coming due in the same
  second as the window starts, in the order A B B A, ``burst_cycles`` times (at least two of
  each). A B round's timers are sent, filed and come due just before its window, and are
  all delivered before the next round. The ratio of each B to the A beside it (A1 B1, B2 A2)
  is the share of send throughput a burst leaves; the median of them is quoted (goal
  >= 0.8). The broker's CPU seconds in each window are shown too: under load wall-clock
  rates move more than CPU does.

The host's 1-minute load average is sampled in every phase and round: the machine is
shared, and every figure means more next to it.
"""

from __future__ import annotations

import asyncio
import dataclasses
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
from ledgermq.bench.procstat import ProcMemory, cpu_seconds, load_average, memory, rss_split
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
    burst_cycles: int = 1  # A B B A this many times
    window_s: float = 20.0
    senders: int = 64
    precision_ms: int = 1000
    body_size: int = 100
    phases: tuple[str, ...] = PHASES
    data: Path | None = None


@dataclass(frozen=True, slots=True)
class MemoryFigures:
    """The three like-for-like states; ``*_log_bytes`` are the commit logs' sizes."""

    pending: int
    send_s: float
    idle: ProcMemory  # (1)
    ordinary: ProcMemory  # (2)
    timers: ProcMemory  # (3)
    ordinary_body: int  # (2)'s body size: padded so its records are as large as (3)'s
    ordinary_log_bytes: int
    timers_log_bytes: int
    load: float

    @property
    def anon_growth(self) -> int:
        """(3) - (1) in RssAnon: what pending timers cost the process itself."""
        return self.timers.anon - self.idle.anon

    @property
    def rss_over_ordinary(self) -> int:
        """(3) - (2) in VmRSS: what timers cost beyond as many ordinary messages."""
        return self.timers.rss - self.ordinary.rss

    @property
    def file_over_ordinary(self) -> int:
        return self.timers.file - self.ordinary.file


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
    past_step_p50_ms: float = math.nan  # store timestamp minus the end of the step it was filed under
    past_step_p99_ms: float = math.nan
    past_step_max_ms: float = math.nan
    broker_cpu_us: float = math.nan  # the broker's CPU per delivered timer, from the first one's time on
    sends_overran: bool = False  # the sends ended after the first timer's time: a backlog, not lateness


@dataclass(frozen=True, slots=True)
class BurstRound:
    """One send window: ``with_burst`` (B) while a burst is being delivered, else (A)."""

    index: int
    with_burst: bool
    per_s: float
    broker_cpu_s: float  # the broker's user + system CPU seconds during the window
    window_s: float
    delivered_during: int  # timers delivered during the window
    load: float
    came_due_early: bool = False  # the burst came due before its sends ended (part delivered before the window)

    @property
    def broker_busy(self) -> float:
        """The broker's CPU seconds per second of the window: near 1.0 (one core) the broker
        limits the rate; far below, the senders (or the machine) do."""
        return self.broker_cpu_s / self.window_s if self.window_s else math.nan


@dataclass(frozen=True, slots=True)
class BurstFigures:
    burst: int
    rounds: tuple[BurstRound, ...]

    @property
    def ratios(self) -> list[float]:
        """B / A of each A B or B A pair, in round order (A B B A: pairs (0, 1) and (2, 3))."""
        out: list[float] = []
        for i in range(0, len(self.rounds) - 1, 2):
            a, b = (self.rounds[i], self.rounds[i + 1])
            if a.with_burst:
                a, b = b, a
            out.append(b.per_s / a.per_s if a.per_s else 0.0)
        return out

    @property
    def ratio(self) -> float:
        return statistics.median(self.ratios) if self.ratios else 0.0

    @property
    def load(self) -> float:
        return statistics.median(r.load for r in self.rounds) if self.rounds else math.nan


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


async def _settled_memory(pid: int, min_s: float = 5.0, max_s: float = 60.0) -> ProcMemory:
    """``ProcMemory`` once VmRSS stayed within 1 MiB over the last 3 s (at least ``min_s``,
    at most ``max_s``: the last sample then)."""
    start = time.monotonic()
    samples = [memory(pid)]
    while time.monotonic() - start < max_s:
        await asyncio.sleep(0.5)
        samples.append(memory(pid))
        recent = [m.rss for m in samples[-7:]]
        if time.monotonic() - start >= min_s and len(recent) == 7 and max(recent) - min(recent) < (1 << 20):
            break
    return samples[-1]


async def _stored(broker: TimerBroker, timeout: float = 600) -> dict[str, str]:
    """Until everything sent is flushed and dispatched to the consume queues."""

    def done(st: dict[str, str]) -> bool:
        return int(st.get("dispatchBehindBytes", "1")) == 0 and st.get("commitLogFlushedOffset") == st.get(
            "commitLogMaxOffset"
        )

    return await wait_status(broker, done, timeout)


def _mib(n: int) -> str:
    return f"{n / (1 << 20):.1f}"


def _shown(m: ProcMemory) -> str:
    return f"RSS {_mib(m.rss)} MiB (anon {_mib(m.anon)}, file {_mib(m.file)})"


def run_memory(s: TimerBenchSettings, work: Path, progress: Progress) -> MemoryFigures:
    """(1) and (3) on one broker, then (2) on another, its bodies padded so its commit log is
    as large as (3)'s: a timer's record carries about 90 bytes of properties more (its real
    topic and queue, its time), and the file pages compared are mostly the commit log's."""
    body = b"t" * s.body_size
    warm = 100
    with TimerBroker(work / "timers", s.precision_ms) as broker:

        async def timers() -> tuple[ProcMemory, ProcMemory, int, float, int, int]:
            await send_all(broker.namesrv, lambda i: Message(PLAIN_TOPIC, body), warm, 4, "bench-warm")
            warm_bytes = int((await _stored(broker))["commitLogMaxOffset"])
            idle = await _settled_memory(broker.pid)
            progress(f"(1) idle broker: {_shown(idle)}; sending {s.pending:,} timers")
            ok, seconds = await send_all(
                broker.namesrv,
                lambda i: Message(TIMER_TOPIC, body, delay=3600 + i % 3600),  # an hour or two ahead, 3,600 slots
                s.pending,
                s.senders,
                "bench-timers-mem",
            )
            progress(f"{ok:,} timers sent in {seconds:.0f}s; waiting until filed")
            await wait_status(broker, _filed(ok), 600)
            st = await _stored(broker)
            held = await _settled_memory(broker.pid)
            progress(f"(3) {ok:,} timers pending: {_shown(held)}")
            return idle, held, ok, seconds, warm_bytes, int(st["commitLogMaxOffset"])

        idle, held_timers, ok, seconds, warm_bytes, timer_bytes = asyncio.run(timers())
    timer_record = (timer_bytes - warm_bytes) / max(ok, 1)
    ordinary_record = warm_bytes / warm
    padded = b"t" * (s.body_size + max(0, round(timer_record - ordinary_record)))
    with TimerBroker(work / "ordinary", s.precision_ms) as plain:

        async def ordinary() -> tuple[ProcMemory, int]:
            await send_all(plain.namesrv, lambda i: Message(PLAIN_TOPIC, body), warm, 4, "bench-warm")
            progress(f"(2) sending {ok:,} ordinary messages of {len(padded)} bytes (records of {timer_record:.0f})")
            await send_all(plain.namesrv, lambda i: Message(PLAIN_TOPIC, padded), ok, s.senders, "bench-ordinary")
            st = await _stored(plain)
            held = await _settled_memory(plain.pid)
            progress(f"(2) {ok:,} ordinary messages held: {_shown(held)}")
            return held, int(st["commitLogMaxOffset"])

        held_ordinary, ordinary_bytes = asyncio.run(ordinary())
    return MemoryFigures(
        ok, seconds, idle, held_ordinary, held_timers, len(padded), ordinary_bytes, timer_bytes, load_average()
    )


def run_lateness(s: TimerBenchSettings, work: Path, progress: Progress) -> LatenessFigures:
    with TimerBroker(work, s.precision_ms) as broker:
        body = b"l" * s.body_size
        n = s.lateness_timers

        async def run() -> tuple[int, float, float, bool]:
            # every timer is sent before the first comes due: three times what the sends should
            # take (the load on a shared machine moves between the probe and the sends)
            probe_ok, probe_s = await send_all(
                broker.namesrv, lambda i: Message(PLAIN_TOPIC, body), 2000, s.senders, "bench-probe"
            )
            lead_s = 3 * n / max(probe_ok / probe_s, 1.0) + 10
            first_due = time.time() + lead_s
            progress(f"sending {n:,} timers due over {s.lateness_spread_s:.0f}s from {lead_s:.0f}s on")
            ok, seconds = await send_all(
                broker.namesrv,
                lambda i: Message(TIMER_TOPIC, body, deliver_at=first_due + s.lateness_spread_s * i / n),
                n,
                s.senders,
                "bench-timers-late",
            )
            overran = time.time() > first_due
            if overran:
                progress(f"warning: the sends took {seconds:.0f}s, past the first timer's time")
            else:
                await asyncio.sleep(first_due - time.time())
            cpu_before = cpu_seconds(broker.pid)
            await wait_status(broker, lambda st: int(st.get("timerPending", "1")) == 0, 3 * s.lateness_spread_s + 600)
            return ok, load_average(), cpu_seconds(broker.pid) - cpu_before, overran

        sent, load, cpu_s, overran = asyncio.run(run())
        broker.stop()
    progress("reading the delivered timers back from the store")
    figures = _lateness_from_store(work / "store", sent, load, s.precision_ms)
    cpu_us = 1e6 * cpu_s / figures.delivered if figures.delivered else math.nan
    return dataclasses.replace(figures, broker_cpu_us=cpu_us, sends_overran=overran)


def _lateness_from_store(root: Path, timers: int, load: float, precision_ms: int) -> LatenessFigures:
    store = NativeMessageStore(StoreConfig(root_dir=str(root), mapped_file_size_commitlog=268435456))
    store.start()
    late: list[float] = []
    past_step: list[float] = []
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
                    past_step.append(rec.store_timestamp - int(rec.properties[P.TIMER_OUT_MS]) - precision_ms)
                offset += got.message_count
    finally:
        store.shutdown()
    late.sort()
    past_step.sort()

    def pct(values: list[float], q: float) -> float:
        return values[min(len(values) - 1, int(q * len(values)))] if values else math.nan

    return LatenessFigures(
        timers, len(late), duplicates, pct(late, 0.5), pct(late, 0.99), pct(late, 1.0),
        sum(1 for x in late if x < 0), load, pct(past_step, 0.5), pct(past_step, 0.99), pct(past_step, 1.0),
    )  # fmt: skip


ABBA = (False, True, True, False)


async def _burst_due(
    broker: TimerBroker, s: TimerBenchSettings, body: bytes, timer_rate: float, progress: Progress
) -> tuple[float, bool]:
    """Send ``s.burst`` timers due in one second, twice as far ahead as sending them should
    take at ``timer_rate``; wait until they are filed and that second has passed. (timers
    sent per second, whether they came due before the sends ended)."""
    due = time.time() + 2 * s.burst / max(timer_rate, 1.0) + 10
    ok, seconds = await send_all(
        broker.namesrv, lambda i: Message(TIMER_TOPIC, body, deliver_at=due), s.burst, s.senders, "bench-burst"
    )
    # filed (possibly delivered already, if they came due meanwhile: then the count is gone)
    await wait_status(broker, lambda st: int(st.get("timerOffsetBehind", "1")) == 0, 600)
    early = time.time() >= due + s.precision_ms / 1000
    if early:
        progress(f"warning: the timer sends took {seconds:.0f}s, past their time: the burst came due before the window")
    else:
        await asyncio.sleep(due + s.precision_ms / 1000 - time.time())
    return ok / seconds if seconds else timer_rate, early


async def _window(
    broker: TimerBroker, s: TimerBenchSettings, body: bytes, index: int, with_burst: bool, early: bool = False
) -> BurstRound:
    delivered0 = int((await broker.status()).get("timerDelivered", "0"))
    cpu0, t0 = cpu_seconds(broker.pid), time.monotonic()
    per_s = await send_for(broker.namesrv, s.window_s, s.senders, body, f"bench-round-{index}")
    cpu, elapsed = cpu_seconds(broker.pid) - cpu0, time.monotonic() - t0
    delivered = int((await broker.status()).get("timerDelivered", "0")) - delivered0
    return BurstRound(index, with_burst, per_s, cpu, elapsed, delivered, load_average(), early)


def run_burst(s: TimerBenchSettings, work: Path, progress: Progress) -> BurstFigures:
    with TimerBroker(work, s.precision_ms) as broker:
        body = b"b" * s.body_size

        async def run() -> BurstFigures:
            rate = await send_for(broker.namesrv, min(5.0, s.window_s), s.senders, body, "bench-warm")
            timer_rate = rate / 3  # a first guess: a timer send costs more than an ordinary one
            rounds: list[BurstRound] = []
            for with_burst in ABBA * max(1, s.burst_cycles):
                early = False
                if with_burst:
                    progress(f"round {len(rounds) + 1}: sending {s.burst:,} timers due in one second")
                    timer_rate, early = await _burst_due(broker, s, body, timer_rate, progress)
                r = await _window(broker, s, body, len(rounds) + 1, with_burst, early)
                rounds.append(r)
                what = f"B, {r.delivered_during:,} timers delivered meanwhile" if with_burst else "A"
                progress(f"round {r.index} ({what}): {r.per_s:,.0f} sends/s, broker busy {r.broker_busy:.0%}, "
                         f"load {r.load:.1f}")  # fmt: skip
                if with_burst:  # the next round starts with nothing left to deliver
                    await wait_status(broker, lambda st: int(st.get("timerPending", "1")) == 0, 1800)
            return BurstFigures(s.burst, tuple(rounds))

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
