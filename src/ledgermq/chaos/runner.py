"""A chaos run end to end: layout up, load on, N fault cycles, heal, read back, verdict.

Each cycle: steady load for the plan's interval, inject the fault, hold it, heal it (a
killed node is restarted and waited for), then wait (bounded) for the first SEND_OK after
the heal. After the last cycle: stop the load, heal whatever is left, wait until the group
is stable (every node up, the slave at the master's commit-log end; bounded), read every
queue back from the master, the slave and the client path, and check.

Every process is killed by pid in ``finally``; every wait has a deadline.
"""

from __future__ import annotations

import asyncio
import json
import logging
import shutil
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ledgermq.chaos.checker import Verdict, check
from ledgermq.chaos.controller import ControllerLayout
from ledgermq.chaos.counters import RepairCounters
from ledgermq.chaos.dledger import DLedgerLayout
from ledgermq.chaos.faults import (
    CONTROLLER_KINDS,
    FaultPlan,
    FaultRecord,
    applicable,
    restrict,
    schedule,
    targets_for,
)
from ledgermq.chaos.injector import Injector
from ledgermq.chaos.layout import Layout, MasterSlaveLayout
from ledgermq.chaos.promise import allowed_losses, promise_text
from ledgermq.chaos.proxy import FaultProxy
from ledgermq.chaos.readback import ReadBack, read_broker, read_client
from ledgermq.chaos.repaired import DATA_FAULTS, found_count, wait_repaired
from ledgermq.chaos.tls import ChaosTls, make_chaos_tls
from ledgermq.chaos.workload import QUEUES, TOPIC, Workload

log = logging.getLogger(__name__)
MARKER = ".ledgermq-chaos-run"


@dataclass(frozen=True, slots=True)
class RunConfig:
    layout: str  # "sync" | "async" | "dledger" | "controller"
    cycles: int
    seed: int
    faults: tuple[str, ...]
    data: Path
    senders: int = 4
    rate: float = 200.0
    steady_s: tuple[float, float] = (1.0, 4.0)
    hold_scale: float = 1.0
    send_timeout: float = 3.0
    recovery_timeout: float = 30.0
    stable_timeout: float = 60.0
    repair_timeout: float = 60.0  # a data fault's damage must be found and repaired within this
    warmup_s: float = 2.0
    flush: str = "async"  # flushDiskType of every broker: "async" (ASYNC_FLUSH) or "sync" (SYNC_FLUSH)
    scrub_interval_s: int = 5  # storeScrubIntervalSeconds when a run flips bits
    roles: tuple[str, ...] = ()  # only faults against these roles ("master"); () for every role
    whole_timeout: float = 30.0  # controller layout: how long a fault waits for the slave to be in sync again
    tls: bool = False  # every process enforcing mutual TLS, the harness's clients over TLS (chaos/tls.py)

    @property
    def controllers(self) -> int:
        """Controller nodes of the controller layout: three when the run faults the controller
        itself (one leader among three), else one inside the name server."""
        return 3 if any(k in CONTROLLER_KINDS for k in self.faults) else 1

    def replay_args(self) -> str:
        flush = " --flush sync" if self.flush == "sync" else ""
        flush += f" --roles {','.join(self.roles)}" if self.roles else ""
        tls = " --tls" if self.tls else ""
        return (
            f"--layout {self.layout}{flush}{tls} --cycles {self.cycles} --seed {self.seed} "
            f"--faults {','.join(self.faults)} --senders {self.senders} --rate {self.rate:g} "
            f"--steady {self.steady_s[0]:g},{self.steady_s[1]:g} --hold-scale {self.hold_scale:g}"
        )

    @property
    def name(self) -> str:
        """The run directory's name: layout, flush mode when not the default, TLS, seed."""
        flush = "-syncflush" if self.flush == "sync" else ""
        return f"{self.layout}{flush}{'-tls' if self.tls else ''}-seed{self.seed}"

    def broker_props(self) -> dict[str, object]:
        """What every broker of the run gets beyond the layout's own settings."""
        props: dict[str, object] = {"flushDiskType": "SYNC_FLUSH" if self.flush == "sync" else "ASYNC_FLUSH"}
        if "bitflip" in self.faults:  # the store's scrub finds flips made while it runs
            props.update(storeScrubEnable="true", storeScrubIntervalSeconds=self.scrub_interval_s)
        return props


