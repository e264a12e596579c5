"""Bits of a stored message's SYSFLAG (RocketMQ ``MessageSysFlag``)."""

from __future__ import annotations

COMPRESSED = 0x1
MULTI_TAGS = 0x2
TRANSACTION_NOT_TYPE = 0x0
TRANSACTION_PREPARED_TYPE = 0x4
TRANSACTION_COMMIT_TYPE = 0x8
TRANSACTION_ROLLBACK_TYPE = 0xC
TRANSACTION_MASK = 0xC
BORNHOST_V6 = 0x10
STOREHOST_V6 = 0x20
COMPRESSION_TYPE_MASK = 0x700
COMPRESSION_LZ4 = 0x100
COMPRESSION_ZSTD = 0x200
COMPRESSION_ZLIB = 0x300


def transaction_type(sysflag: int) -> int:
    return sysflag & TRANSACTION_MASK


def gets_queue_entry(sysflag: int) -> bool:
    """PREPARED and ROLLBACK records are stored but never reach a consume queue."""
    kind = sysflag & TRANSACTION_MASK
    return kind in (TRANSACTION_NOT_TYPE, TRANSACTION_COMMIT_TYPE)
