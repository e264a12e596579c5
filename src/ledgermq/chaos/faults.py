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
  free it;
* ``bitflip``: flip 1-4 bytes of a sealed commit-log segment of one replica, either after
  a SIGKILL (mode ``kill``) or a clean stop (``stop``) and then restart it, or while it
  runs (``online``: the store's scrub is to find them);
* ``segment-loss``: SIGKILL one replica, ``delete`` one sealed segment file or
  ``truncate`` it, restart;
* ``power-loss``: SIGKILL every broker of the group at once and zero each one's data
  files beyond its last fsync (``disk.power_loss``), restart them all;
* ``slow-disk``: every data fsync of one broker stalls while a flag file exists;
* ``clock-jump``: one broker's wall clock jumps forward, then back behind the real time,
  then returns;
* ``controller-kill``: SIGKILL the controller's Raft leader (a 3-node controller), hold,
  restart it; ``controller-partition``: cut every Raft link to and from it, hold, heal
  (brokers still reach it: it must step down, and they follow the new leader);
* pairs: ``kill+disk-full`` (kill the master, fill a slave's disk), ``partition+restart``
  (isolate the master, kill a slave and restart it while it is cut off),
  ``kill-in-recovery`` (kill a node, restart it and kill it again while it starts).

``schedule(seed, cycles, kinds)`` draws every cycle's kind, target role, load interval,
hold time, mode and the new kinds' draws (which segment, which bytes, how far the clock
jumps, when the second kill comes) from ``random.Random(seed)`` alone, so a seed replays
the same faults (a kind that needs no draw leaves the generator where the old kinds left
it, so their schedules did not change).
Targets are roles resolved against the layout when the fault starts: "master" and
"slave" on a master-slave group, "leader" and "follower" on a DLedger group (whose leader
moves), the same on a controller-mode group (resolved against the controller's view: its
master moves too), where a partition isolates the master or the slave (its replication and
controller links); ``targets_for(layout)`` names them. ``tail-loss`` does not apply to a DLedger
group (SEND_OK waits for a quorum's persistence; see ``NOT_APPLICABLE``).
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

CLEAN_KINDS = ("kill", "suspend", "partition", "tail-loss", "disk-full")
DATA_KINDS = ("bitflip", "segment-loss", "power-loss", "slow-disk", "clock-jump")
PAIR_KINDS = ("kill+disk-full", "partition+restart", "kill-in-recovery")
CONTROLLER_KINDS = ("controller-kill", "controller-partition")
KINDS = CLEAN_KINDS + DATA_KINDS + PAIR_KINDS + CONTROLLER_KINDS
TAIL_LOSS_BYTES = 64 * 1024
GROUP = "group"  # the role of a fault that hits every broker at once
_TARGETS = {
    "kill": ("master", "slave"),
    "suspend": ("master", "slave"),
    "partition": ("link",),
    "tail-loss": ("master",),
    "disk-full": ("master", "slave"),
    "bitflip": ("master", "slave"),
    "segment-loss": ("master", "slave"),
    "power-loss": (GROUP,),
    "slow-disk": ("master", "slave"),
    "clock-jump": ("master", "slave"),
    "kill+disk-full": ("master",),  # the master killed, the slave's disk full
    "partition+restart": ("master",),  # the master cut off, the slave restarted meanwhile
    "kill-in-recovery": ("master", "slave"),
}
# DLedger groups: the same kinds against the Raft roles; a partition isolates the leader.
_DLEDGER_TARGETS = {
    "kill": ("leader", "follower"),
    "suspend": ("leader", "follower"),
    "partition": ("leader",),
    "disk-full": ("leader", "follower"),
    "bitflip": ("leader", "follower"),
    "segment-loss": ("leader", "follower"),
    "power-loss": (GROUP,),
    "slow-disk": ("leader", "follower"),
    "clock-jump": ("leader", "follower"),
    "kill+disk-full": ("leader",),
    "partition+restart": ("leader",),
    "kill-in-recovery": ("leader", "follower"),
}
# Controller mode: the master-slave kinds against the roles the controller assigns now; a
# partition isolates one broker (its HA and controller links); and the controller's own.
_CONTROLLER_TARGETS = {
    **{kind: roles for kind, roles in _TARGETS.items() if kind != "partition"},
    "partition": ("master", "slave"),
    "controller-kill": ("controller-leader",),
    "controller-partition": ("controller-leader",),
}
# How a kind's fault is done, drawn per fault.
MODES: dict[str, tuple[str, ...]] = {
    "partition": ("reset", "blackhole"),
    "partition+restart": ("reset", "blackhole"),
    "controller-partition": ("reset", "blackhole"),
    "bitflip": ("kill", "stop", "online"),
    "segment-loss": ("delete", "truncate"),
}
MAX_FLIPS = 4
CLOCK_JUMP_S = (5.0, 180.0)  # how far the clock jumps, each way
RECOVERY_KILL_S = (0.05, 1.0)  # from the restart to the second kill
_NO_CONTROLLER = {
    kind: f"{kind} applies only to the controller layout (a controller-mode group)" for kind in CONTROLLER_KINDS
}
NOT_APPLICABLE = {
    "dledger": {
        "tail-loss": "tail-loss does not apply to a DLedger group: SEND_OK waits until a quorum persisted "
        "the message, so the loss of one node's unflushed tail cannot lose an acknowledged message by design",
        **_NO_CONTROLLER,
    },
    "sync": _NO_CONTROLLER,
    "async": _NO_CONTROLLER,
}
_HOLD_S = {  # (min, max) seconds the fault lasts
    "kill": (0.5, 3.0),
    "suspend": (1.0, 5.0),
    "partition": (1.0, 6.0),
    "tail-loss": (0.5, 2.0),
    "disk-full": (3.0, 8.0),  # long enough to span a segment roll (see layout.SEGMENT)
    "bitflip": (0.5, 2.0),  # down time; online: how long before the next fault
    "segment-loss": (0.5, 2.0),
    "power-loss": (0.5, 2.0),
    "slow-disk": (2.0, 8.0),
    "clock-jump": (2.0, 6.0),
    "kill+disk-full": (3.0, 8.0),
    "partition+restart": (2.0, 6.0),
    "kill-in-recovery": (0.5, 2.0),
    "controller-kill": (0.5, 3.0),
    "controller-partition": (1.0, 6.0),
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
    role: str  # "master", "slave", "link", "leader", "follower" or "controller-leader"
    steady_s: float  # load before the fault
    hold_s: float
    mode: str = ""  # see MODES
    # Fractions and amounts the injection uses (which segment and bytes, how far the clock
    # jumps, when the second kill comes), drawn with the rest.
    draws: tuple[float, ...] = ()

    @property
    def label(self) -> str:
        return f"{self.kind}:{self.role}"


def targets_for(layout: str) -> dict[str, tuple[str, ...]]:
    """The roles each kind may hit on a layout ("sync", "async", "dledger" or "controller")."""
    return {"dledger": _DLEDGER_TARGETS, "controller": _CONTROLLER_TARGETS}.get(layout, _TARGETS)


def restrict(
    targets: dict[str, tuple[str, ...]], kinds: tuple[str, ...], roles: tuple[str, ...]
) -> tuple[dict[str, tuple[str, ...]], tuple[str, ...], list[str]]:
    """Only faults against ``roles`` (e.g. the master's faults alone): the narrowed targets,
    the kinds left, and why the others were left out."""
    narrowed = {k: tuple(r for r in v if r in roles) for k, v in targets.items()}
    left = tuple(k for k in kinds if narrowed.get(k))
    why = [f"{k} hits no role of {', '.join(roles)} ({', '.join(targets.get(k, ()))})" for k in kinds if k not in left]
    return {k: v for k, v in narrowed.items() if v}, left, why


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
    if missing := [k for k in kinds if k not in targets]:
        raise ValueError(f"fault kinds {', '.join(missing)} hit nothing on this layout")
    rng = random.Random(seed)
    plans = []
    first = rng.sample(kinds, len(kinds))  # every kind at least once when there are enough cycles
    for i in range(cycles):
        kind = first[i] if i < len(first) else rng.choice(kinds)
        role = rng.choice(targets[kind])
        steady = round(rng.uniform(*steady_s), 3)
        lo, hi = _HOLD_S[kind]
        hold = round(rng.uniform(lo, hi) * hold_scale, 3)
        mode = rng.choice(MODES[kind]) if kind in MODES else ""
        plans.append(FaultPlan(i, kind, role, steady, hold, mode, _draws(rng, kind)))
    return plans


def _draws(rng: random.Random, kind: str) -> tuple[float, ...]:
    """The extra numbers a kind needs; none (and no draw) for the clean kinds."""
    if kind == "bitflip":  # the segment, then (position, mask) per flipped byte
        count = rng.randint(1, MAX_FLIPS)
        return (rng.random(), *(rng.random() for _ in range(2 * count)))
    if kind == "segment-loss":  # the segment, what a truncation keeps
        return (rng.random(), round(rng.uniform(0.1, 0.9), 3))
    if kind == "clock-jump":  # forward, then back behind the real time (seconds)
        return (round(rng.uniform(*CLOCK_JUMP_S), 3), -round(rng.uniform(*CLOCK_JUMP_S), 3))
    if kind == "kill-in-recovery":
        return (round(rng.uniform(*RECOVERY_KILL_S), 3),)
    if kind in ("kill+disk-full", "partition+restart"):  # which other node (DLedger: of two)
        return (rng.random(),)
    return ()


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
    repaired_at: float = 0.0  # data faults: the damage was found and repaired everywhere (chaos/repaired.py)
    unrepaired: str = ""  # data faults: why the damage was not found or not repaired in time
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
