"""The master's half of the HA handshake, on one slave connection, before the 4.x stream.

Reads the first 8 bytes: a hello (a ledgermq slave) or a plain report (a RocketMQ 4.x
slave, served the 4.x way). For a hello it asks ``MasterEpochs`` for a decision, takes a
lost tail back from the slave if the decision is a fetch (whole records only, appended at
our end as they arrive), repairs damaged ranges either way below the agreed offset
(master_repair.py), and sends the answer with a fingerprint of the agreed bytes.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from dataclasses import dataclass

from ledgermq.ha.codec import HEADER, HEADER_SIZE, REPORT, HAProtocolError
from ledgermq.ha.epochs import Agree, Decision, Fetch, Refuse, describe_truncation
from ledgermq.ha.handshake import HELLO_MAGIC, LENGTH, check_length, decode_hello, encode_answer
from ledgermq.ha.master_epochs import MasterEpochs
from ledgermq.ha.master_repair import repair_pass
from ledgermq.ha.repair import Range, RepairPlan, normalize, subtract
from ledgermq.ha.repair_book import RepairBook
from ledgermq.store.dispatch import whole_records_end

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Outcome:
    """How the handshake ended: a 4.x slave's first report, an agreement, or a refusal."""

    legacy_report: int | None = None  # a RocketMQ 4.x slave: its first report
    agreed: int | None = None  # a ledgermq slave: the offset both logs match below
    held_from: int = 0  # where the slave's log starts (its acks say nothing below)
    refused: str = ""
    slave_damaged: tuple[Range, ...] = ()  # what the slave's hello listed as damaged
    more_repairs: bool = False  # repairs left over for the next handshake (one's budget ran out)
    slave_broker_id: int | None = None  # controller mode: the id the slave's hello gave


async def handshake(
    sock: socket.socket, address: str, epochs: MasterEpochs, book: RepairBook | None = None, batch: int = 32 * 1024
) -> Outcome:
    loop = asyncio.get_running_loop()
    value: int = REPORT.unpack(await _recv_exact(loop, sock, REPORT.size))[0]
    if value != HELLO_MAGIC:
        if value < 0:
            raise HAProtocolError(f"slave reported a negative offset {value}")
        return Outcome(legacy_report=value)
    (size,) = LENGTH.unpack(await _recv_exact(loop, sock, LENGTH.size))
    hello = decode_hello(await _recv_exact(loop, sock, check_length(size)))
    async with epochs.reconciling:
        decision: Decision = epochs.decide(hello)
        if isinstance(decision, Fetch):
            await loop.sock_sendall(sock, encode_answer(decision, epochs.epochs))
            await _take_back(loop, sock, address, epochs, decision)
            epochs.recovery_note = f"took back {epochs.took_back_bytes} bytes from a slave"
            await epochs.slave_reconciled(hello.broker_id)  # what the slave had is ours again: begin the epoch
            decision = epochs.decide(hello)
        plan = RepairPlan()
        if isinstance(decision, Agree):
            if book is not None:  # only below the agreed offset: where both logs are the same log
                recv = lambda n: _recv_exact(loop, sock, n)  # noqa: E731
                plan = await repair_pass(loop, sock, recv, address, book, epochs.epochs, hello, decision.offset, batch)
            await epochs.slave_reconciled(hello.broker_id)
            if decision.offset < hello.max_offset:
                epochs.truncated_slaves += 1
                log.error("HA slave %s: %s", address, describe_truncation(hello.max_offset, decision.offset))
        check = None
        if isinstance(decision, Agree):
            avoid = [*(book.damaged if book is not None else ()), *hello.damaged]
            check = epochs.fingerprint(decision.offset, hello.min_offset, avoid)
        log_start = book.store.min_phy_offset if book is not None else None
        answer = encode_answer(decision, epochs.epochs, check, refused=plan.refused, log_start=log_start)
        await loop.sock_sendall(sock, answer)
    if isinstance(decision, Refuse):
        log.error("HA slave %s refused: %s", address, decision.reason)
        return Outcome(held_from=hello.min_offset, refused=decision.reason, slave_broker_id=hello.broker_id)
    assert isinstance(decision, Agree)
    log.info("HA slave %s (epoch %d, end %d) agreed at %d", address, hello.epoch, hello.max_offset, decision.offset)
    # what we sent it is most likely repaired now (if not, its store refuses to serve it, and a fetch stops there)
    still_damaged = subtract(hello.damaged, normalize((t.start, t.end) for t in plan.give))
    return Outcome(
        agreed=decision.offset,
        held_from=hello.min_offset,
        slave_damaged=tuple(still_damaged),
        more_repairs=plan.deferred,
        slave_broker_id=hello.broker_id,
    )


async def _take_back(
    loop: asyncio.AbstractEventLoop, sock: socket.socket, address: str, epochs: MasterEpochs, fetch: Fetch
) -> None:
    """``[start, end)`` from the slave as HA frames, then a header-only frame where it stopped."""
    store = epochs.store
    segment = store.config.mapped_file_size_commitlog
    log.warning("HA: taking [%d, %d) back from slave %s (our log lost its tail)", fetch.start, fetch.end, address)
    pending = bytearray()
    expect = fetch.start
    skipped = 0  # bytes read past a point we could not take records from (read to the end all the same)
    while True:
        offset, size = HEADER.unpack(await _recv_exact(loop, sock, HEADER_SIZE))
        if offset != expect or size < 0 or expect + size > fetch.end:
            raise HAProtocolError(f"slave sent {size} bytes at {offset} during a fetch expecting {expect}")
        if size == 0:
            break
        body = await _recv_exact(loop, sock, size)
        expect += size
        if skipped:
            skipped += size
            continue
        pending += body
        base = store.max_phy_offset
        took = whole_records_end(pending, base, segment)
        if took:
            await asyncio.to_thread(store.append_raw, base, bytes(pending[:took]))
            del pending[:took]
            epochs.took_back_bytes += took
        if len(pending) > store.config.max_message_size + (1 << 20):
            skipped, pending = len(pending), bytearray()  # no record is that long: nothing after is takeable
    if pending or skipped:
        log.error(
            "HA: %d bytes from slave %s at %d are no whole record; not taken",
            len(pending) + skipped,
            address,
            store.max_phy_offset,
        )
    await asyncio.to_thread(store.adopt_raw_tail)
    log.warning("HA: took back %d bytes; our log now ends at %d", epochs.took_back_bytes, store.max_phy_offset)


async def _recv_exact(loop: asyncio.AbstractEventLoop, sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = await loop.sock_recv(sock, n - len(buf))
        if not chunk:
            raise ConnectionError("slave closed the connection during the handshake")
        buf += chunk
    return bytes(buf)
