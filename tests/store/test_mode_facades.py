"""What the two stores share through their common base (store/facade.py) and core: a
native put and a DLedger proposal are refused for the same reasons with the same answers,
each mode's dispatch and retention services come back typed as the mode's own, and a
retention guard cannot be added before the store has started."""

from __future__ import annotations

from pathlib import Path

import pytest

from ledgermq.errors import StoreError
from ledgermq.store.dledger.mode_store import DLedgerMessageStore
from ledgermq.store.dledger.reput import DLedgerReputService
from ledgermq.store.dledger.retention import DLedgerCleanService
from ledgermq.store.message_input import BatchInput, MessageInput
from ledgermq.store.message_store import open_message_store
from ledgermq.store.native_store import NativeMessageStore
from ledgermq.store.reput import ReputService
from ledgermq.store.retention import CleanService
from tests.conftest import small_config
from tests.store.dledger.mode_helpers import dledger_config

REFUSED = [
    MessageInput(topic="T" * 128, body=b"x"),
    MessageInput(topic="Fine", body=b"x" * 3000),
    MessageInput(topic="Fine", body=b"x", queue_id=-1),
    MessageInput(topic="Fine", body=b"x", properties={"k": "a\x00b"}),
    BatchInput(topic="Fine", queue_id=0, entries=[(0, b"x" * 1500, {}), (0, b"y" * 600, {})]),
    BatchInput(topic="Fine", queue_id=0, entries=[(0, b"x", {}), (0, b"y", {"k\x00": "v"})]),
]


@pytest.fixture
def stores(tmp_path: Path) -> tuple[NativeMessageStore, DLedgerMessageStore]:
    native = open_message_store(small_config(tmp_path / "native", max_message_size=2048))
    dledger = open_message_store(dledger_config(tmp_path / "dledger", max_message_size=2048))
    assert isinstance(native, NativeMessageStore) and isinstance(dledger, DLedgerMessageStore)
    return native, dledger


def test_a_put_and_a_proposal_are_refused_alike(stores: tuple[NativeMessageStore, DLedgerMessageStore]) -> None:
    native, dledger = stores
    with native, dledger:
        for msg in REFUSED:
            put = native.put_message(msg) if isinstance(msg, MessageInput) else native.put_messages(msg)
            proposal = dledger.check_for_proposal(msg)
            assert proposal is not None and (put.status, put.remark) == (proposal.status, proposal.remark), msg
        assert native.max_phy_offset == 0
        assert dledger.check_for_proposal(MessageInput(topic="Fine", body=b"x")) is None


def test_services_are_typed_by_mode_and_guards_wait_for_the_start(
    stores: tuple[NativeMessageStore, DLedgerMessageStore],
) -> None:
    native, dledger = stores
    assert native.reput is None and dledger.cleaner is None
    with pytest.raises(StoreError, match="start the store"):
        native.add_retention_guard(lambda: None)
    with pytest.raises(StoreError, match="start the store"):
        dledger.add_ledger_guard(lambda: None)
    with native, dledger:
        assert type(native.reput) is ReputService and type(native.cleaner) is CleanService
        assert type(dledger.reput) is DLedgerReputService and type(dledger.cleaner) is DLedgerCleanService
        native.add_retention_guard(lambda: None)
        dledger.add_ledger_guard(lambda: None)
        assert len(dledger.ledger_guards()) == 1
