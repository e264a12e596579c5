"""Waiting, after a fault that damaged data, until every broker found and repaired it.

A fault that rots or removes bytes on one replica is a single fault only until that
replica is repaired: the next fault drawn before then (its peer's kill, say) would make it
a double one, which no mode claims to survive. So after such a fault the run waits,
bounded, until the damage was *found* (an online flip is found by the target's scrub, a
cleanly stopped one by its recovery or scrub: its corruption counter rises above what it
was before the fault) and *repaired*: the target's log file holds the flipped bytes as
they were before the flip again (``flips_left``), and no running broker reports a damaged
range (``storeDamagedRanges``, which counts a DLedger member's repair under way too) or a
DLedger repair under way. The byte check is what makes a flip made during a SIGKILL wait
too: there no counter need rise (a bad record newer than the checkpoint may be cut as a
torn write and taken back from the slave; a flip recovery does not read is the scrub's to
find, seconds later), but every way it can be mended puts the replica's bytes back at
those offsets. A fault whose damage is not mended in time is recorded as unrepaired, and
the run fails on it.
"""

from __future__ import annotations

import asyncio
import os
import time

from ledgermq.chaos import disk
from ledgermq.chaos.faults import FaultRecord
from ledgermq.chaos.layout import Layout

DATA_FAULTS = ("bitflip", "segment-loss")
POLL_S = 0.25


async def found_count(layout: Layout, name: str) -> int:
    """How many corruptions ``name``'s current life has found (store and DLedger)."""
    node = layout.node(name)
    if not node.process.alive or node.process.paused:
        return 0
    try:
        async with layout.admin() as admin:
            info = await admin.broker_runtime_info(node.addr)
            found = _int(info.get("storeCorruptionsFound"))
            if layout.name == "dledger":
                found += (await admin.dledger_status(node.addr)).repairs
    except Exception:
        return 0
    return found


async def pending(layout: Layout) -> list[str]:
    """What is still damaged or under repair on the running brokers."""
    out: list[str] = []
    async with layout.admin() as admin:
        for name in layout.targets():
            node = layout.node(name)
            if not node.process.alive or node.process.paused:
                continue
            try:
                info = await admin.broker_runtime_info(node.addr)
                if damaged := _int(info.get("storeDamagedRanges")):
                    out.append(f"{name}: {damaged} damaged range(s)")
                if layout.name == "dledger" and (until := (await admin.dledger_status(node.addr)).repairing_until):
                    out.append(f"{name}: repairing until index {until}")
            except Exception as exc:
                out.append(f"{name}: no answer ({type(exc).__name__})")
    return out


def flips_left(layout: Layout, rec: FaultRecord) -> list[str]:
    """The bytes a bitflip changed that the target's log file does not hold as before the
    flip yet ("offset: now, was"). A file gone (retention deleted it) holds none."""
    segment = str(rec.notes.get("segment", ""))
    flips = rec.notes.get("flips") or []
    if not segment or not flips:
        return []
    path = disk.log_dir(layout.node(rec.target).store_dir) / segment
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return []
    left = []
    try:
        for flip in flips:
            offset, old = int(flip["offset"]), int(flip["old"])
            now = os.pread(fd, 1, offset - int(segment))
            if now != bytes([old]):
                left.append(f"{offset}: {now.hex() or 'past the end'}, was {old:02x}")
    finally:
        os.close(fd)
    return left


async def wait_repaired(layout: Layout, rec: FaultRecord, baseline: int, timeout: float) -> None:
    """Wait until ``rec``'s damage was found and mended and nothing is damaged any more;
    sets ``rec.repaired_at`` or ``rec.unrepaired``."""
    deadline = time.monotonic() + timeout
    flipped = rec.kind == "bitflip" and not rec.notes.get("skipped")
    if flipped and rec.mode != "kill":  # after a SIGKILL a torn-write cut counts nothing: see above
        # The bytes back as they were also prove it was found: only a repair writes them. (A
        # DLedger member that finds damage restarts its node in-process, and the counters of
        # its new life start below the baseline: a 100-cycle run waited out such a repair.)
        while await found_count(layout, rec.target) <= baseline and flips_left(layout, rec):
            if time.monotonic() > deadline:
                rec.unrepaired = f"{rec.target} never found the flipped bytes within {timeout:.0f}s"
                return
            await asyncio.sleep(POLL_S)
    while flipped and (left := flips_left(layout, rec)):
        if time.monotonic() > deadline:
            rec.unrepaired = (
                f"{rec.target} still holds {len(left)} flipped byte(s) after {timeout:.0f}s ({'; '.join(left)})"
            )
            return
        await asyncio.sleep(POLL_S)
    while left := await pending(layout):
        if time.monotonic() > deadline:
            rec.unrepaired = f"not repaired within {timeout:.0f}s: {'; '.join(left)}"
            return
        await asyncio.sleep(POLL_S)
    rec.repaired_at = time.monotonic()


def _int(value: object) -> int:
    try:
        return int(str(value))
    except ValueError:
        return 0
