"""Server CPU per acknowledged send, per process: what one replication round costs each node.

``python -m ledgermq.bench.round_cost dledger|sync|async|controller [--messages N] [--inflight K]
[--batch B]``

Wall-clock rates on a shared 2-core machine say more about the neighbours than about the
code; the user + system CPU each server process spends per message (``/proc``) does not
depend on who else runs. The layouts are the produce benches' own (a 3-node DLedger group,
a SYNC_MASTER or an ASYNC_MASTER with one slave, a controller-mode pair with
allAckInSyncStateSet), one layout per run. After a warm-up and a quiet moment, the host's idle CPU of every process
is sampled for two seconds (ticks, heartbeats, timers: a cost per second, not per
message, but it lands in the per-message figure of a slow run), then one Producer sends
``--messages`` messages ``--inflight`` requests at a time (each a ``send_batch`` of
``--batch`` messages when that is above 1) and each process's CPU is read again.
Run it several times alternating the variants (A, B, B, A) and compare the medians.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from ledgermq.admin.client import AdminClient
from ledgermq.bench.broker_bench import _wait_port
from ledgermq.bench.controller_bench import ControllerPair
from ledgermq.bench.procstat import cpu_split, load_average, voluntary_switches
from ledgermq.bench.replication_bench import MIB, DLedgerTrio, Group, HAPair, _wait_quiet

__all__ = ["ProcessCost", "RoundCost", "main", "measure"]

TOPIC = "RoundCostTopic"
IDLE_SAMPLE_S = 2.0


@dataclass(frozen=True, slots=True)
class ProcessCost:
    name: str
    role: str
    user_us: float
    """User CPU per message, microseconds."""
    sys_us: float
    idle_ms_per_s: float
    """CPU the process used per second while nobody sent (ticks, heartbeats, timers)."""
    main_us: float = 0.0
    """The event-loop (main) thread's share of user + system CPU per message; the rest is
    the store's threads (flush, reput, HA)."""
    switches: float = 0.0
    """Voluntary context switches per message, all threads: a wake-up is one."""


@dataclass(frozen=True, slots=True)
class RoundCost:
    layout: str
    messages: int
    inflight: int
    load: float
    rate: float
    p50_ms: float
    processes: list[ProcessCost]
    batch: int = 1
    client_us: float = 0.0
    """The producer's own CPU per message (its process, this one)."""

    def render(self) -> str:
        head = (
            f"{self.layout}: {self.messages} messages"
            + (f" in batches of {self.batch}" if self.batch > 1 else "")
            + f", {self.inflight} in flight, load {self.load:.2f}, "
            f"{self.rate:,.0f} msgs/s, p50 {self.p50_ms:.2f} ms, client {self.client_us:.0f} us per message"
        )
        rows = [
            f"  {p.name:<10} {p.role:<9} user {p.user_us:6.1f} us  sys {p.sys_us:5.1f} us  "
            f"total {p.user_us + p.sys_us:6.1f} us per message (loop thread {p.main_us:5.1f})   "
            f"idle {p.idle_ms_per_s:4.1f} ms/s   wake-ups {p.switches:4.2f}"
            for p in self.processes
        ]
        return "\n".join([head, *rows])


async def _roles(layout: str, group: Group) -> list[str]:
    if layout != "dledger":
        return ["master", "slave"]
    async with AdminClient(group.namesrv, timeout=2.0) as admin:
        return [(await admin.dledger_status(addr)).role for addr in group.members()]


