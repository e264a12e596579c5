"""The broker's side of transactions, in process, driven by raw remoting requests: what a
half message looks like in the store, END_TRANSACTION's commit/rollback/unknown and its
refusals, and the check round (run by hand here: the service's own interval is long)."""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path
from typing import Any

import pytest

from ledgermq.broker.transactions.half import CHECK_MAX_TIME_TOPIC, HALF_TOPIC, OP_TOPIC, SYSTEM_GROUP
from ledgermq.config import BrokerRole
from ledgermq.net.client import RemotingClient
from ledgermq.net.connection import Connection
from ledgermq.protocol import fastjson
from ledgermq.protocol import properties as P
from ledgermq.protocol import sysflag as SF
from ledgermq.protocol.codes import RequestCode, ResponseCode
from ledgermq.protocol.command import RemotingCommand
from ledgermq.protocol.message import MessageRecord, decode_record
from ledgermq.protocol.msgid import decode_offset_msg_id
from tests.broker.harness import Harness, running_broker

GROUP = "txn-pg"
TOPIC = "TxnTopic"
SLOW = {"transaction_check_interval_ms": 3_600_000}  # rounds run by hand only


async def send_half(h: Harness, body: bytes, uniq: str, queue_id: int = 1, **extra: str) -> RemotingCommand:
    props = {P.TAGS: "TagA", P.WAIT: "true", P.UNIQ_KEY: uniq, P.TRAN_MSG: "true", P.PGROUP: GROUP, **extra}
    header = {
        **{"a": GROUP, "b": TOPIC, "c": "TBW102", "d": 4, "e": queue_id, "f": SF.TRANSACTION_PREPARED_TYPE},
        **{"g": int(time.time() * 1000), "h": 7, "i": P.encode_properties(props), "j": 0, "k": False, "m": False},
    }
    return await h.call(RequestCode.SEND_MESSAGE_V2, header, body)


def end_header(resp: RemotingCommand, kind: int, *, group: str = GROUP, from_check: bool = False) -> dict[str, Any]:
    _host, phy = decode_offset_msg_id(resp.ext_fields["msgId"])
    return {
        "producerGroup": group,
        "tranStateTableOffset": resp.ext_fields["queueOffset"],
        "commitLogOffset": phy,
        "commitOrRollback": kind,
        "fromTransactionCheck": str(from_check).lower(),
        "msgId": "x",
    }


def stored(h: Harness, topic: str, queue_id: int = 0) -> list[MessageRecord]:
    store = h.app.broker.store
    assert store.wait_dispatched(None, 5.0)
    res = store.get_message(topic, queue_id, store.min_offset_in_queue(topic, queue_id), 32)
    return [decode_record(raw) for raw in res.messages]


def real_count(h: Harness) -> int:
    store = h.app.broker.store
    assert store.wait_dispatched(None, 5.0)
    return sum(store.max_offset_in_queue(TOPIC, q) for q in range(8))


def test_a_half_message_is_stored_in_the_half_queue_and_committed_to_its_real_queue(tmp_path: Path) -> None:
    async def main() -> None:
        async with running_broker(tmp_path, **SLOW) as h:
            resp = await send_half(h, b"order-1", "A" * 32)
            assert resp.code == ResponseCode.SUCCESS
            assert resp.ext_fields["queueId"] == "1"  # the real queue, as RocketMQ answers
            assert resp.ext_fields["queueOffset"] == "0"  # the half queue's offset
            assert "transactionId" not in resp.ext_fields  # 4.9 brokers never set it
            [half] = stored(h, HALF_TOPIC)
            assert half.sysflag & SF.TRANSACTION_MASK == SF.TRANSACTION_NOT_TYPE
            assert (half.properties[P.REAL_TOPIC], half.properties[P.REAL_QID]) == (TOPIC, "1")
            assert half.properties[P.PGROUP] == GROUP and half.properties[P.TRAN_MSG] == "true"
            assert half.offset_msg_id == resp.ext_fields["msgId"]
            assert real_count(h) == 0  # invisible to consumers of TxnTopic

            commit = RemotingCommand.request(RequestCode.END_TRANSACTION, end_header(resp, SF.TRANSACTION_COMMIT_TYPE))
            answer = await h.client.invoke(h.addr, commit, 5)
            assert answer.code == ResponseCode.SUCCESS, answer.remark
            [real] = stored(h, TOPIC, 1)
            assert real.body == b"order-1" and real.flag == 7
            assert real.sysflag & SF.TRANSACTION_MASK == SF.TRANSACTION_COMMIT_TYPE
            assert real.prepared_transaction_offset == half.physical_offset
            assert real.born_timestamp == half.born_timestamp
            # RocketMQ 4.9 stores the half's property string unchanged in the committed copy
            assert real.properties[P.TRAN_MSG] == "true" and real.properties[P.REAL_TOPIC] == TOPIC
            assert real.properties[P.UNIQ_KEY] == "A" * 32
            [op] = stored(h, OP_TOPIC)
            assert op.tags == "d" and op.body == b"0" and op.sysflag == 0

    asyncio.run(main())


