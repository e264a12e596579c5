"""Helpers for the DLedger-mode message store tests: a stand-in for the Raft driver.

``Driver`` plays a single node's Raft driver against ``DLedgerMessageStore``:
encode, ``prepare_append`` (leader), ``append_entries``, ``commit_to_index``; ``follow`` writes
another node's entry bytes as a follower would.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ledgermq.protocol import message as M
from ledgermq.protocol import properties as P
from ledgermq.store.commitlog import EncodedMessage, queue_key
from ledgermq.store.message_store import MessageStore, open_message_store
from tests.conftest import small_config

HOST: M.Host = ("127.0.0.1", 10911)
TOPIC = "DLT"


def dledger_config(root: Path, **overrides: Any) -> Any:
    settings: dict[str, Any] = {"enable_dleger_commit_log": True, "dleger_self_id": "n0", "dleger_group": "g0"}
    return small_config(root, **{**settings, **overrides})


def open_store(root: Path, **overrides: Any) -> MessageStore:
    store = open_message_store(dledger_config(root, **overrides), store_host=HOST)
    store.start()
    return store


def encode(
    body: bytes, *, topic: str = TOPIC, queue_id: int = 0, props: dict[str, str] | None = None
) -> EncodedMessage:
    data = M.encode_record(
        topic=topic,
        body=body,
        queue_id=queue_id,
        properties=P.encode_properties(props or {}),
        born_timestamp=1,
        born_host=("127.0.0.1", 5555),
        store_host=HOST,
    )
    return EncodedMessage(data, queue_key(topic, queue_id), True, HOST)


class Driver:
    def __init__(self, store: MessageStore, term: int = 1) -> None:
        self.store = store
        self.term = term

    @property
    def last_index(self) -> int:
        assert self.store.commitlog is not None
        return self.store.commitlog.ledger.last_index

    def propose(self, bodies: list[bytes], *, queue_id: int = 0, topic: str = TOPIC, **kw: Any) -> list[int]:
        """Leader: prepare and write (uncommitted); returns the new entries' indices."""
        msgs = [encode(b, topic=topic, queue_id=queue_id, **kw) for b in bodies]
        entry_bodies = self.store.prepare_append(msgs, topic, queue_id)
        first = self.last_index + 1
        indices = list(range(first, first + len(entry_bodies)))
        self.store.append_entries([(i, self.term, b) for i, b in zip(indices, entry_bodies, strict=True)])
        return indices

    def noop(self) -> int:
        index = self.last_index + 1
        self.store.append_entries([(index, self.term, b"")])
        return index

    def commit(self, index: int | None = None) -> None:
        self.store.commit_to_index(self.last_index if index is None else index)
        assert self.store.wait_dispatched(timeout=5)

    def checkpoint(self) -> None:
        """What the driver does to make the committed index survive a crash."""
        assert self.store.commitlog is not None
        ledger = self.store.commitlog.ledger
        ledger.flush()
        ledger.save_committed_index(self.store.commitlog.committed_index)


def bodies_in_queue(store: MessageStore, queue_id: int = 0, topic: str = TOPIC) -> list[bytes]:
    out: list[bytes] = []
    offset = 0
    while True:
        got = store.get_message(topic, queue_id, offset, 32)
        if not got.message_count:
            return out
        for raw in got.messages:
            rec = M.decode_record(raw)
            assert rec.queue_offset == offset, (rec.queue_offset, offset)
            out.append(rec.body)
            offset += 1
