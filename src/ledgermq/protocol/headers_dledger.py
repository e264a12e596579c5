"""Headers of ledgermq's own DLedger-mode requests (no RocketMQ counterpart).

``DLEDGER_STORE_IDENTITY`` carries, both ways, which native commit log lies below a member's
Raft log (``ledgermq.broker.dledger_identity``); the request adds the group and the asker."""

from __future__ import annotations

from ledgermq.protocol.header_codec import RequestHeader, int64, request_header, text

__all__ = ["StoreIdentityHeader"]


@request_header
class StoreIdentityHeader(RequestHeader):
    """-1 (``UNKNOWN``) in ``dividedOffset``/``oldEnd``: retention deleted what it would name."""

    divided_offset: int = int64("dividedOffset")
    old_end: int = int64("oldEnd")
    old_last_crc: int = int64("oldLastCrc")
    self_id: str = text("selfId", absent="")
    group: str = text("group", absent="")  # in requests: the asker's group
