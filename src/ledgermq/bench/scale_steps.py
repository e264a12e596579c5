"""The measured steps of ``ledgermq bench scale``, each against a running ``ScaleCluster``.

Every wait polls with a deadline and every loop is bounded by a count as well, so a broker
that breaks (descriptors exhausted, a registration the name server refuses) yields a
figure that says so instead of a hung bench.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ledgermq.admin.client import AdminClient
from ledgermq.bench.scale_cluster import BROKER_NAME, Registration, ScaleCluster
from ledgermq.bench.scale_send import MAX_SENDS_PER_PHASE, SendPool, SendTally, Target

POLL_S = 0.1


# -- 1. topic creation -----------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class CreateResult:
    created: int
    failed: int
    seconds: float
    window_rates: list[float]  # topics/s per window of ``window`` topics, in completion order
    first_error: str


async def create_topics(
    admin: AdminClient, broker_addr: str, topics: Sequence[str], queues: int, inflight: int, window: int
) -> CreateResult:
    """UPDATE_AND_CREATE_TOPIC for every topic, ``inflight`` at a time; the completion
    time of each is kept so the rate of each window of ``window`` topics can be told."""
    done: list[float] = []
    errors: list[str] = []
    next_index = 0
    started = time.monotonic()

    async def creator() -> None:
        nonlocal next_index
        while next_index < len(topics):
            topic = topics[next_index]
            next_index += 1
            try:
                await admin.create_topic(broker_addr, topic, read_queue_nums=queues, write_queue_nums=queues)
                done.append(time.monotonic())
            except Exception as exc:
                errors.append(f"{topic}: {exc}")

    await asyncio.gather(*(creator() for _ in range(max(1, inflight))))
    return CreateResult(
        len(done),
        len(errors),
        time.monotonic() - started,
        window_rates(started, done, window),
        errors[0] if errors else "",
    )


def window_rates(started: float, done: Sequence[float], window: int) -> list[float]:
    """Per consecutive ``window`` completions (the last may be shorter): count / seconds."""
    rates: list[float] = []
    previous = started
    ordered = sorted(done)
    for first in range(0, len(ordered), max(1, window)):
        chunk = ordered[first : first + window]
        span = chunk[-1] - previous
        rates.append(len(chunk) / span if span > 0 else 0.0)
        previous = chunk[-1]
    return rates


async def wait_all_routed(admin: AdminClient, topics: Sequence[str], timeout: float) -> float:
    """Seconds until the name server lists every topic (-1: not within ``timeout``)."""
    wanted = set(topics)
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        try:
            if wanted <= set(await admin.topic_list()):
                return time.monotonic() - started
        except Exception:
            pass
        await asyncio.sleep(POLL_S)
    return -1.0


@dataclass(frozen=True, slots=True)
class RegistrationFigures:
    count: int  # REGISTER_BROKER requests during the step
    total_bytes: int  # their bodies together
    last_body: int  # the last one's body (-1: none seen)
    last_topics: int  # topic configs the last one names
    max_body: int


def registration_figures(cluster: ScaleCluster, since: float) -> RegistrationFigures:
    """The proxy's record of the registrations sent since wall time ``since``."""
    seen: list[Registration] = [r for r in cluster.registrations() if r.t >= since]
    if not seen:
        return RegistrationFigures(0, 0, -1, 0, -1)
    return RegistrationFigures(
        len(seen), sum(r.body for r in seen), seen[-1].body, seen[-1].topics, max(r.body for r in seen)
    )


# -- 2. readability --------------------------------------------------------------------
async def stored_messages(admin: AdminClient, broker_addr: str) -> tuple[int, int, str]:
    """(messages in consume queues, dispatch lag in bytes, storeFailed) from runtime info."""
    info = await admin.broker_runtime_info(broker_addr)
    return (
        int(info.get("msgPutTotalTodayNow", "0")),
        int(info.get("dispatchBehindBytes", "0")),
        info.get("storeFailed", ""),
    )


@dataclass(frozen=True, slots=True)
class Readability:
    readable: int  # messages counted in the consume queues (beyond the baseline)
    seconds: float  # last SEND_OK -> all readable, or until the wait gave up
    complete: bool
    dispatch_behind: int
    store_failed: str
    note: str


async def wait_readable(
    admin: AdminClient, broker_addr: str, baseline: int, tally: SendTally, timeout: float, stall: float
) -> Readability:
    """Poll runtime info until the consume queues hold every SEND_OK'd message (beyond
    ``baseline``) with nothing left to dispatch. Give up after ``timeout`` s, or after
    ``stall`` s of no progress: neither more readable messages nor less left to dispatch
    (a broker out of descriptors retries the same dispatch forever)."""
    readable, behind, failed, note = 0, -1, "", ""
    least_behind = -1
    progress_at = time.monotonic()
    origin = tally.last_ok or tally.ended
    while True:
        now = time.monotonic()
        try:
            stored, behind, failed = await stored_messages(admin, broker_addr)
            if stored - baseline != readable or (least_behind < 0 or behind < least_behind):
                progress_at = now
            readable = stored - baseline
            least_behind = behind if least_behind < 0 else min(least_behind, behind)
        except Exception as exc:
            note = f"runtime info: {exc}"
        if readable >= tally.ok and behind == 0:
            return Readability(readable, time.monotonic() - origin, True, behind, failed, "")
        if now - origin > timeout:
            return Readability(readable, now - origin, False, behind, failed, note or f"gave up after {timeout:.0f}s")
        if now - progress_at > stall:
            why = f"no progress for {stall:.0f}s, {behind:,} bytes left to dispatch"
            return Readability(readable, now - origin, False, behind, failed, note or why)
        await asyncio.sleep(POLL_S)


