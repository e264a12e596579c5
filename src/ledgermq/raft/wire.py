"""A compact binary codec for batches of Raft ``Message``s (pure: bytes in, messages out).

The DLedger-mode transport carries one batch per remoting frame body. The format is
ours (DLedger's own JSON RPCs would cost a parse per entry and say nothing the core
needs); every integer is big-endian and fixed-width, so decoding is a handful of
``struct.unpack_from`` calls per message and per entry, never a loop over bytes::

    batch   := magic u16 (0x4C52 "LR") | version u8 (1) | reserved u8 (0) | count u32 | message*
    message := type u8 | flags u8 | src_len u8 | dst_len u8
               | term u64 | log_term u64 | index u64 | commit u64 | reject_hint u64
               | entry_count u32 | src utf-8 | dst utf-8 | [repair_until u64] | entry*
    entry   := index u64 | term u64 | kind u8 | data_len u32 | data

``flags`` bit 0 is ``reject``, bit 1 ``transfer``, bit 2 ``repairing``: only then does
``repair_until`` follow the ids (a member repairing a damaged log; a peer too old to know
the bit refuses the batch, so mixed versions talk normally except to a repairing member).
Type and kind numbers are fixed below (never enum order, so reordering an enum cannot change the wire).

Decoding is strict because the bytes come from the network: anything malformed (short
or trailing bytes, unknown codes or flags, empty or non-UTF-8 ids, counts that cannot
fit in what is left, entries that are not consecutive or whose terms fall, entries on
a message type that carries none, a batch over the size cap) raises
``RemoteProtocolError`` and nothing else. Entry data on decode are read-only
``memoryview`` slices of the input (no copy; they compare equal to ``bytes`` and the core
only takes their ``len``), so the input buffer must not be mutated afterwards.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Iterable, Sequence
from typing import cast

from ledgermq.errors import LocalProtocolError, RemoteProtocolError
from ledgermq.raft.types import Entry, EntryKind, Message, MsgType

__all__ = [
    "DEFAULT_MAX_BATCH_BYTES",
    "MAGIC",
    "VERSION",
    "decode_batch",
    "encode_batch",
    "encode_batches",
    "encoded_size",
]

MAGIC = 0x4C52
VERSION = 1
# Below the remoting layer's 16 MiB frame cap, leaving room for the command header.
DEFAULT_MAX_BATCH_BYTES = 15 * 1024 * 1024

_BATCH = struct.Struct(">HBBI")
_MSG = struct.Struct(">BBBBQQQQQI")
_ENTRY = struct.Struct(">QQBI")

_TYPE_CODES: dict[MsgType, int] = {
    MsgType.PRE_VOTE: 1,
    MsgType.PRE_VOTE_RESP: 2,
    MsgType.VOTE: 3,
    MsgType.VOTE_RESP: 4,
    MsgType.APPEND: 5,
    MsgType.APPEND_RESP: 6,
    MsgType.HEARTBEAT: 7,
    MsgType.HEARTBEAT_RESP: 8,
    MsgType.TIMEOUT_NOW: 9,
}
_TYPES: dict[int, MsgType] = {code: t for t, code in _TYPE_CODES.items()}
_KIND_CODES: dict[EntryKind, int] = {EntryKind.NORMAL: 0, EntryKind.NOOP: 1}
_KINDS: dict[int, EntryKind] = {code: k for k, code in _KIND_CODES.items()}
_REJECT, _TRANSFER, _REPAIRING = 0x1, 0x2, 0x4
_KNOWN_FLAGS = _REJECT | _TRANSFER | _REPAIRING
_U64 = struct.Struct(">Q")

assert set(_TYPE_CODES) == set(MsgType) and set(_KIND_CODES) == set(EntryKind)


# -- encoding ---------------------------------------------------------------------------


@functools.lru_cache(maxsize=256)
def _id_bytes(name: str, what: str) -> bytes:
    """A node id's bytes, checked; cached: a node encodes the same few ids in every message."""
    raw = name.encode("utf-8")
    if not 0 < len(raw) < 256:
        raise LocalProtocolError(f"{what} id {name!r} must be 1..255 UTF-8 bytes")
    return raw


