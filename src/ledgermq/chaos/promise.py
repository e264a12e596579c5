"""What each layout and flush mode promises through a power loss, and which losses it allows.

A SEND_OK under ``SYNC_FLUSH`` means the broker that answered (the master; on a DLedger
group a quorum, each member fsyncing before it counts) had the message on disk, so a
power loss of every process must not cost it. Under ``ASYNC_FLUSH`` a SEND_OK means
"written", to the page cache: on a master-slave group both copies (SYNC_MASTER) or the one
(ASYNC_MASTER) may still sit there when the power goes, and a DLedger quorum's copies as
well. Such a group promises, through a power loss, only what was durable somewhere:

* master-slave: a message that at least one broker had fsynced (its commit-log offset
  below that broker's durable end) must survive, as the slave's copy comes back to the
  master (replication epochs);
* DLedger: a message a majority had fsynced must survive (a new leader is elected among
  a majority, and every majority holds one of them).

``allowed_losses`` applies that, per acknowledged message, at the first power loss that
had not ended when the acknowledgement arrived (``FaultRecord.notes["nodes"][name]["durable_end"]``
from ``disk.power_loss``); a loss it names is reported as allowed by the mode, not as a
failure. "Not ended", not "not begun": the group's processes are killed one after another,
so a broker may answer a send a few milliseconds after the power loss began (a run saw
SEND_OKs 45 ms into one); nothing can be stored between the kills and the restart, so any
SEND_OK that arrived before the restart (``healed_at``) was stored before that power loss.
Judged by the next power loss instead, such a message was compared with durable ends far
past its offset, and its allowed loss was reported as a failure.
"""

from __future__ import annotations

from collections.abc import Sequence

from ledgermq.chaos.faults import FaultRecord
from ledgermq.chaos.workload import Attempt

FLUSH_MODES = ("async", "sync")


def keeps_acked_through_power_loss(layout: str, flush: str) -> bool:
    """Whether every SEND_OK must survive a power loss of the whole group."""
    return flush == "sync"


def promise_text(layout: str, flush: str) -> str:
    if keeps_acked_through_power_loss(layout, flush):
        return "SYNC_FLUSH: every acknowledged message survives a power loss"
    who = "fewer than a majority of the members" if layout == "dledger" else "no broker"
    return f"ASYNC_FLUSH: a power loss may cost the acknowledged messages {who} had fsynced"


def needed_copies(layout: str, brokers: int) -> int:
    """How many durable copies oblige the group to keep a message."""
    return brokers // 2 + 1 if layout == "dledger" else 1


def allowed_losses(
    attempts: Sequence[Attempt], faults: Sequence[FaultRecord], layout: str, flush: str
) -> dict[int, str]:
    """seq -> why its loss is allowed, for every acknowledged message the mode may lose."""
    if keeps_acked_through_power_loss(layout, flush):
        return {}
    losses = sorted((f for f in faults if f.kind == "power-loss" and f.notes.get("nodes")), key=lambda f: f.injected_at)
    if not losses:
        return {}
    allowed: dict[int, str] = {}
    for a in attempts:
        if not a.acked or a.phys < 0:
            continue
        first = next((f for f in losses if max(f.injected_at, f.healed_at) > a.end), None)
        if first is None:
            continue
        nodes = first.notes["nodes"]
        durable = sum(1 for n in nodes.values() if a.phys < n["durable_end"])
        if durable < needed_copies(layout, len(nodes)):
            before = first.injected_at - a.end
            when = f"{before:.3f}s before" if before >= 0 else f"{-before:.3f}s into"
            allowed[a.seq] = (
                f"acknowledged {when} power loss {first.index + 1}, fsynced on {durable} of {len(nodes)} brokers"
            )
    return allowed
