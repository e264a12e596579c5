"""A master dies between a transaction's half message and its end: the END_TRANSACTION is
lost, and the check-back resolves the transaction once a master serves the half queue again.

* master-slave: the master is SIGKILLed inside the local transaction, restarted on its
  store afterwards, and its check service asks the producer;
* DLedger: the Raft leader is SIGKILLed inside the local transaction; the group elects a
  new leader, whose check service (started with its leadership) asks the producer.

Either way the consumer sees the committed message exactly once.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from pathlib import Path

from ledgermq.client import Message, TransactionProducer
from ledgermq.client.message import SendStatus
from ledgermq.protocol.codes import RequestCode, ResponseCode
from ledgermq.protocol.message import MessageRecord
from tests.client.consumer_cluster import aio
from tests.compat.cluster import tail
from tests.ha.dledger_group import GROUP, DLedgerGroup
from tests.ha.process_group import HAGroup
from tests.transactions.helpers import BROKER_PROPS, CLIENT, COMMIT, Counting, call, resolved, topic_total, until


@aio(90)
async def test_master_killed_before_end_transaction_restarts_and_checks_back(tmp_path: Path) -> None:
    group = HAGroup(tmp_path, **BROKER_PROPS)
    master = group.add("master", 0, "ASYNC_MASTER")
    slave = group.add("slave", 1, "SLAVE")
    topic = "TxnMasterKill"
    checked: list[bytes] = []

    def check(msg: MessageRecord) -> object:
        checked.append(bytes(msg.body))
        return COMMIT  # the local transaction did commit

    def commit_while_the_master_dies(_msg: Message, _arg: object) -> object:
        group.kill(master)  # SIGKILL: the END_TRANSACTION that follows finds no master
        return COMMIT

    try:
        await asyncio.to_thread(group.start_namesrv)
        await asyncio.to_thread(group.start, master)
        await asyncio.to_thread(group.start, slave)
        producer = TransactionProducer("txn-mkill-pg", group.namesrv_addr, check_listener=check, **CLIENT)
        counting = Counting("txn-mkill-cg", group.namesrv_addr, topic)
        await producer.start()
        try:
            result = await producer.send_message_in_transaction(
                Message(topic, b"survives"), executor=commit_while_the_master_dies
            )
            assert result.status is SendStatus.SEND_OK and result.local_state is COMMIT
            assert checked == [] and not master.server.alive
            await asyncio.to_thread(group.start, master)  # on its store, same port
            await counting.consumer.start()
            await until("the restarted master's check", lambda: checked, 20, group.explain)
            await until("the message consumed", lambda: counting.seen, 20, group.explain)
            await until("every half message resolved", lambda: resolved(master.addr), 15, group.explain)
            assert await topic_total(master.addr, topic) == 1  # committed once, so consumable once
            assert counting.seen == Counter({b"survives": 1}) and counting.not_committed == []
            assert checked.count(b"survives") >= 1
        finally:
            await counting.consumer.shutdown()
            await producer.shutdown()
    finally:
        group.close()


async def has_topic(addr: str, topic: str) -> bool:
    resp = await call(addr, RequestCode.GET_ALL_TOPIC_CONFIG, {})
    return resp.code == ResponseCode.SUCCESS and topic in json.loads(resp.body).get("topicConfigTable", {})


@aio(120)
async def test_dledger_leader_killed_before_end_transaction_the_new_leader_checks_back(tmp_path: Path) -> None:
    group = DLedgerGroup(tmp_path, extra=dict(BROKER_PROPS))
    topic = "TxnLeaderKill"
    checked: list[str] = []
    killed: list[str] = []

    def check(msg: MessageRecord) -> object:
        checked.append(msg.msg_id)
        return COMMIT

    def commit_while_the_leader_dies(_msg: Message, _arg: object) -> object:
        leader = group.master()
        assert leader is not None
        group.brokers[leader].kill()
        killed.append(leader)
        return COMMIT

    try:
        await asyncio.to_thread(group.start)
        producer = TransactionProducer("txn-lkill-pg", group.namesrv_addr, check_listener=check, **CLIENT)
        counting = Counting("txn-lkill-cg", group.namesrv_addr, topic)
        await producer.start()
        try:
            # The topic first reaches every member (followers copy topic configs every
            # slaveSyncInterval): a new leader that lacks a topic's config refuses pulls of it,
            # transactions or not.
            assert (await producer.send(Message(topic, b"warm-up"))).status is SendStatus.SEND_OK
            for n in group.ids:
                await until(f"{n} to know {topic}", lambda n=n: has_topic(group.addr(n), topic), 15, group.explain)
            result = await producer.send_message_in_transaction(
                Message(topic, b"raft"), executor=commit_while_the_leader_dies
            )
            assert result.status is SendStatus.SEND_OK and result.local_state is COMMIT
            assert result.queue.broker_name == GROUP and checked == []

            async def new_master() -> bool:  # the name server lists another member as master
                return await asyncio.to_thread(group.master) not in (None, killed[0])

            await until("a new leader", new_master, 20, group.explain)
            new_leader = await asyncio.to_thread(group.master)
            assert new_leader is not None
            await counting.consumer.start()
            await until("the new leader's check", lambda: checked, 30, group.explain)
            assert set(checked) == {result.msg_id}
            await until("the message consumed", lambda: counting.seen[b"raft"], 20, group.explain)
            addr = group.addr(new_leader)
            await until("every half message resolved", lambda: resolved(addr), 15, group.explain)
            assert await topic_total(addr, topic) == 2
            # the check service started on each leader and only on leaders (at most once per
            # leadership; quick flips may coalesce), and a follower refuses END_TRANSACTION
            [follower] = [n for n in group.ids if n not in (killed[0], new_leader)]
            for n in group.ids:
                log = tail(group.brokers[n].log_path, 5000)
                led = log.count(f"DLedger {n}: LEADER in term")
                started = log.count("transaction check service started")
                assert (1 if led else 0) <= started <= led, (n, led, started)
            end = {"producerGroup": "txn-lkill-pg", "tranStateTableOffset": 0, "commitLogOffset": 0,
                   "commitOrRollback": 8, "fromTransactionCheck": "false", "msgId": result.msg_id}  # fmt: skip
            answer = await call(group.addr(follower), RequestCode.END_TRANSACTION, end)
            assert answer.code == ResponseCode.SLAVE_NOT_AVAILABLE
            assert counting.seen == Counter({b"raft": 1, b"warm-up": 1})
            assert [m.body for m in counting.not_committed] == [b"warm-up"]  # the one plain message
        finally:
            await counting.consumer.shutdown()
            await producer.shutdown()
    finally:
        group.close()
