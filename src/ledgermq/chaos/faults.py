"""Fault kinds, the seeded schedule, and injecting and healing one fault.

Kinds (the CLI's names):

* ``kill``: SIGKILL the master or the slave, hold, restart it on the same port and store;
* ``suspend``: SIGSTOP the master or the slave, hold, SIGCONT;
* ``partition``: cut the master-slave replication link at the fault proxy ("reset": RST
  every connection and refuse new ones; "blackhole": drop every byte), hold, heal; on a
  DLedger group, cut every Raft link to and from the current leader (the leader alone is
  a minority: "isolate the leader");
* ``tail-loss``: SIGKILL the master, zero the last 64 KiB of data in its newest
  commit-log segment (an unflushed tail the page cache never wrote), restart it;
* ``disk-full``: make the master's or the slave's disk "full" (the broker's failpoints
  raise ENOSPC at segment creation and metadata fsync while a flag file exists), hold,
  free it.

``schedule(seed, cycles, kinds)`` draws every cycle's kind, target role, load interval,
hold time and mode from ``random.Random(seed)`` alone, so a seed replays the same faults.
Targets are roles resolved against the layout when the fault starts: "master" and
"slave" on a master-slave group, "leader" and "follower" on a DLedger group (whose leader
moves); ``targets_for(layout)`` names them. ``tail-loss`` does not apply to a DLedger
group (SEND_OK waits for a quorum's persistence; see ``NOT_APPLICABLE``).
"""

from __future__ import annotations

import random
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ledgermq.chaos.layout import Layout
from ledgermq.chaos.proxy import FaultProxy

KINDS = ("kill", "suspend", "partition", "tail-loss", "disk-full")
TAIL_LOSS_BYTES = 64 * 1024
_TARGETS = {
    "kill": ("master", "slave"),
    "suspend": ("master", "slave"),
    "partition": ("link",),
    "tail-loss": ("master",),
    "disk-full": ("master", "slave"),
}
# DLedger groups: the same kinds against the Raft roles; a partition isolates the leader.
_DLEDGER_TARGETS = {
    "kill": ("leader", "follower"),
    "suspend": ("leader", "follower"),
    "partition": ("leader",),
    "disk-full": ("leader", "follower"),
}
NOT_APPLICABLE = {
    "dledger": {
        "tail-loss": "tail-loss does not apply to a DLedger group: SEND_OK waits until a quorum persisted "
        "the message, so the loss of one node's unflushed tail cannot lose an acknowledged message by design",
    },
}
_HOLD_S = {  # (min, max) seconds the fault lasts
    "kill": (0.5, 3.0),
    "suspend": (1.0, 5.0),
    "partition": (1.0, 6.0),
    "tail-loss": (0.5, 2.0),
    "disk-full": (3.0, 8.0),  # long enough to span a segment roll (see layout.SEGMENT)
}


def parse_kinds(text: str) -> tuple[str, ...]:
    kinds = tuple(k.strip() for k in text.split(",") if k.strip())
    unknown = [k for k in kinds if k not in KINDS]
    if unknown or not kinds:
        raise ValueError(f"unknown fault kinds {unknown}; choose from {', '.join(KINDS)}")
    return kinds


@dataclass(frozen=True, slots=True)
class FaultPlan:
    index: int
    kind: str
    role: str  # "master", "slave", "link", "leader" or "follower"
    steady_s: float  # load before the fault
    hold_s: float
    mode: str = ""  # partition: reset | blackhole

    @property
    def label(self) -> str:
        return f"{self.kind}:{self.role}"


def targets_for(layout: str) -> dict[str, tuple[str, ...]]:
    """The roles each kind may hit on a layout ("sync", "async" or "dledger")."""
    return _DLEDGER_TARGETS if layout == "dledger" else _TARGETS


def applicable(layout: str, kinds: tuple[str, ...]) -> tuple[tuple[str, ...], list[str]]:
    """The kinds that apply to ``layout``, and why the others were left out."""
    skipped = NOT_APPLICABLE.get(layout, {})
    return tuple(k for k in kinds if k not in skipped), [skipped[k] for k in kinds if k in skipped]


def schedule(
    seed: int,
    cycles: int,
    kinds: tuple[str, ...],
    steady_s: tuple[float, float] = (1.0, 4.0),
    hold_scale: float = 1.0,
    targets: dict[str, tuple[str, ...]] | None = None,
) -> list[FaultPlan]:
    targets = targets or _TARGETS
    rng = random.Random(seed)
    plans = []
    first = rng.sample(kinds, len(kinds))  # every kind at least once when there are enough cycles
    for i in range(cycles):
        kind = first[i] if i < len(first) else rng.choice(kinds)
        role = rng.choice(targets[kind])
        steady = round(rng.uniform(*steady_s), 3)
        lo, hi = _HOLD_S[kind]
        hold = round(rng.uniform(lo, hi) * hold_scale, 3)
        mode = rng.choice(("reset", "blackhole")) if kind == "partition" else ""
        plans.append(FaultPlan(i, kind, role, steady, hold, mode))
    return plans


