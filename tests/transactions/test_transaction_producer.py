"""The transaction producer's own rules, against an in-process name server and broker:
executors and check listeners plain or async, what counts as UNKNOW, and the blocking
facade. Check rounds are run by hand (the broker's interval is RocketMQ's 60 s)."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time
from pathlib import Path

import pytest

from ledgermq.broker.app import BrokerApp
from ledgermq.client import LocalTransactionState, Message, MQClientError, TransactionProducer
from ledgermq.client.sync import SyncTransactionProducer
from ledgermq.protocol.message import MessageRecord
from tests.client.cluster import Cluster, running

COMMIT = LocalTransactionState.COMMIT_MESSAGE
UNKNOW = LocalTransactionState.UNKNOW
TOPIC = "TxnClient"


async def check_round_now(broker: BrokerApp) -> None:
    """Every half message due at once, then one round."""
    broker.broker.config = dataclasses.replace(broker.broker.config, transaction_timeout_ms=0)
    await asyncio.sleep(0.005)  # the round starts after the newest half message's store time
    await broker.txn_check.check_round()


async def wait_bodies(cluster: Cluster, expected: list[bytes], timeout: float = 5.0) -> None:
    """Until the topic's queues hold exactly ``expected`` (END_TRANSACTION is oneway)."""
    deadline = time.monotonic() + timeout
    while True:
        found: list[bytes] = []
        for q in range(4):
            found += [r.body for r in await cluster.pull("broker-a", TOPIC, q)]
        if sorted(found) == sorted(expected):
            return
        assert time.monotonic() < deadline, f"the topic holds {sorted(found)}, not {sorted(expected)}"
        await asyncio.sleep(0.05)


def test_async_callables_failing_executors_and_the_check_answer(tmp_path: Path) -> None:
    async def main() -> None:
        async with running(tmp_path) as cluster:
            seen_threads: list[str] = []

            async def check(msg: MessageRecord) -> LocalTransactionState:
                await asyncio.sleep(0)
                return COMMIT if msg.body == b"raised" else LocalTransactionState.ROLLBACK_MESSAGE

            executed: list[Message] = []

            async def commit(m: Message, arg: object) -> LocalTransactionState:
                assert arg == "my-arg"
                executed.append(m)
                return COMMIT

            def raises(_m: Message, _a: object) -> LocalTransactionState:
                seen_threads.append(threading.current_thread().name)
                raise RuntimeError("local database down")

            p = TransactionProducer("txn-client-pg", cluster.ns_addr, check_listener=check)
            await p.start()
            try:
                with pytest.raises(MQClientError, match="no local-transaction executor"):
                    await p.send_message_in_transaction(Message(TOPIC, b"x"))
                ok = await p.send_message_in_transaction(
                    Message(TOPIC, b"async-commit", delay_level=3), "my-arg", executor=commit
                )
                assert ok.local_state is COMMIT
                [seen] = executed
                assert seen.properties["UNIQ_KEY"] == ok.msg_id == ok.transaction_id  # the transaction id
                assert seen.properties["TRAN_MSG"] == "true" and seen.properties["PGROUP"] == "txn-client-pg"
                failed = await p.send_message_in_transaction(Message(TOPIC, b"raised"), executor=raises)
                assert failed.local_state is UNKNOW
                assert seen_threads and seen_threads[0] != threading.current_thread().name  # plain: a worker thread
                odd = await p.send_message_in_transaction(Message(TOPIC, b"odd"), executor=lambda _m, _a: "yes")
                assert odd.local_state is UNKNOW  # not a LocalTransactionState
                none = await p.send_message_in_transaction(Message(TOPIC, b"none"), executor=lambda _m, _a: None)
                assert none.local_state is UNKNOW
                await wait_bodies(cluster, [b"async-commit"])  # the delay level was dropped, too
                await check_round_now(cluster.brokers["broker-a"])  # asks about the three unknown ones
                await wait_bodies(cluster, [b"async-commit", b"raised"])  # the async listener said so
            finally:
                await p.shutdown()

    asyncio.run(main())


def test_the_blocking_facade_runs_plain_callables_off_its_loop(tmp_path: Path) -> None:
    async def main() -> None:
        async with running(tmp_path) as cluster:
            calls: list[str] = []

            def execute(msg: Message, arg: object) -> LocalTransactionState:
                calls.append(threading.current_thread().name)
                return COMMIT

            def use_facade() -> LocalTransactionState:
                with SyncTransactionProducer(
                    "txn-sync-pg", cluster.ns_addr, check_listener=lambda _m: UNKNOW
                ) as producer:
                    return producer.send_message_in_transaction(
                        Message(TOPIC, b"blocking"), executor=execute
                    ).local_state

            assert await asyncio.to_thread(use_facade) is COMMIT
            assert calls and calls[0] != "ledgermq-sync-loop"
            await wait_bodies(cluster, [b"blocking"])

    asyncio.run(main())
