"""What the broker hands the store to append (RocketMQ ``MessageExtBrokerInner``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ledgermq.protocol.message import Host

if TYPE_CHECKING:
    from ledgermq.store.commitlog import EncodedMessage


@dataclass(slots=True)
class MessageInput:
    topic: str
    body: bytes
    queue_id: int = 0
    flag: int = 0
    properties: dict[str, str] = field(default_factory=dict)
    sysflag: int = 0
    born_timestamp: int = 0
    born_host: Host = ("127.0.0.1", 0)
    store_host: Host | None = None  # None: the store's own address
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0
    wait_store_ok: bool = True  # the broker strips WAIT from what it stores but still honours it
    # Set when the record was built straight from the request's properties text (store/
    # encoding.py, ``encode_single_text``): the stored record, final but for its offsets;
    # ``properties`` is then left empty (the text holds nothing the store must check).
    encoded: EncodedMessage | None = None


@dataclass(slots=True)
class BatchInput:
    """A send-batch request: entries share topic, queue, sysflag, hosts and born time."""

    topic: str
    entries: list[tuple[int, bytes, dict[str, str]]]  # (flag, body, properties)
    queue_id: int = 0
    sysflag: int = 0
    born_timestamp: int = 0
    born_host: Host = ("127.0.0.1", 0)
    store_host: Host | None = None
    # Set instead of ``entries`` when the body was encoded at once (store/encoding.py,
    # ``encode_batch_body``): the stored records, ready for the commit log.
    encoded: EncodedBatch | None = None


@dataclass(frozen=True, slots=True)
class EncodedBatch:
    """A batch's records built straight from its request body, with what the store's
    checks need from the entries: their bodies' total size and whether the sender waits."""

    records: list[EncodedMessage]
    wait: bool
    body_bytes: int
