"""Helpers for the write/read-path store tests.

Everything here re-derives the on-disk formats from docs/formats.md (§4, §5) with
plain ``struct``, so the tests check the store against the format rather than against the
store's own codec.
"""

from __future__ import annotations

import struct
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ledgermq.store.message_input import MessageInput
from ledgermq.store.message_store import MessageStore
from ledgermq.store.results import PutResult

SEG = 64 * 1024  # conftest SMALL mapped_file_size_commitlog
CQ_SEG_UNITS = 64  # conftest SMALL mapped_file_size_consume_queue = 20 * 64
MESSAGE_MAGIC = 0xDAA320A7
BLANK_MAGIC = 0xCBD43194
BASE_RECORD_LEN = 91  # TOTALSIZE with IPv4 hosts and empty body/topic/properties
DEFAULT_STORE_HOST_HEX = "7F000001" + "00002A9F"  # 127.0.0.1:10911

StoreFactory = Callable[..., MessageStore]


def java_hash(text: str) -> int:
    """Java ``String.hashCode``: 31*h + UTF-16 code unit, wrapped to a signed int32."""
    units = text.encode("utf-16-be", "surrogatepass")
    h = 0
    for i in range(0, len(units), 2):
        h = (h * 31 + int.from_bytes(units[i : i + 2], "big")) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def record_len(body_len: int, topic: str, props: str = "") -> int:
    return BASE_RECORD_LEN + body_len + len(topic.encode()) + len(props.encode())


def encode_props(props: dict[str, str]) -> str:
    return "\x02".join(f"{k}\x01{v}" for k, v in props.items())


@dataclass
class Rec:
    total: int
    magic: int
    crc: int
    queue_id: int
    flag: int
    queue_offset: int
    phys: int
    sysflag: int
    born_ts: int
    store_ts: int
    store_ip: bytes
    store_port: int
    reconsume: int
    prepared: int
    body: bytes
    topic: str
    props: dict[str, str] = field(default_factory=dict)


def parse_record(buf: bytes, pos: int = 0) -> Rec:
    """Decode one IPv4 record laid out as in docs/formats.md §4.1."""
    total, magic, crc, qid, flag, qoff, phys, sysflag, born_ts = struct.unpack_from(">iIiiiqqiq", buf, pos)
    assert sysflag & 0x30 == 0, "tests only store IPv4 hosts"
    store_ts = struct.unpack_from(">q", buf, pos + 56)[0]
    store_ip = bytes(buf[pos + 64 : pos + 68])
    store_port = struct.unpack_from(">i", buf, pos + 68)[0]
    reconsume, prepared, body_len = struct.unpack_from(">iqi", buf, pos + 72)
    p = pos + 88
    body = bytes(buf[p : p + body_len])
    p += body_len
    tlen = buf[p]
    topic = bytes(buf[p + 1 : p + 1 + tlen]).decode()
    p += 1 + tlen
    plen = struct.unpack_from(">h", buf, p)[0]
    p += 2
    text = bytes(buf[p : p + plen]).decode()
    p += plen
    assert p - pos == total, f"record at {pos}: fields end at {p - pos}, TOTALSIZE says {total}"
    props = {}
    for seg in text.split("\x02"):
        k, _, v = seg.partition("\x01")
        if k and v:
            props[k] = v
    return Rec(
        total,
        magic,
        crc,
        qid,
        flag,
        qoff,
        phys,
        sysflag,
        born_ts,
        store_ts,
        store_ip,
        store_port,
        reconsume,
        prepared,
        body,
        topic,
        props,
    )


def body_crc(body: bytes) -> int:
    return zlib.crc32(body) & 0x7FFFFFFF


def expected_msg_id(phys: int, host_hex: str = DEFAULT_STORE_HOST_HEX) -> str:
    return host_hex + f"{phys:016X}"


# -- files -------------------------------------------------------------------------------


def store_root(store: MessageStore) -> Path:
    return Path(store.config.root_dir)


def commitlog_files(store: MessageStore) -> list[Path]:
    return sorted((store_root(store) / "commitlog").iterdir())


def read_commitlog_file_bytes(store: MessageStore, offset: int, size: int) -> bytes:
    """``size`` bytes at absolute commit-log ``offset``, read through the file (not the store)."""
    seg = store.config.mapped_file_size_commitlog
    start = offset - offset % seg
    path = store_root(store) / "commitlog" / f"{start:020d}"
    with open(path, "rb") as f:
        f.seek(offset - start)
        return f.read(size)


def cq_dir(store: MessageStore, topic: str, queue_id: int) -> Path:
    return store_root(store) / "consumequeue" / topic / str(queue_id)


def read_cq_units(store: MessageStore, topic: str, queue_id: int) -> list[tuple[int, int, int]]:
    """All non-zero units of a queue read from its files, in logical order."""
    units: list[tuple[int, int, int]] = []
    for path in sorted(cq_dir(store, topic, queue_id).iterdir()):
        data = path.read_bytes()
        for pos in range(0, len(data), 20):
            unit = struct.unpack_from(">qiq", data, pos)
            if unit == (0, 0, 0):
                break
            units.append(unit)
    return units


# -- puts --------------------------------------------------------------------------------


def put(
    store: MessageStore,
    topic: str = "T",
    body: bytes = b"hello",
    queue_id: int = 0,
    *,
    sysflag: int = 0,
    **props: str,
) -> PutResult:
    """Put one message and insist it was stored."""
    res = store.put_message(
        MessageInput(topic=topic, body=body, queue_id=queue_id, properties=dict(props), sysflag=sysflag)
    )
    assert res.ok, res
    assert res.append is not None
    return res


def wait_until(cond: Callable[[], Any], timeout: float = 10.0, what: str = "condition") -> Any:
    """Poll ``cond`` until it returns something truthy, failing after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


def local_index_name(wall_ms: int) -> str:
    """yyyyMMddHHmmssSSS in local time, as Java's UtilAll.timeMillisToHumanString."""
    return time.strftime("%Y%m%d%H%M%S", time.localtime(wall_ms // 1000)) + f"{wall_ms % 1000:03d}"