def test_rollback_writes_only_the_op_message_and_unknown_writes_nothing(tmp_path: Path) -> None:
    async def main() -> None:
        async with running_broker(tmp_path, **SLOW) as h:
            r1 = await send_half(h, b"b1", "B" * 32)
            r2 = await send_half(h, b"b2", "C" * 32)
            rollback = end_header(r1, SF.TRANSACTION_ROLLBACK_TYPE)
            assert (await h.call(RequestCode.END_TRANSACTION, rollback)).code == ResponseCode.SUCCESS
            unknown = RemotingCommand.request(RequestCode.END_TRANSACTION, end_header(r2, SF.TRANSACTION_NOT_TYPE))
            await h.client.invoke_oneway(h.addr, unknown)  # producers send it oneway: no answer
            await h.call(RequestCode.HEART_BEAT, {}, b'{"clientID":"x","consumerDataSet":[],"producerDataSet":[]}')
            assert real_count(h) == 0
            assert [op.body for op in stored(h, OP_TOPIC)] == [b"0"]

    asyncio.run(main())


def test_end_transaction_refuses_what_does_not_name_the_half_message(tmp_path: Path) -> None:
    async def main() -> None:
        async with running_broker(tmp_path, **SLOW) as h:
            resp = await send_half(h, b"c1", "D" * 32)
            commit = SF.TRANSACTION_COMMIT_TYPE
            cases = [
                ({**end_header(resp, commit), "producerGroup": "other"}, "The producer group wrong"),
                ({**end_header(resp, commit), "tranStateTableOffset": 5}, "The transaction state table offset wrong"),
                ({**end_header(resp, commit), "commitLogOffset": 1}, "Find prepared transaction message failed"),
                ({**end_header(resp, commit), "commitOrRollback": 3}, "commitOrRollback field wrong"),
            ]
            for header, remark in cases:
                answer = await h.call(RequestCode.END_TRANSACTION, header)
                assert (answer.code, answer.remark) == (ResponseCode.SYSTEM_ERROR, remark)
            ordinary = await h.send(TOPIC, b"plain", 0, {P.PGROUP: GROUP})  # not a half message
            _host, phy = decode_offset_msg_id(ordinary.ext_fields["msgId"])
            header = {**end_header(resp, commit), "commitLogOffset": phy, "tranStateTableOffset": 0}
            answer = await h.call(RequestCode.END_TRANSACTION, header)
            assert answer.remark == "Find prepared transaction message failed"
            assert real_count(h) == 1 and stored(h, OP_TOPIC) == []

    asyncio.run(main())


def test_reject_transaction_message_refuses_half_sends(tmp_path: Path) -> None:
    async def main() -> None:
        async with running_broker(tmp_path, reject_transaction_message=True, **SLOW) as h:
            resp = await send_half(h, b"r", "E" * 32)
            assert resp.code == ResponseCode.NO_PERMISSION
            assert resp.remark == "the broker[127.0.0.1] sending transaction message is forbidden"
            assert stored(h, HALF_TOPIC) == []

    asyncio.run(main())


def test_a_slave_refuses_end_transaction(tmp_path: Path) -> None:
    async def main() -> None:
        async with running_broker(tmp_path, broker_id=1, store={"broker_role": BrokerRole.SLAVE}, **SLOW) as h:
            header = {"producerGroup": GROUP, "tranStateTableOffset": 0, "commitLogOffset": 0,
                      "commitOrRollback": SF.TRANSACTION_COMMIT_TYPE, "msgId": "x"}  # fmt: skip
            answer = await h.call(RequestCode.END_TRANSACTION, header)
            assert answer.code == ResponseCode.SLAVE_NOT_AVAILABLE
            assert not h.app.txn_check.running  # only a master checks back

    asyncio.run(main())


class FakeProducer:
    """A producer connection that records CHECK_TRANSACTION_STATE requests."""

    def __init__(self) -> None:
        self.checks: list[RemotingCommand] = []
        self.client = RemotingClient(on_request=self._on_request)

    def _on_request(self, conn: Connection, cmd: RemotingCommand) -> None:
        assert cmd.code == RequestCode.CHECK_TRANSACTION_STATE and cmd.is_oneway
        self.checks.append(cmd)

    async def register(self, h: Harness) -> None:
        body = {"clientID": "127.0.0.1@fake", "consumerDataSet": [], "producerDataSet": [{"groupName": GROUP}]}
        resp = await self.client.invoke(
            h.addr, RemotingCommand.request(RequestCode.HEART_BEAT, {}, fastjson.dumps(body)), 5
        )
        assert resp.code == ResponseCode.SUCCESS


async def until(what: str, cond: Any, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.01)


