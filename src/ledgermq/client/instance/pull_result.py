"""One pull's answer as the client hands it on: its status and offsets, its messages (or
raw body), and which broker answered. Pure, so the pull loops' decisions can name it."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from ledgermq.protocol.message import MessageRecord
from ledgermq.protocol.route import MASTER_ID

__all__ = ["PullResult", "PullStatus"]


class PullStatus(enum.Enum):
    FOUND = "FOUND"
    NO_NEW_MSG = "NO_NEW_MSG"
    NO_MATCHED_MSG = "NO_MATCHED_MSG"
    OFFSET_ILLEGAL = "OFFSET_ILLEGAL"


@dataclass(slots=True)
class PullResult:
    """One pull's answer. ``raw`` is the response body (stored records back to back) for
    readers that decode it themselves; ``messages`` is empty when ``decode=False``."""

    status: PullStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    messages: list[MessageRecord] = field(default_factory=list)
    raw: bytes = b""
    suggest_which_broker_id: int = MASTER_ID
    from_slave: bool = False
    broker_addr: str = ""
