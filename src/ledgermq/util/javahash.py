"""Java's ``String.hashCode`` in Python.

RocketMQ puts it on disk twice: as the consume-queue tag code and as the index-file key
hash, so a store written by Java and read by us (or the reverse) must agree bit for bit.
Java hashes UTF-16 code units, so characters outside the BMP count as two.
"""

from __future__ import annotations

from functools import lru_cache

_MASK = 0xFFFFFFFF


@lru_cache(maxsize=4096)
def java_string_hash(text: str) -> int:
    """Signed 32-bit ``String.hashCode`` of ``text``."""
    data = text.encode("utf-16-be", "surrogatepass")
    h = 0
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & _MASK
    return h - (1 << 32) if h >= 1 << 31 else h