@dataclass(slots=True)
class FaultRecord:
    """What happened, in time.monotonic() seconds."""

    index: int
    kind: str
    role: str
    target: str
    mode: str
    injected_at: float
    healed_at: float = 0.0
    ready_at: float = 0.0  # the target serves again (restart done); healed_at when nothing restarts
    recovered_at: float = 0.0  # the first SEND_OK after the heal, 0 when none within the deadline
    detail: str = ""
    error: str = ""
    notes: dict[str, Any] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return f"{self.kind}:{self.role}"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def zero_tail(store_dir: Path, nbytes: int = TAIL_LOSS_BYTES) -> dict[str, Any]:
    """Zero the last ``nbytes`` of data in the newest commit-log segment that holds data
    (the end of data found by scanning back for the last non-zero byte)."""
    segments = sorted((p for p in (store_dir / "commitlog").iterdir() if p.name.isdigit()), reverse=True)
    for seg in segments:
        data = seg.read_bytes()
        end = len(data.rstrip(b"\0"))
        if end == 0:
            continue
        start = max(0, end - nbytes)
        with open(seg, "r+b") as f:
            f.seek(start)
            f.write(b"\0" * (end - start))
            f.flush()
        base = int(seg.name)
        return {"segment": seg.name, "zeroed_from": base + start, "zeroed_to": base + end, "bytes": end - start}
    return {"segment": None, "bytes": 0}


class Injector:
    """Starts and ends faults on a layout and its link proxies."""

    def __init__(self, layout: Layout, proxies: dict[str, FaultProxy], seed: int = 0) -> None:
        self.layout = layout
        self.proxies = proxies
        self._rng = random.Random(seed)  # which follower, when there are several

    async def _resolve(self, role: str, timeout: float) -> str:
        if role == "link":
            return ",".join(self.proxies)
        master = await self.layout.wait_master(timeout)
        if master is None:
            raise RuntimeError(f"no master/leader within {timeout:.0f}s to resolve {role!r}")
        if role in ("master", "leader"):
            return master
        return self._rng.choice([t for t in self.layout.targets() if t != master])

    def _links_of(self, target: str) -> list[FaultProxy]:
        """The proxies to cut: every link for "link", else the links to and from ``target``."""
        if target in self.layout.targets():
            return [p for name, p in self.proxies.items() if f":{target}->" in name or name.endswith(f"->{target}")]
        return list(self.proxies.values())

    async def begin(self, plan: FaultPlan, resolve_timeout: float = 30.0) -> FaultRecord:
        """Resolve the plan's role (waiting, bounded, for a leader) and inject the fault."""
        target = await self._resolve(plan.role, resolve_timeout)
        rec = FaultRecord(plan.index, plan.kind, plan.role, target, plan.mode, time.monotonic())
        if plan.kind == "kill":
            self.layout.kill(target)
            rec.detail = f"SIGKILL {target}"
        elif plan.kind == "suspend":
            self.layout.pause(target)
            rec.detail = f"SIGSTOP {target}"
        elif plan.kind == "partition":
            cut = self._links_of(target)
            for proxy in cut:
                proxy.cut(plan.mode)
            rec.notes = {"links": [p.name for p in cut]}
            what = target if len(cut) == 1 or target not in self.layout.targets() else f"{target} from its peers"
            rec.detail = f"cut {what} ({plan.mode}, {len(cut)} links)"
        elif plan.kind == "tail-loss":
            self.layout.kill(target)
            rec.notes = zero_tail(self.layout.node(target).store_dir)
            rec.detail = f"SIGKILL {target}, zeroed {rec.notes.get('bytes', 0)} bytes of {rec.notes.get('segment')}"
        elif plan.kind == "disk-full":
            self.layout.node(target).disk_full_flag.touch()
            rec.detail = f"disk of {target} full"
        else:  # pragma: no cover - parse_kinds refuses it
            raise ValueError(plan.kind)
        return rec

    async def end(self, rec: FaultRecord) -> None:
        """Heal the fault; a killed node is restarted (and waited for)."""
        rec.healed_at = time.monotonic()
        try:
            if rec.kind in ("kill", "tail-loss"):
                await self.layout.restart(rec.target)
            elif rec.kind == "suspend":
                self.layout.resume(rec.target)
            elif rec.kind == "partition":
                for proxy in self.proxies.values():
                    if proxy.is_cut:
                        proxy.heal()
            elif rec.kind == "disk-full":
                self.layout.node(rec.target).disk_full_flag.unlink(missing_ok=True)
        except Exception as exc:
            rec.error = f"heal failed: {exc}"
        rec.ready_at = time.monotonic()

    async def heal_all(self) -> list[str]:
        """Whatever state a run ends in: every proxy forwarding, no disk full, every node
        running. The actions taken."""
        done = []
        for proxy in self.proxies.values():
            if proxy.is_cut:
                proxy.heal()
                done.append(f"healed {proxy.name}")
        for name in self.layout.targets():
            node = self.layout.node(name)
            if node.disk_full_flag.exists():
                node.disk_full_flag.unlink()
                done.append(f"freed the disk of {name}")
            if node.process.paused:
                self.layout.resume(name)
                done.append(f"resumed {name}")
            if not node.process.alive:
                await self.layout.restart(name)
                done.append(f"restarted {name}")
        return done
