"""A soak run: hours of mixed load on a chaos layout, a seeded fault every few minutes,
the brokers' memory and descriptors sampled, and everything checked at the end.

Time is cut into slots of ``fault_every_s``; in slot k the k-th fault of the seeded
schedule (``faults.schedule``) is injected at a seeded 30-70 % into the slot, held, healed,
and the run waits (bounded) for a SEND_OK after it. Beside the chaos workload (plain sends
to ChaosTopic, checked by the chaos checker after a read-back from every broker and the
client path) run the four checked flows (``flows.py``). At the end: the load stops, the
group is healed and read back, the flows' consumers drain (bounded), and the verdict
fails on a lost or corrupt message, divergence, a flow problem (missing, unexpected,
out of order, early) or a broker whose memory or descriptors grew (``stats.GrowthRule``).
Every process is killed by pid in ``finally``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ledgermq.chaos.checker import check
from ledgermq.chaos.faults import FaultPlan, FaultRecord, applicable, schedule, targets_for
from ledgermq.chaos.injector import Injector
from ledgermq.chaos.promise import allowed_losses, promise_text
from ledgermq.chaos.proxy import FaultProxy
from ledgermq.chaos.runner import Settled, create_topic, make_layout, prepare_dir, settle_and_read
from ledgermq.chaos.soak.flow import Flow
from ledgermq.chaos.soak.flows import FLOWS
from ledgermq.chaos.soak.sampler import ProcSampler
from ledgermq.chaos.soak.stats import GrowthRule, growth, latency_summary, latency_windows, window_for
from ledgermq.chaos.workload import Attempt, Workload

log = logging.getLogger(__name__)

# Every kind that keeps the flows' promises: no power loss (ASYNC_FLUSH may lose acknowledged
# messages through it, which the flows cannot tell from a bug), no clock jump (a broker whose
# clock jumps ahead delivers delayed messages early), no bit rot (needs the store's repair).
DEFAULT_FAULTS = ("kill", "suspend", "partition", "disk-full", "slow-disk", "kill-in-recovery", "tail-loss")
# Segments sized so an hour of load rolls a few commit-log and consume-queue files, not
# hundreds: the store keeps recent files open, and descriptors that grow with the data
# would hide (or fake) a leak.
SEGMENT = 16 * 1024 * 1024
CQ_SEGMENT = 300_000 * 20  # RocketMQ's default: 300,000 units of 20 bytes


@dataclass(frozen=True, slots=True)
class SoakConfig:
    data: Path
    layout: str = "sync"  # "sync" (SYNC_MASTER + slave), "async" or "dledger"
    minutes: float = 60.0
    seed: int = 1
    faults: tuple[str, ...] = DEFAULT_FAULTS
    fault_every_s: float = 180.0
    rate: float = 50.0  # the chaos workload's sends/s
    flow_rate: float = 10.0  # each flow's sends/s
    sample_every_s: float = 10.0
    drain_timeout_s: float = 90.0
    send_timeout: float = 3.0
    recovery_timeout: float = 30.0
    stable_timeout: float = 60.0
    growth: GrowthRule = field(default_factory=GrowthRule)

    @property
    def name(self) -> str:
        return f"soak-{self.layout}-seed{self.seed}"

    def broker_props(self) -> dict[str, object]:
        """SQL92 filtering on, transaction check-backs every 5 s, segments sized for hours."""
        return {
            "enablePropertyFilter": "true",
            "transactionCheckInterval": 5000,
            "mappedFileSizeCommitLog": SEGMENT,
            "mappedFileSizeConsumeQueue": CQ_SEGMENT,
        }

    def replay_args(self) -> str:
        return (
            f"--layout {self.layout} --minutes {self.minutes:g} --seed {self.seed} --faults {','.join(self.faults)} "
            f"--fault-every {self.fault_every_s:g} --rate {self.rate:g} --flow-rate {self.flow_rate:g}"
        )


async def _sleep_until(moment: float) -> None:
    delay = moment - time.monotonic()
    if delay > 0:
        await asyncio.sleep(delay)


async def _drain(flows: list[Flow], timeout: float) -> float:
    """Until every flow's consumers got everything expected (bounded); the seconds waited."""
    started = time.monotonic()
    while any(f.outstanding() for f in flows) and time.monotonic() - started < timeout:
        await asyncio.sleep(0.5)
    return time.monotonic() - started