def run_dir(cfg: RunConfig) -> Path:
    """A fresh directory for this run under ``cfg.data`` (see ``prepare_dir``)."""
    return prepare_dir(cfg.data, cfg.name)


def prepare_dir(data: Path, name: str) -> Path:
    """A fresh directory ``data/name`` (an earlier run's one is replaced; a directory the
    harness did not make is refused)."""
    d = (data / name).resolve()
    if d.exists():
        if not (d / MARKER).exists():
            raise RuntimeError(f"{d} exists and was not made by ledgermq chaos; choose another --data")
        shutil.rmtree(d)
    d.mkdir(parents=True)
    (d / MARKER).write_text("made by ledgermq chaos run; replaced by the next run of the same layout and seed\n")
    return d


def make_layout(
    kind: str, root: Path, props: dict[str, object] | None = None, controllers: int = 1, tls: ChaosTls | None = None
) -> Layout:
    if kind in ("sync", "async"):
        return MasterSlaveLayout(root, sync=kind == "sync", extra_props=props, tls=tls)
    if kind == "dledger":
        return DLedgerLayout(root, extra_props=props, tls=tls)
    if kind == "controller":
        return ControllerLayout(root, controllers=controllers, extra_props=props, tls=tls)
    raise ValueError(f"unknown layout {kind!r} (sync, async, dledger, controller)")


async def create_topic(layout: Layout, timeout: float = 30.0, topic: str = TOPIC, queues: int = QUEUES) -> None:
    """Create ``topic`` on the master (the leader) and wait until the name server routes it."""
    deadline = time.monotonic() + timeout
    while True:
        master = await layout.wait_master(max(0.1, deadline - time.monotonic()))
        if master is None:
            raise RuntimeError(f"no master to create {topic} on")
        addr = layout.node(master).addr
        try:
            async with layout.admin(timeout=3.0, connect_timeout=3.0) as admin:
                await admin.create_topic(addr, topic, read_queue_nums=queues, write_queue_nums=queues)
                route = await admin.route(topic)
                if any(q.write_queue_nums == queues for q in route.queue_datas):
                    return
        except Exception as exc:
            if time.monotonic() > deadline:
                raise RuntimeError(f"cannot create {topic} on {addr}: {exc}") from exc
        if time.monotonic() > deadline:
            raise RuntimeError(f"the name server never routed {topic}")
        await asyncio.sleep(0.2)


@dataclass(slots=True)
class Settled:
    """The group after a run's load stopped: healed, (bounded) stable, read back."""

    healed: list[str]
    stability: dict[str, Any]
    reads: list[ReadBack]
    master_source: str
    notes: list[str]


async def settle_and_read(layout: Layout, injector: Injector, stable_timeout: float) -> Settled:
    """Heal whatever is left, wait (bounded) until the group is stable, and read ChaosTopic
    back from every broker (each under its name; a master-slave group's master as
    "master") and through the client path."""
    notes: list[str] = []
    healed = await injector.heal_all()
    stable = await layout.wait_stable(stable_timeout)
    leader = await layout.current_master()
    stability = {
        "stable": stable.stable,
        "detail": stable.detail,
        "max_offsets": stable.max_offsets,
        "master": leader,
    }
    if not stable.stable:
        notes.append(f"the group did not become stable within {stable_timeout:.0f}s: {stable.detail}")
    by_node = layout.roles_move
    master_source = "master"
    if by_node:
        # Every member by its name; the leader's copy is the one the others are compared with.
        master_source = leader or layout.targets()[0]
        if leader is None:
            notes.append(f"no leader at the end: the members are compared with {master_source}")
    reads: list[ReadBack] = []
    for name in layout.targets():
        source = name if by_node else ("master" if name == leader else name)
        reads.append(await read_broker(source, layout.node(name).addr, TOPIC, QUEUES, tls=layout.client_tls))
    await _read_short_ones_again(layout, reads, stable_timeout, notes)
    expected = max((r.count() for r in reads), default=0)
    reads.append(await read_client(layout.namesrv_addr, TOPIC, expected, tls=layout.client_tls))
    return Settled(healed, stability, reads, master_source, notes)