def test_a_check_round_asks_a_live_producer_about_the_renewed_copy_and_its_answer_commits(tmp_path: Path) -> None:
    async def main() -> None:
        async with running_broker(tmp_path, transaction_timeout_ms=0, **SLOW) as h:
            fake = FakeProducer()
            try:
                await fake.register(h)
                resp = await send_half(h, b"checked", "F" * 32, queue_id=2)
                await asyncio.sleep(0.005)  # the round must start after the half's store time
                report = await h.app.txn_check.check_round()
                assert report.checked == ["F" * 32] and report.half_offset == 1
                await until("the check request", lambda: fake.checks)
                check = fake.checks[0]
                half, copy = stored(h, HALF_TOPIC)
                assert copy.properties[P.TRANSACTION_CHECK_TIMES] == "1"
                assert check.ext_fields["tranStateTableOffset"] == "1"
                assert check.ext_fields["commitLogOffset"] == str(copy.physical_offset)
                assert check.ext_fields["msgId"] == check.ext_fields["transactionId"] == "F" * 32
                body = decode_record(check.body)
                assert (body.topic, body.queue_id, body.body) == (TOPIC, 2, b"checked")
                offsets = h.app.broker.offsets
                assert offsets.query(SYSTEM_GROUP, HALF_TOPIC, 0) == 1
                # the answer names the copy
                header = {"producerGroup": GROUP, "tranStateTableOffset": 1, "commitLogOffset": copy.physical_offset,
                          "commitOrRollback": SF.TRANSACTION_COMMIT_TYPE, "fromTransactionCheck": "true",
                          "msgId": "F" * 32}  # fmt: skip
                assert (await h.call(RequestCode.END_TRANSACTION, header)).code == ResponseCode.SUCCESS
                assert [r.body for r in stored(h, TOPIC, 2)] == [b"checked"]
                await asyncio.sleep(0.005)
                report = await h.app.txn_check.check_round()  # the op resolves the copy
                assert report.checked == [] and report.half_offset == 2 and report.op_offset == 1
                assert offsets.query(SYSTEM_GROUP, OP_TOPIC, 0) == 1
                assert resp.code == ResponseCode.SUCCESS and half.queue_offset == 0
            finally:
                await fake.client.close()

    asyncio.run(main())


def test_no_live_producer_skips_the_check_and_past_the_limit_the_message_is_discarded(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def main() -> None:
        async with running_broker(tmp_path, transaction_timeout_ms=0, transaction_check_max=2, **SLOW) as h:
            await send_half(h, b"doomed", "G" * 32)
            reports = []
            for _ in range(3):
                await asyncio.sleep(0.005)
                reports.append(await h.app.txn_check.check_round())
            assert [r.unsent for r in reports] == [["G" * 32], ["G" * 32], []]
            assert reports[2].discarded == ["G" * 32]
            [moved] = stored(h, CHECK_MAX_TIME_TOPIC)
            assert moved.body == b"doomed" and moved.properties[P.TRANSACTION_CHECK_TIMES] == "2"
            assert h.app.broker.topics.get(CHECK_MAX_TIME_TOPIC) is not None
            assert real_count(h) == 0
            await asyncio.sleep(0.005)
            assert (await h.app.txn_check.check_round()).discarded == []  # once

    with caplog.at_level(logging.ERROR, logger="ledgermq.broker.transactions"):
        asyncio.run(main())
    lines = [r.getMessage() for r in caplog.records if "discarded" in r.getMessage()]
    assert len(lines) == 1 and "G" * 32 in lines[0] and CHECK_MAX_TIME_TOPIC in lines[0]


def test_check_progress_survives_a_restart_so_resolved_messages_are_not_checked_again(tmp_path: Path) -> None:
    async def main() -> None:
        async with running_broker(tmp_path, transaction_timeout_ms=0, **SLOW) as h:
            fake = FakeProducer()
            try:
                await fake.register(h)
                await send_half(h, b"once", "H" * 32)
                await asyncio.sleep(0.005)
                assert (await h.app.txn_check.check_round()).checked == ["H" * 32]
                await until("the check request", lambda: fake.checks)
                check = fake.checks[0].ext_fields
                header = {"producerGroup": GROUP, "tranStateTableOffset": check["tranStateTableOffset"],
                          "commitLogOffset": check["commitLogOffset"], "commitOrRollback": SF.TRANSACTION_ROLLBACK_TYPE,
                          "fromTransactionCheck": "true", "msgId": "H" * 32}  # fmt: skip
                assert (await h.call(RequestCode.END_TRANSACTION, header)).code == ResponseCode.SUCCESS
                await asyncio.sleep(0.005)
                report = await h.app.txn_check.check_round()
                assert (report.checked, report.half_offset, report.op_offset) == ([], 2, 1)
            finally:
                await fake.client.close()
        async with running_broker(tmp_path, transaction_timeout_ms=0, **SLOW) as h:  # same store
            offsets = h.app.broker.offsets
            assert (offsets.query(SYSTEM_GROUP, HALF_TOPIC, 0), offsets.query(SYSTEM_GROUP, OP_TOPIC, 0)) == (2, 1)
            await asyncio.sleep(0.005)
            report = await h.app.txn_check.check_round()
            assert (report.checked, report.unsent, report.half_offset) == ([], [], 2)
            assert real_count(h) == 0

    asyncio.run(main())
