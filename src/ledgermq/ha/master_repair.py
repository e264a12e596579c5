"""The master's repairs during a handshake, once it agreed with a slave where their logs match.

``repair_pass`` plans with ``repair.plan_repairs`` and carries the plan out on the
handshake's socket: for each range damaged here that the slave holds healthy, a fetch
(the slave serves it as it serves a lost tail), the borders compared with ours, then
``store.repair_range``; for each range the slave listed as damaged that we hold healthy,
a "repair" answer followed by our bytes. What cannot be repaired from this slave is noted
in the ``RepairBook`` (logged, shown by haStatus) and keeps being refused by the store.
"""

from __future__ import annotations

import asyncio
import logging
import socket

from ledgermq.ha.epochs import EpochLog, Fetch
from ledgermq.ha.handshake import Give, Hello, encode_answer
from ledgermq.ha.range_io import Receive, apply_repair, receive_range, send_range
from ledgermq.ha.repair import RepairPlan, plan_repairs
from ledgermq.ha.repair_book import RepairBook

log = logging.getLogger(__name__)


async def repair_pass(
    loop: asyncio.AbstractEventLoop,
    sock: socket.socket,
    recv: Receive,
    address: str,
    book: RepairBook,
    epochs: EpochLog,
    hello: Hello,
    agreed: int,
    batch: int,
) -> RepairPlan:
    """Repair what this slave and we can repair for each other below ``agreed``."""
    store = book.store
    plan = plan_repairs(
        master_damaged=book.refresh(),
        slave_damaged=hello.damaged,
        master_start=store.min_phy_offset,
        slave_start=hello.min_offset,
        agreed=agreed,
        segment_size=store.config.mapped_file_size_commitlog,
    )
    for t in plan.take:
        log.warning("HA: taking damaged commit log [%d, %d) from slave %s", t.start, t.end, address)
        await loop.sock_sendall(sock, encode_answer(Fetch(t.low, t.high), epochs, repair=True))
        data = await receive_range(recv, t.low, t.high)
        problem = await apply_repair(store, t, data, f"slave {address}")
        if problem:
            book.note_unrepaired(t.start, t.end, f"slave {address} sent bytes that cannot repair it: {problem}")
        else:
            book.took(t.start, t.end, f"slave {address}")
    for u in plan.missing:
        book.note_unrepaired(u.start, u.end, f"slave {address}: {u.reason}")
    for t in plan.give:
        await loop.sock_sendall(sock, encode_answer(Give.of(t), epochs))
        stopped = await send_range(loop, sock, store, t.low, t.high, batch)
        if stopped >= t.high:
            book.gave(t.start, t.end, f"slave {address}")
    for u in plan.refused:
        log.error("HA: slave %s holds [%d, %d) damaged and we cannot repair it: %s", address, u.start, u.end, u.reason)
    if plan.take or plan.give:
        book.refresh()
    return plan