async def _read_short_ones_again(
    layout: Layout, reads: list[ReadBack], stable_timeout: float, notes: list[str]
) -> None:
    """Read a broker again, once the group is stable again, when its read held fewer records
    than another's: damage found while the brokers were read (a scrub's pass after the
    last fault) makes a member cut its log and refill it from the leader, and what it
    refills is not there to read for that moment. What a member really lost is missing
    from the second read too; a note says which brokers were read twice."""
    most = max((r.count() for r in reads), default=0)
    for i, name in enumerate(layout.targets()):
        first = reads[i]
        if first.count() >= most:
            continue
        await layout.wait_stable(stable_timeout)
        reads[i] = await read_broker(first.source, layout.node(name).addr, TOPIC, QUEUES, tls=layout.client_tls)
        notes.append(
            f"{first.source} was read again: its first read held {first.count()} of {most} records "
            f"({first.busy_answers} busy answers), the second {reads[i].count()}"
        )


async def run(cfg: RunConfig) -> tuple[dict[str, Any], Verdict]:
    kinds, skipped = applicable(cfg.layout, cfg.faults)
    targets = targets_for(cfg.layout)
    if cfg.roles:
        targets, kinds, off_role = restrict(targets, kinds, cfg.roles)
        skipped += off_role
    if not kinds:
        raise ValueError(f"no fault kind applies to the {cfg.layout} layout: {'; '.join(skipped)}")
    plans = schedule(cfg.seed, cfg.cycles, kinds, cfg.steady_s, cfg.hold_scale, targets)
    root = run_dir(cfg)
    tls = make_chaos_tls(root / "tls") if cfg.tls else None
    layout = make_layout(cfg.layout, root, cfg.broker_props(), cfg.controllers, tls)
    counters = RepairCounters(layout)
    proxies: dict[str, FaultProxy] = {}
    workload: Workload | None = None
    records: list[FaultRecord] = []
    notes: list[str] = [f"skipped: {why}" for why in skipped]
    for why in skipped:
        log.warning("chaos: %s", why)
    t0 = time.monotonic()
    run_end = t0
    reads: list[ReadBack] = []
    stability: dict[str, Any] = {}
    master_source = "master"
    healed: list[str] = []
    stopped_early = ""
    try:
        await _start_cluster(layout, proxies, cfg, notes)
        workload = Workload(
            layout.namesrv_addr, senders=cfg.senders, rate=cfg.rate, send_timeout=cfg.send_timeout,
            tls=layout.client_tls,
        )  # fmt: skip
        await workload.start()
        counters.start()
        await asyncio.sleep(cfg.warmup_s)
        injector = Injector(layout, proxies, cfg.seed)
        stopped_early = await _run_faults(plans, layout, injector, workload, cfg, records, notes)
        await workload.stop()
        run_end = time.monotonic()
        settled = await settle_and_read(layout, injector, cfg.stable_timeout)
        healed, stability, reads, master_source = (
            settled.healed, settled.stability, settled.reads, settled.master_source,
        )  # fmt: skip
        notes.extend(settled.notes)
        await counters.stop()
        await counters.sample()  # the last word of every node's current life
    finally:
        await counters.stop()
        if workload is not None:
            await workload.stop()
        for proxy in proxies.values():
            await proxy.close()
        layout.close()
    attempts = workload.attempts if workload is not None else []
    allowed = allowed_losses(attempts, records, cfg.layout, cfg.flush)
    verdict = check(attempts, records, reads, run_end, master_source, allowed, promise_text(cfg.layout, cfg.flush))
    verdict.notes.extend(notes)
    verdict.unrepaired = [f"fault {r.index + 1} ({r.detail}): {r.unrepaired}" for r in records if r.unrepaired]
    verdict.incomplete = incomplete_run(records, stopped_early)
    summary = {
        "run": _run_facts(cfg, kinds, skipped, time.monotonic() - t0, root),
        "verdict": verdict.to_json(),
        # an abandoned attempt may have been stored as well as its retry: a duplicate
        "client": {"abandoned_attempts": workload.abandoned if workload is not None else 0},
        "stability": stability,
        "repairs": counters.totals(),
        "healed_at_end": healed,
        "plans": [asdict(p) for p in plans],
        "faults": [_relative(r.to_json(), t0) for r in records],
        "proxies": {name: asdict(p.stats) for name, p in proxies.items()},
    }
    with open(root / "history.jsonl", "w") as f:
        for a in attempts:
            f.write(json.dumps(_relative(a.to_json(), t0)) + "\n")
    return summary, verdict


