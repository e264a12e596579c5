"""The figures the compare bench records, and the settings it runs with.

Kept apart from the runners so the scheduler and the report can be tested with fake
systems, without starting any server.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Protocol

# Workload keys. A system runs only the ones it lists; the report pairs them up.
SYNC = "sync"
INFLIGHT = "inflight"
BATCH = "batch{}"
DRAIN_PUSH = "drain-push"
DRAIN_LITE = "drain-lite"
DRAIN_PULL = "drain-pull"
# The other ways users send (issue #24): ``send_async`` fired in a loop then one gather,
# ``send_async`` paced by ``wait_for_async_capacity``, and the blocking facade's ``send``
# and ``send_async`` (fired in a loop from a thread, Java style, then every future waited).
ASYNC_GATHER = "async-gather"
ASYNC_CAPACITY = "async-capacity"
FACADE_SYNC = "facade-sync"
FACADE_ASYNC = "facade-async"

# The send patterns ``--patterns`` picks from (its names), each with its workload key;
# "batch" stands for every size of ``batches``.
PATTERNS: dict[str, str] = {
    "sync": SYNC,
    "tasks": INFLIGHT,
    "gather": ASYNC_GATHER,
    "capacity": ASYNC_CAPACITY,
    "batch": BATCH,
    "facade": FACADE_SYNC,
    "facade-async": FACADE_ASYNC,
}
# Layouts ``--layouts`` picks from: the master-slave pair against JetStream R1 ("pair"),
# its SYNC_MASTER / SYNC_FLUSH variants, a 3-node DLedger group against a 3-node JetStream
# cluster (R3), and controller mode against JetStream R1.
LAYOUTS = ("pair", "variants", "dledger", "controller")

JETSTREAM = "JetStream"
LEDGERMQ = "ledgermq"
LEDGERMQ_SYNC_MASTER = "ledgermq SYNC_MASTER"
LEDGERMQ_SYNC_FLUSH = "ledgermq SYNC_FLUSH"
LEDGERMQ_DLEDGER = "ledgermq DLedger"
LEDGERMQ_CONTROLLER = "ledgermq controller"
JETSTREAM_R3 = "JetStream R3"


@dataclass(frozen=True, slots=True)
class CompareSettings:
    """Sizes and bounds of one run. ``messages`` is per workload and per round; every
    workload also stops after ``cap_s`` seconds, so a slow system cannot hang the run."""

    messages: int = 20_000
    backlog: int = 50_000
    size: int = 1024
    inflight: int = 256
    batches: tuple[int, ...] = (32, 64)
    cycles: int = 1  # 1 = A B B A: every system runs every workload twice
    cap_s: float = 60.0
    fetch_batch: int = 256  # JetStream pull consumer's fetch size
    variants: bool = True  # the ledgermq-only SYNC_MASTER / SYNC_FLUSH systems
    nats: bool = True
    patterns: tuple[str, ...] = ("sync", "tasks", "gather", "capacity", "batch")  # names of PATTERNS
    layouts: tuple[str, ...] = ("pair", "variants")  # of LAYOUTS
    drains: bool = True  # the drain workloads (pair layout only)

    def send_workloads(self) -> tuple[str, ...]:
        """The workload keys of the chosen send patterns, in the order of ``PATTERNS``."""
        keys: list[str] = []
        for name, key in PATTERNS.items():
            if name in self.patterns:
                keys += [BATCH.format(b) for b in self.batches] if key == BATCH else [key]
        return tuple(keys)


QUICK = CompareSettings(messages=3_000, backlog=10_000, cap_s=15.0)


@dataclass(frozen=True, slots=True)
class Measured:
    """What one workload run returns: messages done, the seconds they took, and the
    latency of each (a batch's round trip counts once per message it carried)."""

    count: int
    seconds: float
    latencies_ms: tuple[float, ...] = ()


@dataclass(slots=True)
class Figures:
    """One (system, workload) summed over its rounds."""

    count: int = 0
    seconds: float = 0.0
    cpu_seconds: float = 0.0
    latencies_ms: list[float] = field(default_factory=list)
    client_cpu_seconds: float = 0.0  # the bench process (where the clients run), all threads

    def add(self, run: Measured, cpu_seconds: float, client_cpu_seconds: float = 0.0) -> None:
        self.count += run.count
        self.seconds += run.seconds
        self.cpu_seconds += cpu_seconds
        self.client_cpu_seconds += client_cpu_seconds
        self.latencies_ms.extend(run.latencies_ms)

    @property
    def rate(self) -> float:
        return self.count / self.seconds if self.seconds > 0 else 0.0

    @property
    def cpu_us_per_msg(self) -> float:
        """Server CPU (every process of the system) per message, in microseconds."""
        return cpu_per_message(self.cpu_seconds, self.count) * 1e6

    @property
    def client_cpu_us_per_msg(self) -> float:
        """Client CPU (the bench process: our client or nats-py) per message, in microseconds."""
        return cpu_per_message(self.client_cpu_seconds, self.count) * 1e6

    def percentile(self, p: float) -> float | None:
        if not self.latencies_ms:
            return None
        if p == 50:
            return statistics.median(self.latencies_ms)
        ordered = sorted(self.latencies_ms)
        return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))]


def cpu_per_message(cpu_seconds: float, count: int) -> float:
    """Seconds of server CPU per message; 0 when nothing was done (no division by zero)."""
    return cpu_seconds / count if count > 0 else 0.0


def cpu_delta(before: dict[int, float], after: dict[int, float]) -> float:
    """CPU seconds the processes used between two readings (``procstat.cpu_seconds`` of each
    pid). A pid unreadable in either reading (-1: gone) adds nothing rather than a negative."""
    total = 0.0
    for pid, start in before.items():
        end = after.get(pid, -1.0)
        if start >= 0 and end >= start:
            total += end - start
    return total


class SystemRunner(Protocol):
    """One system under test, already started: its server processes and its workloads."""

    name: str

    def workloads(self) -> tuple[str, ...]: ...

    def server_pids(self) -> list[int]: ...

    def prepare(self, workload: str, round_no: int) -> None:
        """Work done before the measured run (a backlog to drain, replicas caught up)."""

    def run(self, workload: str, round_no: int) -> Measured: ...


async def timed(body: Callable[[list[float]], Awaitable[int]], cap_s: float) -> Measured:
    """Run a send loop that bounds itself by count and ``cap_s`` (with a hard stop at five
    times that), timing it as a whole; ``body`` fills the latency list and returns the count."""
    latencies: list[float] = []
    started = time.perf_counter()
    count = await asyncio.wait_for(body(latencies), cap_s * 5)
    return Measured(count, time.perf_counter() - started, tuple(latencies))
