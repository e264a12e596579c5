"""Transactions end to end with real processes: a name server and a broker (ledgermq
processes), our TransactionProducer and PushConsumer. The broker checks every second,
a half message is due after 1 s, and three checks are the limit (helpers.BROKER_PROPS)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from ledgermq.client import Message, TransactionProducer
from ledgermq.client.message import SendStatus
from ledgermq.protocol import properties as P
from ledgermq.protocol.message import MessageRecord
from tests.client.consumer_cluster import aio
from tests.compat.cluster import tail
from tests.ha.process_group import BrokerProc, HAGroup
from tests.transactions.helpers import (
    BROKER_PROPS,
    CLIENT,
    COMMIT,
    ROLLBACK,
    UNKNOW,
    Counting,
    pull_all,
    resolved,
    topic_total,
    until,
)

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[HAGroup, BrokerProc]]:
    group = HAGroup(tmp_path_factory.mktemp("txn"), **BROKER_PROPS)
    master = group.add("master", 0, "ASYNC_MASTER")
    try:
        group.start_namesrv()
        group.start(master)
        yield group, master
    finally:
        group.close()


@aio(60)
async def test_commit_rollback_and_unknown_resolved_by_check_back(broker: tuple[HAGroup, BrokerProc]) -> None:
    group, master = broker
    topic = "TxnOutcomes"
    on_check = {b"unknown-then-commit": COMMIT, b"unknown-then-rollback": ROLLBACK}
    checked: Counter[bytes] = Counter()

    def check(msg: MessageRecord) -> object:
        assert msg.topic == topic  # the real topic, not the half topic
        checked[bytes(msg.body)] += 1
        return on_check[bytes(msg.body)]

    producer = TransactionProducer("txn-outcomes-pg", group.namesrv_addr, check_listener=check, **CLIENT)
    counting = Counting("txn-outcomes-cg", group.namesrv_addr, topic)
    await producer.start()
    try:
        results = {}
        for body, state in [(b"commit", COMMIT), (b"rollback", ROLLBACK), (b"unknown-then-commit", UNKNOW),
                            (b"unknown-then-rollback", UNKNOW)]:  # fmt: skip
            results[body] = await producer.send_message_in_transaction(
                Message(topic, body, tags="T"), executor=lambda _m, _a, s=state: s
            )
        assert all(r.status is SendStatus.SEND_OK for r in results.values())
        assert results[b"commit"].local_state is COMMIT and results[b"rollback"].local_state is ROLLBACK
        assert results[b"commit"].transaction_id == results[b"commit"].msg_id
        await counting.consumer.start()
        await until("both unknown transactions checked", lambda: set(checked) == set(on_check), 15)
        await until("every half message resolved", lambda: resolved(master.addr), 15)
        committed = {b"commit": 1, b"unknown-then-commit": 1}
        await until(
            "the committed messages consumed", lambda: counting.seen == committed, 15, lambda: str(counting.seen)
        )
        assert await topic_total(master.addr, topic) == 2  # nothing else ever reached the topic
        assert checked == Counter({b"unknown-then-commit": 1, b"unknown-then-rollback": 1})
        assert counting.not_committed == []
    finally:
        await counting.consumer.shutdown()
        await producer.shutdown()


@aio(60)
async def test_a_producer_that_died_before_ending_is_answered_for_by_another_of_its_group(
    broker: tuple[HAGroup, BrokerProc],
) -> None:
    group, master = broker
    topic, pg = "TxnOrphan", "txn-orphan-pg"
    checked: list[bytes] = []

    def check(msg: MessageRecord) -> object:
        checked.append(bytes(msg.body))
        return COMMIT

    survivor = TransactionProducer(pg, group.namesrv_addr, check_listener=check, **CLIENT)
    counting = Counting("txn-orphan-cg", group.namesrv_addr, topic)
    await survivor.start()
    try:
        log = group.root / "dying_producer.log"
        with open(log, "wb") as out:
            child = await asyncio.to_thread(
                subprocess.run,
                [sys.executable, "-m", "tests.transactions.dying_producer", group.namesrv_addr, topic, pg, "orphan"],
                cwd=ROOT,
                stdout=out,
                stderr=subprocess.STDOUT,
                timeout=30,
            )
        assert child.returncode == -9 and "HALF-SENT" in tail(log), tail(log)
        await counting.consumer.start()
        await until("the survivor asked about the orphan", lambda: checked == [b"orphan"], 15)
        await until("the orphan committed and consumed", lambda: counting.seen[b"orphan"] == 1, 15)
        await until("every half message resolved", lambda: resolved(master.addr), 15)
        assert counting.seen == Counter({b"orphan": 1}) and checked == [b"orphan"]
        assert await topic_total(master.addr, topic) == 1
    finally:
        await counting.consumer.shutdown()
        await survivor.shutdown()


@aio(60)
async def test_a_transaction_never_resolved_is_discarded_after_check_max_checks(
    broker: tuple[HAGroup, BrokerProc],
) -> None:
    group, master = broker
    topic = "TxnForever"
    checks: list[int] = []

    def check(msg: MessageRecord) -> object:
        checks.append(int(msg.properties[P.TRANSACTION_CHECK_TIMES]))
        return UNKNOW

    producer = TransactionProducer("txn-forever-pg", group.namesrv_addr, check_listener=check, **CLIENT)
    counting = Counting("txn-forever-cg", group.namesrv_addr, topic)
    await producer.start()
    await counting.consumer.start()
    try:
        result = await producer.send_message_in_transaction(Message(topic, b"limbo"), executor=lambda _m, _a: UNKNOW)

        async def discarded() -> list[MessageRecord]:
            return [m for m in await pull_all(master.addr, "TRANS_CHECK_MAX_TIME_TOPIC") if m.msg_id == result.msg_id]

        await until("the message moved to TRANS_CHECK_MAX_TIME_TOPIC", discarded, 20)
        [moved] = await discarded()
        assert moved.body == b"limbo" and moved.properties[P.TRANSACTION_CHECK_TIMES] == "3"
        assert checks == [1, 2, 3]  # transactionCheckMax checks, then no more
        log = tail(master.server.log_path, 400)
        lines = [line for line in log.splitlines() if "discarded" in line and result.msg_id in line]
        assert len(lines) == 1 and "TRANS_CHECK_MAX_TIME_TOPIC" in lines[0], lines
        await until("every half message resolved", lambda: resolved(master.addr), 15)
        assert await topic_total(master.addr, topic) == 0 and not counting.seen
    finally:
        await counting.consumer.shutdown()
        await producer.shutdown()
