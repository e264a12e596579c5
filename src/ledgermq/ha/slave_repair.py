"""The slave's side of repairs during the handshake.

A slave lists the ranges its store holds damaged in its hello (``hello_damage``); the
master answers with a "repair" for each range it holds healthy, followed by its bytes,
which ``take_repair`` checks (the bytes around the range must be ours) and hands to
``store.repair_range``; what the master cannot give comes back with the agreement and is
noted by ``note_after_agreement``. Nothing is ever truncated for a repair: a damaged range
in the middle of the log stays where it is, refused, until a master's bytes repair it.

One exception, ``expire_below_master_start``: a damaged range wholly below where the
master's log starts (its retention deleted those segments) will never be repaired by
anyone, so the slave lets it go as its own retention would (store/damage_expiry.py),
loudly, instead of refusing it forever.
"""

from __future__ import annotations

import asyncio
import logging

from ledgermq.ha.handshake import Give, Reply
from ledgermq.ha.range_io import Receive, apply_repair, receive_range
from ledgermq.ha.repair import MAX_RANGES, Range, Transfer, clip
from ledgermq.ha.repair_book import RepairBook

log = logging.getLogger(__name__)


def hello_damage(book: RepairBook, start: int, end: int) -> list[Range]:
    """The damaged ranges a hello for a log [start, end) lists (refreshed from the store)."""
    return clip(book.refresh(), start, end)[:MAX_RANGES]


async def take_repair(recv: Receive, book: RepairBook, give: Give, master: str) -> None:
    """Receive the master's bytes for ``give`` and rewrite the damaged range with them."""
    t = Transfer(give.start, give.end, give.low, give.high)
    log.warning(
        "HA client: master %s sends [%d, %d) to repair our damaged [%d, %d)", master, t.low, t.high, t.start, t.end
    )
    data = await receive_range(recv, t.low, t.high)
    problem = await apply_repair(book.store, t, data, f"master {master}")
    if problem:
        book.note_unrepaired(t.start, t.end, f"master {master} sent bytes that cannot repair it: {problem}")
    else:
        book.took(t.start, t.end, f"master {master}")
    book.refresh()


def note_after_agreement(book: RepairBook, reply: Reply, agreed: int, master: str) -> None:
    """Say what stays damaged below the agreed offset, and why (the master's reason, or that
    it did not offer a repair: a master that predates repairs, or one whose budget ran out)."""
    for u in reply.refused:
        book.note_unrepaired(u.start, u.end, f"master {master}: {u.reason}")
    refused = {(u.start, u.end) for u in reply.refused}
    for a, b in clip(book.refresh(), 0, agreed):
        if (a, b) not in refused:
            book.note_unrepaired(a, b, f"master {master} did not send it in the last handshake")


async def expire_below_master_start(book: RepairBook, reply: Reply, agreed: int, master: str) -> None:
    """Let go of damaged ranges the master no longer holds at all (below the log start its
    agreement reported, and below the agreed offset): its retention deleted them, so no
    replica will ever send them. Only segments ending at or below that start are deleted."""
    if reply.log_start is None:  # a master before the field: nothing is known expired
        return
    group_start = min(reply.log_start, agreed)
    if not any(b <= group_start for _a, b in book.refresh()):
        return
    why = f"master {master}'s log starts at {reply.log_start}"
    gone = await asyncio.to_thread(book.store.expire_damage_below, group_start, why)
    if gone is not None:
        book.expired(gone.ranges, why)