@dataclass(frozen=True, slots=True)
class QueueCheck:
    one: int  # queues whose max offset is 1, as it should be
    empty: int  # max offset 0: the message sent there is not readable
    more: int  # max offset above 1
    missing: int  # queues the stats did not list (or the topic's stats failed)


async def check_queues(
    admin: AdminClient, broker_addr: str, topics: Sequence[str], queues: int, inflight: int
) -> QueueCheck:
    """GET_TOPIC_STATS_INFO of every topic: each queue's max offset should be exactly 1."""
    one = empty = more = missing = 0
    next_index = 0

    async def checker() -> None:
        nonlocal next_index, one, empty, more, missing
        while next_index < len(topics):
            topic = topics[next_index]
            next_index += 1
            try:
                stats = await admin.topic_stats(broker_addr, topic)
            except Exception:
                missing += queues
                continue
            offsets = [o.max_offset for mq, o in stats.items() if mq.queue_id < queues]
            one += sum(1 for m in offsets if m == 1)
            empty += sum(1 for m in offsets if m == 0)
            more += sum(1 for m in offsets if m > 1)
            missing += queues - len(offsets)

    await asyncio.gather(*(checker() for _ in range(max(1, inflight))))
    return QueueCheck(one, empty, more, missing)


# -- 4. restart ------------------------------------------------------------------------
async def wait_serving(cluster: ScaleCluster, admin: AdminClient, topic: str, timeout: float) -> tuple[float, str]:
    """From now until the broker has registered again (a REGISTER_BROKER through the proxy
    since now), the name server routes ``topic`` to it, and a send to it is SEND_OK:
    (seconds, "") or (-1, why not). The new registration is required because after a
    SIGKILL the name server still holds the dead broker's route."""
    pool = SendPool(cluster.broker_addr, BROKER_NAME, b"restart-probe", 1)
    started, since = time.monotonic(), time.time()
    registered = False
    last = "nothing tried"
    try:
        while time.monotonic() - started < timeout:
            proc = cluster.broker
            if proc is None or proc.poll() is not None:
                return -1.0, f"the broker exited ({None if proc is None else proc.returncode})"
            try:
                registered = registered or any(r.t >= since for r in cluster.registrations())
                route = await admin.route(topic)
                addrs = [a for b in route.broker_datas for a in b.broker_addrs.values()]
                if not registered:
                    last = "not registered again yet"
                elif cluster.broker_addr not in addrs:
                    last = "route without the broker"
                else:
                    last = await pool.send_one(pool.clients[0], (topic, 0))
                    if last == "SEND_OK":
                        return time.monotonic() - started, ""
            except Exception as exc:
                last = f"{type(exc).__name__}: {exc}"
            await asyncio.sleep(POLL_S)
        return -1.0, f"not serving after {timeout:.0f}s (last: {last})"
    finally:
        await pool.close()


# -- 5. one topic vs round robin -------------------------------------------------------
@dataclass(frozen=True, slots=True)
class RoundRobin:
    one_topic: SendTally  # both A phases together
    spread: SendTally  # both B phases together
    topics: int
    settle_s: list[float]  # before each phase: seconds until nothing was left to dispatch (-1: gave up)

    @property
    def ratio(self) -> float:
        return self.spread.rate / self.one_topic.rate if self.one_topic.rate > 0 else 0.0


def _merge(a: SendTally, b: SendTally) -> SendTally:
    """Two phases as one: answers added, seconds added (``started`` stands at 0)."""
    merged = SendTally(a.statuses + b.statuses, max(a.last_ok, b.last_ok), 0.0, a.seconds + b.seconds)
    for status in set(a.statuses) | set(b.statuses):  # Counter + drops zero counts; keep SEND_OK's 0
        merged.statuses[status] = a.statuses[status] + b.statuses[status]
    return merged


async def settle(admin: AdminClient, broker_addr: str, timeout: float) -> float:
    """Seconds until the broker has nothing left to dispatch (-1: not within ``timeout``)."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        try:
            if (await stored_messages(admin, broker_addr))[1] == 0:
                return time.monotonic() - started
        except Exception:
            pass
        await asyncio.sleep(POLL_S)
    return -1.0


async def round_robin(
    pool: SendPool, admin: AdminClient, topics: Sequence[str], queues: int, seconds: float, settle_timeout: float
) -> RoundRobin:
    """Sends to one topic (A) and round-robin over ``topics`` (B), ``seconds`` each, ABBA.
    Each phase starts once nothing is left to dispatch, so none inherits the dispatch work
    of the one before (a first message in a queue costs its consume-queue file)."""
    first = topics[0]

    def one(i: int) -> Target:
        return first, i % queues

    def spread(i: int) -> Target:
        return topics[i % len(topics)], (i // len(topics)) % queues

    plan: list[Callable[[int], Target]] = [one, spread, spread, one]
    runs, settled = [], []
    for target in plan:
        settled.append(await settle(admin, pool.broker_addr, settle_timeout))
        runs.append(await pool.run(target, MAX_SENDS_PER_PHASE, seconds))
    return RoundRobin(_merge(runs[0], runs[3]), _merge(runs[1], runs[2]), len(topics), settled)