async def _start_cluster(layout: Layout, proxies: dict[str, FaultProxy], cfg: RunConfig, notes: list[str]) -> None:
    """The fault proxies, then the processes behind them, and the test topic; a cluster that
    is not stable by then is noted, not fatal (the verdict judges what followed)."""
    for link in layout.links():
        proxy = FaultProxy(link.listen, link.target, link.name)
        await proxy.start()
        proxies[link.name] = proxy
    await layout.start()
    await create_topic(layout)
    first = await layout.wait_stable(cfg.stable_timeout)
    if not first.stable:
        notes.append(f"not stable before the first fault: {first.detail}")


async def _run_faults(
    plans: list[FaultPlan],
    layout: Layout,
    injector: Injector,
    workload: Workload,
    cfg: RunConfig,
    records: list[FaultRecord],
    notes: list[str],
) -> str:
    """The fault cycles, one after another; why they stopped early ("" when all of them ran)."""
    try:
        for plan in plans:
            await _one_fault(plan, len(plans), layout, injector, workload, cfg, records, notes)
        await asyncio.sleep(1.0)
    except Exception as exc:
        log.exception("chaos cycle failed")
        why = f"the fault cycles stopped early: {type(exc).__name__}: {exc}"
        notes.append(why)
        return why
    return ""


def incomplete_run(records: list[FaultRecord], stopped_early: str) -> list[str]:
    """Why the run did less than it was asked: a node that did not come back from a fault (its
    heal failed) or cycles that stopped before the last plan."""
    why = [f"fault {r.index + 1} ({r.detail}): {r.error}" for r in records if r.error]
    return why + ([stopped_early] if stopped_early else [])


async def _one_fault(
    plan: FaultPlan,
    count: int,
    layout: Layout,
    injector: Injector,
    workload: Workload,
    cfg: RunConfig,
    records: list[FaultRecord],
    notes: list[str],
) -> None:
    """One cycle: steady time, the fault held, healed; then sends must succeed again and a
    data fault must be repaired before the next (what did not happen is noted)."""
    await asyncio.sleep(plan.steady_s)
    if not_ready := await layout.ready_for_fault(cfg.whole_timeout):
        notes.append(f"before fault {plan.index + 1}/{count}: {not_ready}")
    baseline = 0
    if plan.kind == "bitflip" and plan.mode == "online":
        baseline = await found_count(layout, await injector.resolve(plan.role, cfg.recovery_timeout))
    rec = await injector.begin(plan, cfg.recovery_timeout)
    records.append(rec)  # at once: a cycle that fails later still has its fault judged
    log.warning("chaos fault %d/%d: %s, hold %.2fs", plan.index + 1, count, rec.detail, plan.hold_s)
    await asyncio.sleep(plan.hold_s)
    await injector.end(rec)
    rec.recovered_at = await workload.wait_ok_after(rec.healed_at, cfg.recovery_timeout)
    which = f"fault {rec.index + 1}/{count} ({rec.detail})"
    if rec.error:
        notes.append(f"{which}: {rec.error}")
    if not rec.recovered_at:
        notes.append(f"{which}: no SEND_OK within {cfg.recovery_timeout:.0f}s")
    if rec.kind in DATA_FAULTS:  # the next fault must not find this one unrepaired
        await wait_repaired(layout, rec, baseline, cfg.repair_timeout)
        if rec.unrepaired:
            notes.append(f"{which}: {rec.unrepaired}")


def _run_facts(
    cfg: RunConfig, kinds: Sequence[str], skipped: list[str], duration_s: float, root: Path
) -> dict[str, Any]:
    """What was run, enough to replay it (``replay``)."""
    return {
        "layout": cfg.layout,
        "flush": cfg.flush,
        "tls": cfg.tls,
        "seed": cfg.seed,
        "cycles": cfg.cycles,
        "faults": list(kinds),
        "roles": list(cfg.roles),
        "skipped": skipped,
        "senders": cfg.senders,
        "rate": cfg.rate,
        "duration_s": round(duration_s, 3),
        "data": str(root),
        "replay": cfg.replay_args(),
    }


def _relative(doc: dict[str, Any], t0: float) -> dict[str, Any]:
    """Times as seconds since the run began (0.0 stays 0.0: "never")."""
    for k in ("start", "end", "injected_at", "healed_at", "ready_at", "recovered_at", "repaired_at"):
        if doc.get(k):
            doc[k] = round(doc[k] - t0, 4)
    return doc
