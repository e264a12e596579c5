"""A corrupt commit-log record over the wire: pulls, views by id and queries by key answer
SYSTEM_ERROR with the CorruptRangeError text (never the bytes, never an empty answer that
would move a consumer past the message); GET_BROKER_RUNTIME_INFO shows the store's integrity
counters; after a repair from good bytes everything is served again.

The damage is real: a byte of a stored body is flipped in the segment file on disk (the
broker's mapping shares its pages), so the read path's own checks find it.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from ledgermq.cli.main import cli
from ledgermq.protocol import fastjson
from ledgermq.protocol import message as M
from ledgermq.protocol.codes import RequestCode, ResponseCode
from ledgermq.protocol.command import RemotingCommand
from ledgermq.protocol.message import decode_records
from ledgermq.protocol.msgid import decode_offset_msg_id
from tests.broker.harness import Harness, running_broker

TOPIC = "RotOverWire"
CORRUPT_TEXT = "is corrupt on this broker"
STORE_KEYS = (
    "storeDamagedRanges",
    "storeDamagedBytes",
    "storeCorruptionsFound",
    "storeRepairs",
    "storeScrubbedBytes",
    "storeLastScrubMillis",
    "storeQueueRebuilds",
    "storeQueueUnitsRewritten",
    "storeQueuePlaceholders",
    "storeIndexRebuilds",
)


async def pull(h: Harness, offset: int) -> RemotingCommand:
    header: dict[str, Any] = {
        "consumerGroup": "rot-group",
        "topic": TOPIC,
        "queueId": 0,
        "queueOffset": offset,
        "maxMsgNums": 32,
        "sysFlag": 4,
        "commitOffset": 0,
        "suspendTimeoutMillis": 0,
        "subscription": "*",
        "subVersion": 0,
    }
    return await h.call(RequestCode.PULL_MESSAGE, header)


async def runtime_info(h: Harness) -> dict[str, str]:
    resp = await h.call(RequestCode.GET_BROKER_RUNTIME_INFO)
    assert resp.code == ResponseCode.SUCCESS
    table: dict[str, str] = fastjson.loads(resp.body)["table"]
    return table


def broker_status(addr: str) -> dict[str, str]:
    """``ledgermq admin brokerStatus -b ADDR`` (mqadmin's), as key -> value."""
    no_namesrv = "127.0.0.1:1"  # -b asks the broker directly
    result = CliRunner().invoke(cli, ["admin", "brokerStatus", "-b", addr, "-n", no_namesrv], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    pairs = (line.split() for line in result.stdout.splitlines() if line.strip())
    return {row[0]: row[1] for row in pairs if len(row) == 2}


def flip_body_byte(h: Harness, offset: int) -> bytes:
    """Flip a byte inside the body of the record at ``offset``; return its good bytes."""
    store = h.app.broker.store
    good = store.look_message_by_offset(offset)
    assert good is not None
    seg = store.config.mapped_file_size_commitlog
    at = offset % seg + M.body_end(good[: M.MAX_HEAD_SIZE]) - 5
    fd = os.open(Path(store.config.commitlog_path) / f"{offset - offset % seg:020d}", os.O_RDWR)
    try:
        byte = os.pread(fd, 1, at)
        os.pwrite(fd, bytes([byte[0] ^ 0x5A]), at)
    finally:
        os.close(fd)
    return good


def test_pull_view_and_query_refuse_a_corrupt_record_until_it_is_repaired(tmp_path: Path) -> None:
    async def main() -> None:
        async with running_broker(tmp_path) as h:
            ids = []
            for n in range(5):
                resp = await h.send(TOPIC, b"body-%d." % n * 40, props={"KEYS": f"key{n}", "UNIQ_KEY": f"{n:032X}"})
                ids.append(resp.ext_fields["msgId"])
            await h.dispatched()
            info = await runtime_info(h)
            assert all(key in info for key in STORE_KEYS), sorted(info)
            assert info["storeDamagedRanges"] == "0"

            _host, victim = decode_offset_msg_id(ids[2])
            good = flip_body_byte(h, victim)

            resp = await pull(h, 0)  # the messages before the damaged one are served
            assert resp.code == ResponseCode.SUCCESS, resp
            assert [r.body for r in decode_records(resp.body)] == [b"body-0." * 40, b"body-1." * 40]
            assert resp.ext_fields["nextBeginOffset"] == "2"

            resp = await pull(h, 2)  # the damaged one: an error, not an empty answer
            assert resp.code == ResponseCode.SYSTEM_ERROR, resp
            assert CORRUPT_TEXT in (resp.remark or "") and "awaits repair from a replica" in (resp.remark or "")
            assert f"[{victim}, {victim + len(good)})" in (resp.remark or "")

            resp = await h.call(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": victim})
            assert resp.code == ResponseCode.SYSTEM_ERROR and CORRUPT_TEXT in (resp.remark or ""), resp
            assert resp.body == b""

            query = {"topic": TOPIC, "key": "key2", "maxNum": 32, "beginTimestamp": 0, "endTimestamp": 2**62}
            resp = await h.call(RequestCode.QUERY_MESSAGE, query)
            assert resp.code == ResponseCode.SYSTEM_ERROR and CORRUPT_TEXT in (resp.remark or ""), resp

            info = await runtime_info(h)
            assert info["storeDamagedRanges"] == "1" and info["storeCorruptionsFound"] == "1"
            assert info["storeDamagedBytes"] == str(len(good))
            status = await asyncio.to_thread(broker_status, h.addr)  # what an operator runs
            assert status["storeDamagedRanges"] == "1" and status["storeDamagedBytes"] == str(len(good))
            assert all(key in status for key in STORE_KEYS)

            store = h.app.broker.store
            await asyncio.to_thread(store.repair_range, victim, good, "test replica")
            resp = await pull(h, 2)
            assert resp.code == ResponseCode.SUCCESS, resp
            assert [r.body for r in decode_records(resp.body)] == [b"body-%d." % n * 40 for n in (2, 3, 4)]
            resp = await h.call(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": victim})
            assert resp.code == ResponseCode.SUCCESS and resp.body == good
            info = await runtime_info(h)
            assert info["storeDamagedRanges"] == "0" and info["storeRepairs"] == "1"

    asyncio.run(main())