def _encode_message(m: Message, out: list[bytes | memoryview]) -> int:
    """Append the parts of ``m`` to ``out``; return how many bytes they take."""
    src, dst = _id_bytes(m.src, "source"), _id_bytes(m.dst, "destination")
    src_len, dst_len = len(src), len(dst)
    flags = (_REJECT if m.reject else 0) | (_TRANSFER if m.transfer else 0) | (_REPAIRING if m.repair_until else 0)
    try:
        head = _MSG.pack(
            _TYPE_CODES[m.type],
            flags,
            src_len,
            dst_len,
            m.term,
            m.log_term,
            m.index,
            m.commit,
            m.reject_hint,
            len(m.entries),
        )
    except struct.error as exc:
        raise LocalProtocolError(f"{m.type.value} {m.src}->{m.dst} does not fit the wire format: {exc}") from None
    out += (head, src, dst)
    size = _MSG.size + src_len + dst_len
    if m.repair_until:
        try:
            out.append(_U64.pack(m.repair_until))
        except struct.error as exc:
            raise LocalProtocolError(f"repair_until {m.repair_until} does not fit the wire format: {exc}") from None
        size += _U64.size
    entry_head, entry_size, kinds = _ENTRY.pack, _ENTRY.size, _KIND_CODES
    for e in m.entries:
        data = e.data
        n = len(data)
        try:
            out.append(entry_head(e.index, e.term, kinds[e.kind], n))
        except struct.error as exc:
            raise LocalProtocolError(f"entry {e.index} does not fit the wire format: {exc}") from None
        out.append(data)
        size += entry_size + n
    return size


def encoded_size(m: Message) -> int:
    """The bytes ``m`` takes inside a batch (for callers that plan frames)."""
    size = _MSG.size + len(m.src.encode()) + len(m.dst.encode()) + (_U64.size if m.repair_until else 0)
    return size + sum(_ENTRY.size + len(e.data) for e in m.entries)


def encode_batch(messages: Sequence[Message], max_bytes: int = DEFAULT_MAX_BATCH_BYTES) -> bytes:
    """One batch holding every message; LocalProtocolError if it would exceed ``max_bytes``."""
    parts: list[bytes | memoryview] = [_BATCH.pack(MAGIC, VERSION, 0, len(messages))]
    size = _BATCH.size
    for m in messages:
        size += _encode_message(m, parts)
    if size > max_bytes:
        raise LocalProtocolError(f"a batch of {len(messages)} messages takes {size} bytes, over the {max_bytes} cap")
    return b"".join(parts)


def encode_batches(messages: Iterable[Message], max_bytes: int = DEFAULT_MAX_BATCH_BYTES) -> list[bytes]:
    """As few batches as keep each under ``max_bytes``, messages in order.

    A single message too large for any batch raises LocalProtocolError (the core bounds
    an Append by ``max_bytes_per_append``, so this means a misconfiguration).
    """
    batches: list[bytes] = []
    parts: list[bytes | memoryview] = []
    count, size = 0, _BATCH.size

    def cut() -> None:
        nonlocal parts, count, size
        if count:
            batches.append(b"".join([_BATCH.pack(MAGIC, VERSION, 0, count), *parts]))
        parts, count, size = [], 0, _BATCH.size

    for m in messages:
        mine: list[bytes | memoryview] = []
        n = _encode_message(m, mine)
        if _BATCH.size + n > max_bytes:
            raise LocalProtocolError(f"one {m.type.value} message takes {n} bytes, over the {max_bytes} batch cap")
        if size + n > max_bytes:
            cut()
        parts += mine
        count += 1
        size += n
    cut()
    return batches


# -- decoding ---------------------------------------------------------------------------


