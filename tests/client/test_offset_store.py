"""Consumer offset stores (RocketMQ 4.9.7 RemoteBrokerOffsetStore / LocalFileOffsetStore semantics)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest

from ledgermq.client.consumer.offset_store import (
    LOCAL_OFFSET_STORE_DIR_ENV,
    NO_OFFSET,
    OFFSET_UNREADABLE,
    LocalFileOffsetStore,
    OffsetStore,
    ReadOffsetType,
    RemoteOffsetStore,
    decode_offset_file,
    default_local_offset_store_dir,
    encode_offset_file,
)
from ledgermq.client.errors import MQBrokerError, MQClientError, MQConnectError
from ledgermq.client.message import MessageQueue
from ledgermq.errors import RemoteProtocolError
from ledgermq.failpoints import armed
from ledgermq.protocol.admin_body import loads_lenient

GROUP = "cg"
A0 = MessageQueue("T", "broker-a", 0)
A1 = MessageQueue("T", "broker-a", 1)
B0 = MessageQueue("T", "broker-b", 0)
U0 = MessageQueue("U", "broker-a", 0)

MEMORY = ReadOffsetType.READ_FROM_MEMORY
STORE = ReadOffsetType.READ_FROM_STORE
FIRST = ReadOffsetType.MEMORY_FIRST_THEN_STORE


def run(coro: Coroutine[Any, Any, Any]) -> Any:
    return asyncio.run(asyncio.wait_for(coro, 10))


class FakeBroker:
    """Committed offsets per (queue, group); ``fail`` makes the next calls raise."""

    def __init__(self) -> None:
        self.committed: dict[tuple[MessageQueue, str], int] = {}
        self.updates: list[tuple[MessageQueue, int, bool]] = []
        self.queries: list[MessageQueue] = []
        self.fail: Callable[[MessageQueue], BaseException | None] = lambda mq: None

    async def query_consumer_offset(self, mq: MessageQueue, group: str) -> int | None:
        self.queries.append(mq)
        await asyncio.sleep(0)
        error = self.fail(mq)
        if error is not None:
            raise error
        return self.committed.get((mq, group))

    async def update_consumer_offset(self, mq: MessageQueue, group: str, offset: int, *, oneway: bool) -> None:
        await asyncio.sleep(0)
        error = self.fail(mq)
        if error is not None:
            raise error
        self.updates.append((mq, offset, oneway))
        self.committed[(mq, group)] = offset


@pytest.fixture
def broker() -> FakeBroker:
    return FakeBroker()


@pytest.fixture
def remote(broker: FakeBroker) -> RemoteOffsetStore:
    return RemoteOffsetStore(broker, GROUP, client_id="10.0.0.1@1")


def test_both_stores_satisfy_the_protocol(remote: RemoteOffsetStore, tmp_path: Path) -> None:
    stores: list[OffsetStore] = [remote, LocalFileOffsetStore("c", GROUP, store_dir=tmp_path)]
    assert len(stores) == 2


# -- memory rules (shared) ----------------------------------------------------------------


@pytest.mark.parametrize("kind", ["remote", "local"])
def test_update_offset_increase_only(kind: str, remote: RemoteOffsetStore, tmp_path: Path) -> None:
    store: OffsetStore = remote if kind == "remote" else LocalFileOffsetStore("c", GROUP, store_dir=tmp_path)
    store.update_offset(A0, 10, True)  # first value is taken whatever increase_only says
    store.update_offset(A0, 7, True)
    assert run(store.read_offset(A0, MEMORY)) == 10
    store.update_offset(A0, 12, True)
    assert run(store.read_offset(A0, MEMORY)) == 12
    store.update_offset(A0, 3, False)  # a reset may move it back
    assert run(store.read_offset(A0, MEMORY)) == 3
    store.update_offset(A1, -5, True)
    assert run(store.read_offset(A1, MEMORY)) == -5


@pytest.mark.parametrize("kind", ["remote", "local"])
def test_clone_offset_table(kind: str, remote: RemoteOffsetStore, tmp_path: Path) -> None:
    store: OffsetStore = remote if kind == "remote" else LocalFileOffsetStore("c", GROUP, store_dir=tmp_path)
    store.update_offset(A0, 1, False)
    store.update_offset(U0, 2, False)
    assert store.clone_offset_table("T") == {A0: 1}
    assert store.clone_offset_table(None) == store.clone_offset_table("  ") == {A0: 1, U0: 2}
    copy = store.clone_offset_table()
    copy[A0] = 99
    assert run(store.read_offset(A0, MEMORY)) == 1


# -- remote store ---------------------------------------------------------------------------


def test_remote_read_from_memory_never_asks_the_broker(remote: RemoteOffsetStore, broker: FakeBroker) -> None:
    broker.committed[(A0, GROUP)] = 5
    assert run(remote.read_offset(A0, MEMORY)) == NO_OFFSET
    remote.update_offset(A0, 8, False)
    assert run(remote.read_offset(A0, MEMORY)) == 8
    assert broker.queries == []


def test_remote_read_from_store_asks_and_remembers(remote: RemoteOffsetStore, broker: FakeBroker) -> None:
    broker.committed[(A0, GROUP)] = 5
    remote.update_offset(A0, 8, False)
    assert run(remote.read_offset(A0, STORE)) == 5  # the broker's value replaces memory's (Java)
    assert run(remote.read_offset(A0, MEMORY)) == 5
    assert broker.queries == [A0]


def test_remote_memory_first_then_store(remote: RemoteOffsetStore, broker: FakeBroker) -> None:
    broker.committed[(A0, GROUP)] = 5
    remote.update_offset(A1, 3, False)
    assert run(remote.read_offset(A1, FIRST)) == 3
    assert broker.queries == []
    assert run(remote.read_offset(A0, FIRST)) == 5
    assert broker.queries == [A0]


def test_remote_not_found_is_minus_one_and_memory_is_untouched(remote: RemoteOffsetStore, broker: FakeBroker) -> None:
    assert run(remote.read_offset(A0, STORE)) == NO_OFFSET == -1
    assert remote.clone_offset_table() == {}
    remote.update_offset(A0, 4, False)
    assert run(remote.read_offset(A0, STORE)) == -1
    assert run(remote.read_offset(A0, MEMORY)) == 4


def test_remote_broker_error_code_reads_as_unreadable(remote: RemoteOffsetStore, broker: FakeBroker) -> None:
    # 4.9.7 reads every MQBrokerException as "no offset" (and a LAST_OFFSET consumer then skips the backlog);
    # we answer -2 like 5.x, so the queue is taken on at a later rebalance instead.
    for code in (22, 1):
        broker.fail = lambda mq, code=code: MQBrokerError(code, "no", "127.0.0.1:10911")
        assert run(remote.read_offset(A0, STORE)) == -2


@pytest.mark.parametrize(
    "error",
    [MQConnectError("connect refused", "127.0.0.1:10911"), MQClientError("The broker[broker-a] not exist"), OSError()],
    ids=["connect", "no-route", "other"],
)
def test_remote_failure_to_ask_is_minus_two(
    remote: RemoteOffsetStore, broker: FakeBroker, error: Exception, caplog: pytest.LogCaptureFixture
) -> None:
    broker.fail = lambda mq: error
    remote.update_offset(A0, 4, False)
    with caplog.at_level(logging.DEBUG, logger="ledgermq.client.consumer.offset_store"):  # a warning only if it lasts
        assert run(remote.read_offset(A0, STORE)) == OFFSET_UNREADABLE == -2
    assert "could not fetch" in caplog.text
    assert run(remote.read_offset(A0, MEMORY)) == 4


def test_remote_cancellation_is_not_swallowed(remote: RemoteOffsetStore, broker: FakeBroker) -> None:
    broker.fail = lambda mq: asyncio.CancelledError()
    with pytest.raises(asyncio.CancelledError):
        run(remote.read_offset(A0, STORE))


def test_remote_persist_all_commits_oneway_and_drops_queues_not_in_the_set(
    remote: RemoteOffsetStore, broker: FakeBroker
) -> None:
    remote.update_offset(A0, 10, False)
    remote.update_offset(A1, 11, False)
    remote.update_offset(B0, 12, False)
    run(remote.persist_all({A0, B0}))
    assert sorted(broker.updates) == [(A0, 10, True), (B0, 12, True)]
    assert remote.clone_offset_table() == {A0: 10, B0: 12}  # A1 was rebalanced away
    assert (A1, GROUP) not in broker.committed


def test_remote_persist_all_with_no_queues_does_nothing(remote: RemoteOffsetStore, broker: FakeBroker) -> None:
    remote.update_offset(A0, 10, False)
    run(remote.persist_all(set()))
    assert broker.updates == []
    assert remote.clone_offset_table() == {A0: 10}


def test_remote_broker_errors_do_not_lose_memory_offsets(
    remote: RemoteOffsetStore, broker: FakeBroker, caplog: pytest.LogCaptureFixture
) -> None:
    remote.update_offset(A0, 10, False)
    remote.update_offset(B0, 20, False)
    broker.fail = lambda mq: MQConnectError("down", "b") if mq.broker_name == "broker-b" else None
    with caplog.at_level(logging.DEBUG, logger="ledgermq.client.consumer.offset_store"):  # a warning only if it lasts
        run(remote.persist_all({A0, B0}))  # does not raise
    assert broker.updates == [(A0, 10, True)]  # the other broker's commit still went out
    assert "could not commit offset 20" in caplog.text
    assert remote.clone_offset_table() == {A0: 10, B0: 20}
    remote.update_offset(B0, 21, True)
    broker.fail = lambda mq: None
    run(remote.persist_all({A0, B0}))
    assert broker.committed[(B0, GROUP)] == 21


def test_remote_persist_all_sends_the_newest_offset(remote: RemoteOffsetStore, broker: FakeBroker) -> None:
    remote.update_offset(A0, 1, False)
    remote.update_offset(A1, 1, False)

    async def main() -> None:
        persisting = asyncio.ensure_future(remote.persist_all({A0, A1}))
        await asyncio.sleep(0)  # the first commit is in flight
        remote.update_offset(A1, 5, True)
        remote.remove_offset(A0)
        await persisting

    run(main())
    assert (A1, 5, True) in broker.updates


def test_remote_persist_one_queue(remote: RemoteOffsetStore, broker: FakeBroker) -> None:
    run(remote.persist(A0))  # nothing in memory: nothing sent
    assert broker.updates == []
    remote.update_offset(A0, 7, False)
    run(remote.persist(A0))
    assert broker.updates == [(A0, 7, True)]
    broker.fail = lambda mq: MQBrokerError(1, "boom")
    run(remote.persist(A0))  # logged, not raised
    assert run(remote.read_offset(A0, MEMORY)) == 7


def test_remote_remove_offset(remote: RemoteOffsetStore) -> None:
    remote.update_offset(A0, 7, False)
    remote.remove_offset(A0)
    remote.remove_offset(A1)
    assert remote.clone_offset_table() == {}


def test_remote_update_consume_offset_to_broker_raises_and_honours_oneway(
    remote: RemoteOffsetStore, broker: FakeBroker
) -> None:
    run(remote.update_consume_offset_to_broker(A0, 3, False))
    run(remote.update_consume_offset_to_broker(A1, 4, True))
    assert broker.updates == [(A0, 3, False), (A1, 4, True)]
    assert remote.clone_offset_table() == {}  # it does not touch memory
    broker.fail = lambda mq: MQBrokerError(1, "boom")
    with pytest.raises(MQBrokerError):
        run(remote.update_consume_offset_to_broker(A0, 3, False))


def test_remote_load_is_a_no_op(remote: RemoteOffsetStore, broker: FakeBroker) -> None:
    run(remote.load())
    assert broker.queries == [] and remote.clone_offset_table() == {}


# -- the offsets file -------------------------------------------------------------------------


def test_offset_file_is_written_in_fastjsons_shape() -> None:
    raw = encode_offset_file({B0: 12, A0: 3})
    assert raw == (
        b'{"offsetTable":{{"brokerName":"broker-a","queueId":0,"topic":"T"}:3,'
        b'{"brokerName":"broker-b","queueId":0,"topic":"T"}:12}}'
    )
    assert decode_offset_file(raw) == {A0: 3, B0: 12}
    assert decode_offset_file(encode_offset_file({})) == {}


def test_offset_file_reads_what_java_writes() -> None:
    # OffsetSerializeWrapper.toJson(true): fastjson pretty format, tabs, object keys.
    java = (
        '{\n\t"offsetTable":{{\n\t\t\t"brokerName":"broker-a",\n\t\t\t"queueId":0,\n\t\t\t"topic":"T"\n\t\t}:3,'
        '{\n\t\t\t"brokerName":"broker-b",\n\t\t\t"queueId":0,\n\t\t\t"topic":"T"\n\t\t}:12\n\t}\n}'
    )
    assert decode_offset_file(java.encode()) == {A0: 3, B0: 12}
    quoted = '{"offsetTable":{"{\\"topic\\":\\"T\\",\\"brokerName\\":\\"broker-a\\",\\"queueId\\":0}":"42"}}'
    assert decode_offset_file(quoted.encode()) == {A0: 42}
    assert decode_offset_file(b'{"offsetTable":null}') == {}
    assert decode_offset_file(b"{}") == {}


@pytest.mark.parametrize(
    "raw",
    [b"[]", b'{"offsetTable":[]}', b'{"offsetTable":{0:1}}', b'{"offsetTable":{{"topic":"T","queueId":0}:true}}', b"{"],
)
def test_offset_file_rejects_other_documents(raw: bytes) -> None:
    with pytest.raises(RemoteProtocolError):
        decode_offset_file(raw)


# -- local store ------------------------------------------------------------------------------


def local(tmp_path: Path, client_id: str = "10.0.0.1@1") -> LocalFileOffsetStore:
    return LocalFileOffsetStore(client_id, GROUP, store_dir=tmp_path)


def test_local_path_layout_and_default_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert local(tmp_path).path == tmp_path / "10.0.0.1@1" / GROUP / "offsets.json"
    monkeypatch.setenv(LOCAL_OFFSET_STORE_DIR_ENV, str(tmp_path / "env"))
    assert default_local_offset_store_dir() == tmp_path / "env"
    assert LocalFileOffsetStore("c", GROUP).path == tmp_path / "env" / "c" / GROUP / "offsets.json"
    monkeypatch.delenv(LOCAL_OFFSET_STORE_DIR_ENV)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_local_offset_store_dir() == tmp_path / "home" / ".rocketmq_offsets"


def test_local_round_trip(tmp_path: Path) -> None:
    store = local(tmp_path)
    store.update_offset(A0, 3, False)
    store.update_offset(B0, 12, False)
    run(store.persist_all({A0, B0}))
    doc = loads_lenient(store.path.read_bytes())
    assert set(doc) == {"offsetTable"} and len(doc["offsetTable"]) == 2

    again = local(tmp_path)
    run(again.load())
    assert again.clone_offset_table() == {A0: 3, B0: 12}
    assert run(local(tmp_path).read_offset(B0, STORE)) == 12
    assert run(local(tmp_path).read_offset(B0, FIRST)) == 12
    assert run(local(tmp_path).read_offset(B0, MEMORY)) == NO_OFFSET
    assert run(local(tmp_path, "other-client").read_offset(B0, FIRST)) == NO_OFFSET


def test_local_load_without_a_file_is_empty(tmp_path: Path) -> None:
    store = local(tmp_path)
    run(store.load())
    assert store.clone_offset_table() == {}
    assert run(store.read_offset(A0, STORE)) == NO_OFFSET
    assert not store.path.parent.exists()


def test_local_read_from_store_replaces_memory(tmp_path: Path) -> None:
    store = local(tmp_path)
    store.update_offset(A0, 3, False)
    run(store.persist_all({A0}))
    store.update_offset(A0, 9, False)
    assert run(store.read_offset(A0, FIRST)) == 9
    assert run(store.read_offset(A0, STORE)) == 3
    assert run(store.read_offset(A0, MEMORY)) == 3
    assert run(store.read_offset(A1, STORE)) == NO_OFFSET


def test_local_persist_all_writes_only_the_given_queues(tmp_path: Path) -> None:
    store = local(tmp_path)
    store.update_offset(A0, 3, False)
    store.update_offset(A1, 4, False)
    run(store.persist_all({A0, B0}))
    assert decode_offset_file(store.path.read_bytes()) == {A0: 3}
    assert store.clone_offset_table() == {A0: 3, A1: 4}  # memory keeps the others (Java)
    run(store.persist_all(set()))  # nothing to write
    assert decode_offset_file(store.path.read_bytes()) == {A0: 3}


def test_local_previous_content_goes_to_bak(tmp_path: Path) -> None:
    store = local(tmp_path)
    store.update_offset(A0, 1, False)
    run(store.persist_all({A0}))
    assert not store.bak_path.exists()
    run(store.persist_all({A0}))  # unchanged: no rewrite, no .bak
    assert not store.bak_path.exists()
    store.update_offset(A0, 2, False)
    run(store.persist_all({A0}))
    assert decode_offset_file(store.bak_path.read_bytes()) == {A0: 1}
    assert decode_offset_file(store.path.read_bytes()) == {A0: 2}
    assert not list(store.path.parent.glob("*.tmp"))


@pytest.mark.parametrize("damage", ["missing", "empty", "garbage", "torn"])
def test_local_falls_back_to_the_bak_file(tmp_path: Path, damage: str) -> None:
    store = local(tmp_path)
    store.update_offset(A0, 1, False)
    run(store.persist_all({A0}))
    store.update_offset(A0, 2, False)
    run(store.persist_all({A0}))
    if damage == "missing":
        store.path.unlink()
    elif damage == "empty":
        store.path.write_bytes(b"")
    elif damage == "garbage":
        store.path.write_bytes(b"\x00\xff not json")
    else:
        store.path.write_bytes(store.path.read_bytes()[:30])

    again = local(tmp_path)
    run(again.load())
    assert again.clone_offset_table() == {A0: 1}
    assert run(local(tmp_path).read_offset(A0, STORE)) == 1


def test_local_unreadable_file_and_bak(tmp_path: Path) -> None:
    store = local(tmp_path)
    store.path.parent.mkdir(parents=True)
    store.path.write_bytes(b"{broken")
    again = local(tmp_path)
    run(again.load())  # no .bak at all: nothing to load, as Java
    assert again.clone_offset_table() == {}

    store.bak_path.write_bytes(b"{also broken")
    with pytest.raises(MQClientError, match="unreadable"):
        run(local(tmp_path).load())
    assert run(local(tmp_path).read_offset(A0, STORE)) == NO_OFFSET


def test_local_a_bad_main_file_never_replaces_a_good_bak(tmp_path: Path) -> None:
    store = local(tmp_path)
    store.update_offset(A0, 1, False)
    run(store.persist_all({A0}))
    store.update_offset(A0, 2, False)
    run(store.persist_all({A0}))  # .bak = {A0: 1}
    store.path.write_bytes(b"garbage")
    store.update_offset(A0, 3, False)
    run(store.persist_all({A0}))
    assert decode_offset_file(store.bak_path.read_bytes()) == {A0: 1}
    assert decode_offset_file(store.path.read_bytes()) == {A0: 3}


def test_local_write_is_atomic_and_a_failure_keeps_memory(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    store = local(tmp_path)
    store.update_offset(A0, 1, False)
    run(store.persist_all({A0}))
    before = store.path.read_bytes()

    hits = 0

    def crash_on_main_file() -> None:  # 1st hit: the .bak copy; 2nd: the main file
        nonlocal hits
        hits += 1
        if hits == 2:
            raise OSError("disk full")

    store.update_offset(A0, 2, False)
    with (
        armed("atomic_file.before_rename", crash_on_main_file),
        caplog.at_level(logging.ERROR, logger="ledgermq.client.consumer.offset_store"),
    ):
        run(store.persist_all({A0}))  # logged, not raised
    assert hits == 2
    assert "could not write consumer offsets" in caplog.text
    assert store.path.read_bytes() == before  # the old table, whole
    assert run(store.read_offset(A0, MEMORY)) == 2
    run(store.persist_all({A0}))  # the next round writes it
    assert decode_offset_file(store.path.read_bytes()) == {A0: 2}


def test_local_concurrent_persists_leave_a_valid_newest_file(tmp_path: Path) -> None:
    store = local(tmp_path)

    async def main() -> None:
        rounds = []
        for i in range(20):
            store.update_offset(A0, i, True)
            rounds.append(store.persist_all({A0}))
        await asyncio.gather(*rounds)

    run(main())
    assert decode_offset_file(store.path.read_bytes()) == {A0: 19}


def test_local_persist_and_broker_commit_are_no_ops_remove_forgets(tmp_path: Path) -> None:
    store = local(tmp_path)
    store.update_offset(A0, 5, False)
    run(store.persist(A0))
    run(store.update_consume_offset_to_broker(A0, 5, False))
    assert not store.path.exists()
    store.remove_offset(A0)
    store.remove_offset(A1)
    assert store.clone_offset_table() == {}
