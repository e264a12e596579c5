"""Moving one commit-log range during the handshake, either way, as plain HA frames.

The sender writes ``[low, high)`` as frames of at most the batch size and then a
header-only frame at the offset where it stopped: at ``high``, or earlier when its own
copy turned out damaged there (``CorruptRangeError``) or ended. The receiver collects the
bytes and checks that every frame continues where the last one ended. Used by a slave
serving a fetch (a lost tail, a master's repair) and by a master giving a slave a range
to repair; ``borders_differ`` is the receiver's check that the bytes around the repaired
range are its own.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Awaitable, Callable

from ledgermq.errors import CorruptRangeError
from ledgermq.ha.codec import HEADER, HEADER_SIZE, HAProtocolError, encode_header, frame_buffers
from ledgermq.ha.repair import Transfer
from ledgermq.store.native_store import NativeMessageStore

log = logging.getLogger(__name__)

_WINDOW = 1024 * 1024

Receive = Callable[[int], Awaitable[bytes]]


async def send_range(
    loop: asyncio.AbstractEventLoop, sock: socket.socket, store: NativeMessageStore, low: int, high: int, batch: int
) -> int:
    """Send ``[low, high)`` of our log; returns where we stopped (``high`` unless our copy
    ends or is damaged first: the peer learns that from the closing header-only frame)."""
    pos = low
    while pos < high:
        try:
            data = await asyncio.to_thread(store.read_commitlog, pos, min(_WINDOW, high - pos))
        except CorruptRangeError as err:
            log.error("HA: cannot send [%d, %d): our copy is damaged from %d (%s)", low, high, max(pos, err.start), err)
            if err.start > pos:  # send what lies before the damage, it may still help
                data = await asyncio.to_thread(store.read_commitlog, pos, err.start - pos)
            else:
                break
        if not data:
            break
        for part in frame_buffers(pos, data, batch):
            await loop.sock_sendall(sock, part)
        pos += len(data)
    await loop.sock_sendall(sock, encode_header(pos, 0))
    return pos


async def receive_range(recv: Receive, low: int, high: int) -> bytes:
    """The peer's frames for ``[low, high)`` up to its closing header-only frame: the bytes
    it sent (shorter than asked when it stopped early)."""
    data = bytearray()
    expect = low
    while True:
        offset, size = HEADER.unpack(await recv(HEADER_SIZE))
        if offset != expect or size < 0 or expect + size > high:
            raise HAProtocolError(f"peer sent {size} bytes at {offset} while moving [{low}, {high}), expected {expect}")
        if size == 0:
            return bytes(data)
        data += await recv(size)
        expect += size


def read_exact(store: NativeMessageStore, offset: int, size: int) -> bytes:
    """``size`` bytes of our log from ``offset`` across segments (shorter at its end).
    Raises CorruptRangeError when they overlap a damaged range. Blocking: call in a thread."""
    out = bytearray()
    while len(out) < size:
        data = store.read_commitlog(offset + len(out), size - len(out))
        if not data:
            break
        out += data
    return bytes(out)


def borders_differ(store: NativeMessageStore, t: Transfer, data: bytes) -> str:
    """Why ``data`` (the peer's [t.low, t.high)) cannot repair [t.start, t.end) here, or "":
    the bytes around the damaged range must be exactly ours. Blocking: call in a thread."""
    if len(data) != t.size:
        return f"the peer sent {len(data)} of the {t.size} bytes of [{t.low}, {t.high})"
    for a, b in ((t.low, t.start), (t.end, t.high)):
        if a == b:
            continue
        try:
            ours = read_exact(store, a, b - a)
        except CorruptRangeError as err:
            return f"our bytes around the range are damaged too ({err})"
        if ours != data[a - t.low : b - t.low]:
            return (
                f"the peer's bytes [{a}, {b}) next to the damaged range differ from ours: its log is not this one "
                "(another group's, or a wiped store)"
            )
    return ""


async def apply_repair(store: NativeMessageStore, t: Transfer, data: bytes, source: str) -> str:
    """Rewrite [t.start, t.end) from ``data`` (the peer's [t.low, t.high)) after checking its
    borders; why it was not, or "" (the store validates the records and logs the repair)."""
    problem = await asyncio.to_thread(borders_differ, store, t, data)
    if problem:
        return problem
    try:
        await asyncio.to_thread(store.repair_range, t.start, data[t.start - t.low : t.end - t.low], source)
    except (CorruptRangeError, ValueError) as exc:
        return str(exc)
    return ""