async def soak(cfg: SoakConfig) -> dict[str, Any]:
    """Run the soak ``cfg`` describes and return its summary (the JSON the CLI writes)."""
    run = _SoakRun(cfg)
    try:
        await run.start_load()
        await run.inject_faults()
        ending = await run.stop_load_and_settle()
    finally:
        await run.close()
    return run.summary(ending)


@dataclass(frozen=True, slots=True)
class _Ending:
    """How the load ended: when it stopped, the group read back, how long the flows drained."""

    run_end: float
    settled: Settled
    drained_s: float


class _SoakRun:
    """One soak's processes, load and findings, in the phases ``soak`` runs them: start the
    load, inject the scheduled faults, stop and settle, close (always), then summarise.
    A class so each phase is a method over the state the next one needs."""

    def __init__(self, cfg: SoakConfig) -> None:
        self.cfg = cfg
        self.kinds, skipped = applicable(cfg.layout, cfg.faults)
        self.duration = cfg.minutes * 60
        cycles = max(1, int(self.duration // cfg.fault_every_s)) if self.kinds else 0
        slot = cfg.fault_every_s
        self.plans = (
            schedule(cfg.seed, cycles, self.kinds, (0.3 * slot, 0.7 * slot), 1.0, targets_for(cfg.layout))
            if self.kinds
            else []
        )
        self.root = prepare_dir(cfg.data, cfg.name)
        self.layout = make_layout(cfg.layout, self.root, cfg.broker_props())
        self.proxies: dict[str, FaultProxy] = {}
        self.workload: Workload | None = None
        self.injector: Injector | None = None
        self.flows: list[Flow] = []
        self.records: list[FaultRecord] = []
        self.notes = [f"skipped: {why}" for why in skipped]
        self.t0 = time.monotonic()  # reset when the load starts
        self.sampler = ProcSampler(self.layout, self.t0, cfg.sample_every_s)

    async def start_load(self) -> None:
        """Proxies, processes and topics; once the group is stable, the sampler, the chaos
        workload and the flows (the run's clock starts there)."""
        cfg, layout = self.cfg, self.layout
        for link in layout.links():
            proxy = FaultProxy(link.listen, link.target, link.name)
            await proxy.start()
            self.proxies[link.name] = proxy
        await layout.start()
        await create_topic(layout)
        for flow_type in FLOWS:
            await create_topic(layout, topic=flow_type.topic, queues=flow_type.queues)
        first = await layout.wait_stable(cfg.stable_timeout)
        if not first.stable:
            self.notes.append(f"not stable before the load: {first.detail}")
        self.t0 = time.monotonic()
        self.sampler.t0 = self.t0
        self.sampler.start()
        self.workload = Workload(layout.namesrv_addr, rate=cfg.rate, send_timeout=cfg.send_timeout)
        await self.workload.start()
        for flow_type in FLOWS:
            flow = flow_type(layout.namesrv_addr, cfg.seed, cfg.flow_rate, cfg.send_timeout)
            self.flows.append(flow)
            await flow.start()
        self.injector = Injector(layout, self.proxies, cfg.seed)

    async def inject_faults(self) -> None:
        """Each planned fault in its slot, then wait out the run. A failing cycle is noted
        (the run then ends early and is still checked), never raised."""
        end = self.t0 + self.duration
        try:
            for plan in self.plans:
                at = self.t0 + plan.index * self.cfg.fault_every_s + plan.steady_s
                if at + plan.hold_s + 5 > end:
                    self.notes.append(
                        f"fault {plan.index + 1} ({plan.label}) left out: the run ends before it would heal"
                    )
                    break
                await _sleep_until(at)
                await self._one_fault(plan)
            await _sleep_until(end)
        except Exception as exc:
            log.exception("soak cycle failed")
            self.notes.append(f"the fault cycles stopped early: {type(exc).__name__}: {exc}")

    async def _one_fault(self, plan: FaultPlan) -> None:
        """Inject, hold, heal, and wait (bounded) for a SEND_OK after the heal."""
        assert self.injector is not None and self.workload is not None
        timeout = self.cfg.recovery_timeout
        rec = await self.injector.begin(plan, timeout)
        self.records.append(rec)
        log.warning("soak fault %d/%d: %s, hold %.2fs", plan.index + 1, len(self.plans), rec.detail, plan.hold_s)
        await asyncio.sleep(plan.hold_s)
        await self.injector.end(rec)
        rec.recovered_at = await self.workload.wait_ok_after(rec.healed_at, timeout)
        which = f"fault {rec.index + 1} ({rec.detail})"
        if rec.error:
            self.notes.append(f"{which}: {rec.error}")
        if not rec.recovered_at:
            self.notes.append(f"{which}: no SEND_OK within {timeout:.0f}s")

    async def stop_load_and_settle(self) -> _Ending:
        """Stop sending, heal and read the group back, let the flows' consumers drain."""
        assert self.injector is not None and self.workload is not None
        await self.workload.stop()
        for flow in self.flows:
            await flow.stop_sending()
        run_end = time.monotonic()
        settled = await settle_and_read(self.layout, self.injector, self.cfg.stable_timeout)
        self.notes.extend(settled.notes)
        drained_s = await _drain(self.flows, self.cfg.drain_timeout_s)
        await self.sampler.stop()
        return _Ending(run_end, settled, drained_s)

    async def close(self) -> None:
        """Stop everything started, whatever phase failed; every process is killed by pid."""
        await self.sampler.stop()
        for flow in self.flows:
            with contextlib.suppress(Exception):
                await flow.stop()
        if self.workload is not None:
            await self.workload.stop()
        for proxy in self.proxies.values():
            await proxy.close()
        self.layout.close()

    def summary(self, ending: _Ending) -> dict[str, Any]:
        """The verdict (chaos checker, flows, resource growth) and everything measured."""
        cfg, t0, settled = self.cfg, self.t0, ending.settled
        attempts = self.workload.attempts if self.workload is not None else []
        allowed = allowed_losses(attempts, self.records, cfg.layout, "async")
        verdict = check(attempts, self.records, settled.reads, ending.run_end, settled.master_source, allowed,
                        promise_text(cfg.layout, "async"))  # fmt: skip
        verdict.notes.extend(self.notes)
        ran_s = ending.run_end - t0
        resources = growth(self.sampler.samples, ran_s, cfg.growth)
        flow_results = [f.result() for f in self.flows]
        grew = sorted(node for node, row in resources.items() if row["grew"])
        failed_flows = [r["flow"] for r in flow_results if r["failed"]]
        return {
            "run": self._run_section(ran_s),
            "verdict": {
                "failed": verdict.failed or bool(failed_flows) or bool(grew),
                "lost": verdict.lost,
                "corrupt_served": verdict.corrupt_served,
                "diverged": verdict.diverged,
                "flows_failed": failed_flows,
                "grew": grew,
            },
            "latency": self._latency_section(attempts, ran_s),
            "flows": flow_results,
            "drained_s": round(ending.drained_s, 1),
            "resources": {
                "rule": cfg.growth.describe(),
                "sample_every_s": cfg.sample_every_s,
                "nodes": resources,
                "samples": [asdict(s) for s in self.sampler.samples],
            },
            "chaos": verdict.to_json(),
            "stability": settled.stability,
            "healed_at_end": settled.healed,
            "faults": [_relative(r.to_json(), t0) for r in self.records],
        }

    def _run_section(self, ran_s: float) -> dict[str, Any]:
        cfg = self.cfg
        return {
            "kind": "soak",
            "layout": cfg.layout,
            "seed": cfg.seed,
            "minutes": cfg.minutes,
            "ran_s": round(ran_s, 1),
            "faults": list(self.kinds),
            "fault_every_s": cfg.fault_every_s,
            "rate": cfg.rate,
            "flow_rate": cfg.flow_rate,
            "data": str(self.root),
            "replay": cfg.replay_args(),
        }

    def _latency_section(self, attempts: list[Attempt], ran_s: float) -> dict[str, Any]:
        """Percentiles of every send (chaos workload and flows) per time window, and of
        each flow's acknowledged sends over the whole run."""
        t0 = self.t0
        sends = [(a.end - t0, a.end - a.start, a.acked) for a in attempts]
        per_flow = {"chaos": latency_summary(a.end - a.start for a in attempts if a.acked)}
        for flow in self.flows:
            sends += [(end - t0, lat, ok) for end, lat, ok in flow.sends]
            per_flow[flow.name] = latency_summary(lat for _, lat, ok in flow.sends if ok)
        window = window_for(ran_s)
        return {"window_s": window, "windows": latency_windows(sends, window, ran_s), "per_flow": per_flow}


def _relative(doc: dict[str, Any], t0: float) -> dict[str, Any]:
    for k in ("injected_at", "healed_at", "ready_at", "recovered_at"):
        if doc.get(k):
            doc[k] = round(doc[k] - t0, 3)
    return doc