async def _drive(
    layout: str,
    group: Group,
    brokers: list[subprocess.Popen[bytes]],
    count: int,
    inflight: int,
    size: int,
    batch: int = 1,
) -> RoundCost:
    from ledgermq.client import Message, Producer

    body = b"x" * size
    async with Producer("round-cost", group.namesrv, send_timeout=10.0) as producer:
        for _ in range(200):  # routes, connections, topic creation, warm caches
            await producer.send(Message(TOPIC, body))
        await _wait_quiet(group, 30.0)
        roles = await _roles(layout, group)
        idle0 = [cpu_split(p.pid) for p in brokers]
        await asyncio.sleep(IDLE_SAMPLE_S)
        before = [cpu_split(p.pid) for p in brokers]
        main_before = [sum(cpu_split(p.pid, p.pid)) for p in brokers]
        switches_before = [voluntary_switches(p.pid) for p in brokers]
        latencies: list[float] = []
        remaining = count
        failures: list[str] = []

        async def sender() -> None:
            nonlocal remaining
            while remaining > 0:
                n = min(batch, remaining)
                remaining -= n
                t0 = time.perf_counter()
                if batch == 1:
                    result = await producer.send(Message(TOPIC, body))
                else:
                    result = await producer.send_batch([Message(TOPIC, body) for _ in range(n)])
                latencies.append((time.perf_counter() - t0) * 1000)
                if result.status.name != "SEND_OK":
                    failures.append(result.status.name)

        started = time.perf_counter()
        client_started = time.process_time()
        await asyncio.gather(*(sender() for _ in range(inflight)))
        elapsed = time.perf_counter() - started
        client_cpu = time.process_time() - client_started
        after = [cpu_split(p.pid) for p in brokers]
        main_after = [sum(cpu_split(p.pid, p.pid)) for p in brokers]
        switches_after = [voluntary_switches(p.pid) for p in brokers]
    if failures:
        raise RuntimeError(f"{len(failures)} sends were not SEND_OK (first: {failures[0]})")
    costs = [
        ProcessCost(
            f"broker{i}",
            roles[i],
            (a[0] - b[0]) / count * 1e6,
            (a[1] - b[1]) / count * 1e6,
            (sum(b) - sum(i0)) / IDLE_SAMPLE_S * 1000,
            (main_after[i] - main_before[i]) / count * 1e6,
            (switches_after[i] - switches_before[i]) / count,
        )
        for i, (i0, b, a) in enumerate(zip(idle0, before, after, strict=True))
    ]
    return RoundCost(
        layout,
        count,
        inflight,
        load_average(),
        count / elapsed,
        statistics.median(latencies),
        costs,
        batch,
        client_cpu / count * 1e6,
    )


def measure(
    layout: str, count: int, inflight: int = 1, size: int = 256, workdir: Path | None = None, batch: int = 1
) -> RoundCost:
    """Start ``layout`` ("dledger", "sync", "async" or "controller") as processes, measure,
    stop them. ``batch`` > 1: each request is a ``send_batch`` of that many messages (the
    figures stay per message)."""
    base = workdir or Path(tempfile.mkdtemp(prefix="ledgermq-round-cost-"))
    try:
        if layout == "dledger":
            with DLedgerTrio(base / "dledger", 64 * MIB) as trio:
                trio.start()
                return asyncio.run(_drive(layout, trio, trio.procs[1:], count, inflight, size, batch))
        if layout in ("sync", "async"):
            role = "SYNC_MASTER" if layout == "sync" else "ASYNC_MASTER"
            with HAPair(base / layout, role, 64 * MIB) as pair:
                pair.start_master()
                slave = pair.spawn_slave()
                _wait_port(pair.slave_port, slave)
                return asyncio.run(_drive(layout, pair, pair.procs[1:], count, inflight, size, batch))
        if layout == "controller":
            with ControllerPair(base / "controller", 64 * MIB) as ctl:
                ctl.start()
                return asyncio.run(_drive(layout, ctl, ctl.procs[1:], count, inflight, size, batch))
        raise ValueError(f"unknown layout {layout!r}: dledger, sync, async or controller")
    finally:
        if workdir is None:
            shutil.rmtree(base, ignore_errors=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m ledgermq.bench.round_cost", description=__doc__)
    parser.add_argument("layout", choices=["dledger", "sync", "async", "controller"])
    parser.add_argument("--messages", type=int, default=3000)
    parser.add_argument("--inflight", type=int, default=1)
    parser.add_argument("--body-size", type=int, default=256)
    parser.add_argument("--batch", type=int, default=1, help="messages per send_batch (1: single sends)")
    args = parser.parse_args(argv)
    if args.batch < 1:
        parser.error("--batch must be at least 1")
    print(measure(args.layout, args.messages, args.inflight, args.body_size, batch=args.batch).render())


if __name__ == "__main__":
    main()
