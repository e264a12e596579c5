"""Send-batch records in C (src/ledgermq/_recordc.c); store/encoding.py is its only caller."""

from typing import Any

def encode_clean_batch(
    body: bytes | bytearray | memoryview,
    head: bytes,
    topic_part: bytes,
    extra_text: bytes,
    extra_keys: tuple[bytes, ...],
    refused_keys: tuple[bytes, ...],
    names: tuple[bytes, bytes, bytes, bytes, bytes],
    extra_facts: tuple[int, str | None, str | None],
    topic: str,
    queue_id: int,
    queue_key: str,
    store_host: tuple[str, int],
    sysflag: int,
    request_cls: Any,
    encoded_cls: Any,
    /,
) -> tuple[list[Any], bool, int] | None: ...
def crc32(data: bytes | bytearray | memoryview, /) -> int: ...
