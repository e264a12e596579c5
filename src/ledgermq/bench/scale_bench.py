"""``ledgermq bench scale``: what thousands of topics and a hundred thousand queues cost.

One name server and one broker run as processes on 127.0.0.1 (free ports, a fresh store;
the broker registers through a recording proxy, ``register_proxy``). In order:

1. Topic creation: T topics of Q queues through the admin client, ``create_inflight`` at
   a time; the rate per window of ``window`` topics (first and last: a falling rate shows),
   the seconds until the name server lists every topic, and the REGISTER_BROKER traffic
   the proxy saw meanwhile (count, bytes, the last body's size and topic count).
2. Readability: one message to every queue (raw SEND_MESSAGE_V2, explicit queue ids,
   ``send_inflight`` at a time), then the time from the last SEND_OK until the consume
   queues hold every one (runtime info: ``msgPutTotalTodayNow`` over its value before the
   sends, ``dispatchBehindBytes`` 0), then GET_TOPIC_STATS_INFO of every topic to check
   each queue's max offset is 1. SEND_OKs that never become readable are a mismatch, and
   the report flags it: a broker out of descriptors kept answering SEND_OK for those.
3. The broker's open descriptors (/proc/<pid>/fd), its open-file limit and RSS.
4. Restart: SIGTERM and wait, start, time until the broker has registered again (seen by
   the proxy), the name server routes a bench topic to it and a send is SEND_OK; then the
   same after SIGKILL.
5. Send rate with ``send_inflight`` in flight to one topic (A) and round-robin over R
   topics (B), ``duration`` s per phase, ABBA, and B / A; each phase starts once the
   broker has nothing left to dispatch (the waits are reported).

Every figure carries the host's 1-minute load average when it was taken.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ledgermq.admin.client import AdminClient
from ledgermq.bench import procstat
from ledgermq.bench.scale_cluster import BROKER_NAME, ScaleCluster
from ledgermq.bench.scale_send import SendPool
from ledgermq.bench.scale_steps import (
    check_queues,
    create_topics,
    registration_figures,
    round_robin,
    stored_messages,
    wait_all_routed,
    wait_readable,
    wait_serving,
)

TOPIC_PREFIX = "ScaleTopic"


@dataclass(frozen=True, slots=True)
class ScaleSettings:
    topics: int = 10_000
    queues: int = 8
    create_inflight: int = 16
    window: int = 1_000  # topics per creation-rate window
    fill_topics: int | None = None  # topics whose every queue gets a message (None: all)
    send_inflight: int = 256
    body_size: int = 1024
    round_robin_topics: int = 2_000
    duration: float = 10.0  # seconds per send phase (four phases, ABBA)
    route_timeout: float = 120.0  # creation done -> the name server lists every topic
    readable_timeout: float = 300.0  # last SEND_OK -> every message readable
    stall: float = 30.0  # give up on readability this long without progress
    restart_timeout: float = 300.0
    nofile: int | None = None  # the broker's open-file limit, soft and hard (None: inherited)
    data: Path | None = None  # work directory, kept (None: a temporary one, removed)


@dataclass(frozen=True, slots=True)
class Figure:
    key: str  # stable name in the JSON
    step: str
    label: str
    value: float | int | str
    unit: str
    load: float  # the host's 1-minute load average when it was taken
    alarm: bool = False  # something is wrong: printed prominently


@dataclass(slots=True)
class ScaleReport:
    command: str
    settings: ScaleSettings
    figures: list[Figure] = field(default_factory=list)
    window_rates: list[float] = field(default_factory=list)
    work: str = ""

    def add(
        self, key: str, step: str, label: str, value: float | int | str, unit: str = "", alarm: bool = False
    ) -> None:
        self.figures.append(Figure(key, step, label, value, unit, round(procstat.load_average(), 2), alarm))

    def value(self, key: str) -> float | int | str | None:
        return next((f.value for f in self.figures if f.key == key), None)

    def to_json(self) -> dict[str, Any]:
        settings = {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(self.settings).items()}
        return {
            "command": self.command,
            "settings": settings,
            "work": self.work,
            "figures": [asdict(f) for f in self.figures],
            "create_window_rates": [round(r, 1) for r in self.window_rates],
        }


def topic_names(count: int) -> list[str]:
    return [f"{TOPIC_PREFIX}{i:06d}" for i in range(count)]


class _Run:
    """One run's state: the cluster, one admin client, the report being filled."""

    def __init__(
        self, cluster: ScaleCluster, settings: ScaleSettings, report: ScaleReport, progress: Callable[[str], None]
    ) -> None:
        self.cluster = cluster
        self.s = settings
        self.report = report
        self.progress = progress
        self.topics = topic_names(settings.topics)
        self.admin = AdminClient(cluster.namesrv, timeout=30.0)

    async def create(self) -> None:
        s, r, pid = self.s, self.report, self.cluster.broker_pid
        self.progress(f"creating {s.topics:,} topics x {s.queues} queues, {s.create_inflight} in flight")
        cpu0, wall0 = procstat.cpu_seconds(pid), time.time()
        res = await create_topics(
            self.admin, self.cluster.broker_addr, self.topics, s.queues, s.create_inflight, s.window
        )
        r.window_rates = res.window_rates
        step = "1 create"
        r.add("create_seconds", step, f"{res.created:,} topics x {s.queues} queues created", round(res.seconds, 2), "s")
        r.add(
            "create_rate", step, "creation rate, whole run", round(res.created / max(res.seconds, 1e-9), 1), "topics/s"
        )
        if res.window_rates:
            w = min(s.window, s.topics)
            r.add(
                "create_rate_first_window",
                step,
                f"creation rate, first {w:,} topics",
                round(res.window_rates[0], 1),
                "topics/s",
            )
            r.add(
                "create_rate_last_window",
                step,
                f"creation rate, last window ({len(res.window_rates)} windows)",
                round(res.window_rates[-1], 1),
                "topics/s",
            )
        if res.failed:
            r.add("create_failed", step, f"creations failed (first: {res.first_error[:80]})", res.failed, alarm=True)
        routed = await wait_all_routed(self.admin, self.topics, s.route_timeout)
        r.add(
            "routed_after_s",
            step,
            "creation done -> name server lists every topic",
            round(routed, 2) if routed >= 0 else f"not within {s.route_timeout:.0f}s",
            "s",
            alarm=routed < 0,
        )
        await asyncio.sleep(0.2)  # the proxy writes its line as the last bytes go through
        reg = registration_figures(self.cluster, wall0)
        r.add("register_count", step, "REGISTER_BROKER sent during creation (proxy)", reg.count)
        r.add("register_bytes_total", step, "their bodies together", reg.total_bytes, "bytes")
        r.add(
            "register_body_last",
            step,
            f"last registration body ({reg.last_topics:,} topic configs)",
            reg.last_body,
            "bytes",
        )
        r.add(
            "broker_cpu_create_s", step, "broker CPU during creation", round(procstat.cpu_seconds(pid) - cpu0, 2), "s"
        )
        r.add("broker_fds_after_create", step, "broker open descriptors after creation", procstat.fd_count(pid))

    async def readability(self) -> None:
        s, r, pid = self.s, self.report, self.cluster.broker_pid
        used = self.topics[: s.fill_topics] if s.fill_topics is not None else self.topics
        total = len(used) * s.queues
        step = "2 readable"
        self.progress(f"sending one message to each of {total:,} queues, {s.send_inflight} in flight")
        baseline, _behind, _failed = await stored_messages(self.admin, self.cluster.broker_addr)
        pool = SendPool(self.cluster.broker_addr, BROKER_NAME, b"x" * s.body_size, s.send_inflight)
        cpu0 = procstat.cpu_seconds(pid)
        try:
            tally = await pool.run(lambda i: (used[i // s.queues], i % s.queues), total)
        finally:
            await pool.close()
        r.add("sent", step, f"messages sent, one per queue of {len(used):,} topics", total)
        r.add("send_ok", step, "answered SEND_OK", tally.ok)
        if tally.failed:
            others = ", ".join(f"{k} {v:,}" for k, v in tally.statuses.most_common() if k != "SEND_OK")
            r.add("send_failed", step, f"not SEND_OK ({others[:80]})", tally.failed, alarm=True)
        r.add("send_rate", step, "send rate", round(tally.rate, 1), "msgs/s")
        self.progress("waiting until every SEND_OK'd message is readable")
        ready = await wait_readable(self.admin, self.cluster.broker_addr, baseline, tally, s.readable_timeout, s.stall)
        r.add("readable", step, "readable (consume-queue entries added)", ready.readable)
        r.add(
            "readable_after_s",
            step,
            "last SEND_OK -> every message readable",
            round(ready.seconds, 3)
            if ready.complete
            else f"never: {ready.readable:,} after {ready.seconds:.0f}s ({ready.note})",
            "s",
            alarm=not ready.complete,
        )
        check = await check_queues(self.admin, self.cluster.broker_addr, used, s.queues, s.create_inflight)
        r.add("queues_at_1", step, f"queues whose max offset is 1 (of {total:,})", check.one, alarm=check.one != total)
        if check.empty or check.more or check.missing:
            r.add(
                "queues_wrong",
                step,
                f"queues at 0: {check.empty:,}, above 1: {check.more:,}, not listed: {check.missing:,}",
                check.empty + check.more + check.missing,
                alarm=True,
            )
        mismatch = tally.ok - ready.readable
        label = "SEND_OK but not readable" if mismatch >= 0 else "readable beyond the SEND_OKs"
        r.add("mismatch", step, ("MISMATCH: " if mismatch else "") + label, mismatch, alarm=mismatch != 0)
        if ready.store_failed:
            r.add("store_failed", step, "the store says it failed", ready.store_failed[:80], alarm=True)
        r.add(
            "broker_cpu_send_s", step, "broker CPU, sends and dispatch", round(procstat.cpu_seconds(pid) - cpu0, 2), "s"
        )

    def resources(self) -> None:
        r, pid, step = self.report, self.cluster.broker_pid, "3 resources"
        fds, limit = procstat.fd_count(pid), procstat.nofile_limit(pid)
        r.add("broker_fds", step, f"broker open descriptors (limit {limit:,})", fds, alarm=limit > 0 and fds >= limit)
        r.add("broker_nofile", step, "broker open-file limit (soft)", limit)
        r.add("broker_rss_mib", step, "broker RSS", round(procstat.rss_bytes(pid) / 2**20, 1), "MiB")

    async def restart(self, *, kill: bool) -> None:
        r, step = self.report, "4 restart"
        how = "SIGKILL" if kill else "SIGTERM"
        key = "restart_kill_s" if kill else "restart_clean_s"
        if self.cluster.broker is None or self.cluster.broker.poll() is not None:
            r.add(key, step, f"restart after {how}", "skipped: the broker is not running", alarm=True)
            return
        self.progress(f"restart after {how}")
        stopped = self.cluster.stop_broker(kill=kill)
        if not kill:
            r.add("stop_clean_s", step, "clean stop (SIGTERM -> exit)", round(stopped, 2), "s")
        self.cluster.start_broker()
        seconds, why = await wait_serving(self.cluster, self.admin, self.topics[-1], self.s.restart_timeout)
        r.add(
            key,
            step,
            f"start after {how} -> registered, routed, a send SEND_OK",
            round(seconds, 2) if seconds >= 0 else why[:90],
            "s",
            alarm=seconds < 0,
        )

    async def round_robin(self) -> None:
        s, r, step = self.s, self.report, "5 round robin"
        if self.cluster.broker is None or self.cluster.broker.poll() is not None:
            r.add("rr_ratio", step, "round robin / one topic", "skipped: the broker is not running", alarm=True)
            return
        spread = self.topics[: s.round_robin_topics]
        self.progress(f"sending {s.duration:g}s per phase: one topic / {len(spread):,} topics, ABBA")
        pool = SendPool(self.cluster.broker_addr, BROKER_NAME, b"x" * s.body_size, s.send_inflight)
        try:
            rr = await round_robin(pool, self.admin, spread, s.queues, s.duration, s.readable_timeout)
        finally:
            await pool.close()
        r.add(
            "rr_one_topic_rate",
            step,
            f"{s.send_inflight} in flight, {s.body_size} B, one topic",
            round(rr.one_topic.rate, 1),
            "msgs/s",
        )
        r.add(
            "rr_spread_rate", step, f"same, round robin over {rr.topics:,} topics", round(rr.spread.rate, 1), "msgs/s"
        )
        r.add("rr_ratio", step, "round robin / one topic", round(rr.ratio, 3))
        waits = ", ".join(f"{w:.1f}" if w >= 0 else "gave up" for w in rr.settle_s)
        r.add(
            "rr_settle_s",
            step,
            f"waits for dispatch lag 0 before each phase: {waits}",
            round(sum(max(w, 0.0) for w in rr.settle_s), 2),
            "s",
            alarm=min(rr.settle_s) < 0,
        )
        failed = rr.one_topic.failed + rr.spread.failed
        if failed:
            r.add("rr_failed", step, "sends not SEND_OK in these phases", failed, alarm=True)

    async def run(self) -> None:
        try:
            await self.create()
            await self.readability()
            self.resources()
            await self.restart(kill=False)
            await self.restart(kill=True)
            await self.round_robin()
        finally:
            await self.admin.close()


def run_scale_bench(settings: ScaleSettings, command: str, progress: Callable[[str], None]) -> ScaleReport:
    """Start the processes, measure, stop every process; the report of what was measured."""
    from ledgermq.aio.loops import new_event_loop

    work = settings.data or Path(tempfile.mkdtemp(prefix="ledgermq-scale-"))
    work.mkdir(parents=True, exist_ok=True)
    report = ScaleReport(command, settings, work=str(work) if settings.data else "")
    loop = new_event_loop()
    try:
        progress(f"starting a name server, a proxy and a broker under {work}")
        with ScaleCluster(work, settings.nofile) as cluster:
            loop.run_until_complete(_wait_first_serving(cluster))
            loop.run_until_complete(_Run(cluster, settings, report, progress).run())
    finally:
        loop.close()
        if settings.data is None:
            shutil.rmtree(work, ignore_errors=True)
    return report


async def _wait_first_serving(cluster: ScaleCluster) -> None:
    """Until the fresh broker's default topic is routed: it has registered once."""
    async with AdminClient(cluster.namesrv, timeout=5.0) as admin:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                await admin.route("TBW102")
                return
            except Exception:
                await asyncio.sleep(0.1)
    raise RuntimeError("the broker never registered with the name server")
