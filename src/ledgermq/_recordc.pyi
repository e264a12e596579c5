"""The compiled record paths (src/ledgermq/_recordc.c): sent messages' records (store/encoding.py),
request headers and frames, Java's string hash, the reput's record scan (store/record_scan.py),
pulled records' decode (src/ledgermq/_record_decode.c, protocol/message.py), and the index file's
puts (src/ledgermq/_index_put.c, store/index.py)."""

import mmap
from collections.abc import Callable
from typing import Any

def encode_clean_batch(
    body: bytes | bytearray | memoryview,
    head: bytes,
    topic_part: bytes,
    context: tuple[Any, ...],
    topic: str,
    queue_id: int,
    queue_key: str,
    store_host: tuple[str, int],
    sysflag: int,
    /,
) -> tuple[list[Any], bool, int] | None: ...
def encode_clean_single(
    body: bytes | bytearray | memoryview,
    properties: str,
    flag: int,
    queue_id: int,
    born_timestamp: int,
    reconsume_times: int,
    head: bytes,
    topic_part: bytes,
    context: tuple[Any, ...],
    topic: str,
    queue_key: str,
    store_host: tuple[str, int],
    sysflag: int,
    /,
) -> tuple[Any, bool] | None: ...
def decode_header(cls: type, plan: tuple[Any, ...], slow: Any, required: Any, ext: Any, /) -> Any: ...
def decode_frame(
    loads: Any,
    cls: type,
    setters: tuple[Any, ...],
    json_type: Any,
    slow: Any,
    payload: bytes | bytearray | memoryview,
    /,
) -> Any: ...
def scan_records(
    buf: bytes | mmap.mmap,
    pos: int,
    limit: int,
    base_offset: int,
    capacity: int,
    max_records: int,
    delay_levels_ms: list[int],
    special_topics: frozenset[str],
    special: Callable[[str, bytes, int, int, list[int]], int],
    /,
) -> tuple[list[Any], int]: ...
def decode_records(
    buf: bytes | bytearray | memoryview,
    check_crc: bool,
    inflate: bool,
    record_cls: Callable[..., Any],
    slow: Callable[..., Any],
    /,
) -> list[Any] | None: ...
def index_put_run(
    mm: mmap.mmap,
    slots: int,
    max_entries: int,
    count: int,
    slot_count: int,
    begin_phy: int,
    begin_ts: int,
    end_phy: int,
    end_ts: int,
    flat: list[int],
    start: int,
    /,
) -> tuple[int, int, int, int, int, int, int] | None: ...
def java_hash(text: str, /) -> int: ...
def java_ascii_hash(data: bytes | bytearray | memoryview, /) -> int | None: ...
def crc32(data: bytes | bytearray | memoryview, /) -> int: ...