class _Reader:
    """A cursor over one batch's bytes: each method reads one part of the grammar at
    ``at`` and moves past it, refusing (RemoteProtocolError) whatever is malformed, so
    the checks for each part sit next to the part they guard."""

    __slots__ = ("at", "total", "view")

    def __init__(self, view: memoryview) -> None:
        self.view = view
        self.total = len(view)
        self.at = 0

    def header(self) -> int:
        """The batch header; returns the message count (already known to fit)."""
        view, total = self.view, self.total
        if total < _BATCH.size:
            raise RemoteProtocolError(f"a batch needs {_BATCH.size} header bytes, got {total}")
        magic, version, reserved, count = _BATCH.unpack_from(view, 0)
        if magic != MAGIC:
            raise RemoteProtocolError(f"bad batch magic {magic:#06x}")
        if version != VERSION or reserved != 0:
            raise RemoteProtocolError(f"unsupported batch version {version}/{reserved}")
        if count > (total - _BATCH.size) // _MSG.size:
            raise RemoteProtocolError(f"{count} messages cannot fit in {total} bytes")
        self.at = _BATCH.size
        return cast(int, count)

    def message(self) -> Message:
        """One message: fixed head, ids, the optional repair_until, its entries."""
        at = self.at
        if self.total - at < _MSG.size:
            raise RemoteProtocolError(f"message at byte {at} is cut short")
        code, flags, src_len, dst_len, term, log_term, index, commit, hint, n_entries = _MSG.unpack_from(self.view, at)
        mtype = _TYPES.get(code)
        if mtype is None:
            raise RemoteProtocolError(f"unknown message type {code} at byte {at}")
        if flags & ~_KNOWN_FLAGS:
            raise RemoteProtocolError(f"unknown flags {flags:#04x} at byte {at}")
        self.at = at + _MSG.size
        src, dst = self._ids(src_len, dst_len)
        repair_until = self._repair_until() if flags & _REPAIRING else 0
        entries = self._entries(mtype, n_entries, index, log_term) if n_entries else ()
        return Message(
            mtype,
            src,
            dst,
            term,
            log_term=log_term,
            index=index,
            entries=entries,
            commit=commit,
            reject=bool(flags & _REJECT),
            reject_hint=hint,
            transfer=bool(flags & _TRANSFER),
            repair_until=repair_until,
        )

    def _ids(self, src_len: int, dst_len: int) -> tuple[str, str]:
        at = self.at
        if self.total - at < src_len + dst_len:
            raise RemoteProtocolError(f"ids of the message at byte {at} are cut short")
        src = _id(self.view, at, src_len, "source")
        dst = _id(self.view, at + src_len, dst_len, "destination")
        self.at = at + src_len + dst_len
        return src, dst

    def _repair_until(self) -> int:
        """Present only with the repairing flag, and then never 0 (0 means "not repairing")."""
        at = self.at
        if self.total - at < _U64.size:
            raise RemoteProtocolError(f"repair_until at byte {at} is cut short")
        (repair_until,) = _U64.unpack_from(self.view, at)
        if repair_until == 0:
            raise RemoteProtocolError(f"repairing flag with repair_until 0 at byte {at}")
        self.at = at + _U64.size
        return cast(int, repair_until)

    def _entries(self, mtype: MsgType, n_entries: int, index: int, log_term: int) -> tuple[Entry, ...]:
        """An Append's entries, which must follow (index, log_term) consecutively in
        non-decreasing terms: the core trusts that shape, so the wire enforces it."""
        view, total, at = self.view, self.total, self.at
        if mtype is not MsgType.APPEND:
            raise RemoteProtocolError(f"a {mtype.value} message carries {n_entries} entries")
        if n_entries > (total - at) // _ENTRY.size:
            raise RemoteProtocolError(f"{n_entries} entries cannot fit in {total - at} bytes")
        items: list[Entry] = []
        expect, floor = index + 1, log_term
        for _ in range(n_entries):
            if total - at < _ENTRY.size:
                raise RemoteProtocolError(f"entry at byte {at} is cut short")
            e_index, e_term, kind_code, n = _ENTRY.unpack_from(view, at)
            kind = _KINDS.get(kind_code)
            if kind is None:
                raise RemoteProtocolError(f"unknown entry kind {kind_code} at byte {at}")
            if e_index != expect or e_term < floor:
                raise RemoteProtocolError(
                    f"entry ({e_index}, term {e_term}) at byte {at} does not follow ({expect - 1}, term {floor})"
                )
            at += _ENTRY.size
            if total - at < n:
                raise RemoteProtocolError(f"entry {e_index} data ({n} bytes) is cut short")
            # A memoryview slice, no copy: see the module docstring.
            items.append(Entry(e_index, e_term, cast(bytes, view[at : at + n]), kind))
            at += n
            expect, floor = e_index + 1, e_term
        self.at = at
        return tuple(items)


def _id(view: memoryview, at: int, n: int, what: str) -> str:
    if n == 0:
        raise RemoteProtocolError(f"empty {what} id at byte {at}")
    try:
        return str(view[at : at + n], "utf-8")
    except UnicodeDecodeError:
        raise RemoteProtocolError(f"{what} id at byte {at} is not UTF-8") from None


def decode_batch(buf: bytes | bytearray | memoryview, max_bytes: int = DEFAULT_MAX_BATCH_BYTES) -> list[Message]:
    """Every message of one batch; RemoteProtocolError for any malformed input."""
    view = memoryview(buf).cast("B").toreadonly()
    total = len(view)
    if total > max_bytes:
        raise RemoteProtocolError(f"a {total}-byte batch is over the {max_bytes} cap")
    reader = _Reader(view)
    count = reader.header()
    out = [reader.message() for _ in range(count)]
    if reader.at != total:
        raise RemoteProtocolError(f"{total - reader.at} trailing bytes after {count} messages")
    return out
