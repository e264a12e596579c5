"""A DLedger leader that loses leadership before a proposal commits answers the send
FLUSH_SLAVE_TIMEOUT (the outcome is unknown: a new leader may still commit it), and, as
RocketMQ does, with the result headers of what it stored locally (msgId, queueId,
queueOffset); clients decode those headers and fail without them. Where the entry is no
longer this node's (another term at its index), no place is named at all.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from ledgermq.protocol import message as M
from ledgermq.protocol import properties as P
from ledgermq.protocol.codes import RequestCode, ResponseCode
from ledgermq.protocol.command import RemotingCommand
from ledgermq.protocol.msgid import decode_offset_msg_id
from ledgermq.raftio.driver import LeadershipLostError
from tests.broker.harness import Harness, running_broker
from tests.broker.test_dledger_internal_writes import one_node_group, wait_for


async def send_unchecked(h: Harness, body: bytes, queue_id: int) -> RemotingCommand:
    """``Harness.send`` without its SUCCESS assertion."""
    props = P.encode_properties({"UNIQ_KEY": "1" * 32})
    header = {"a": "pg", "b": "T", "c": "TBW102", "d": 4, "e": queue_id, "f": 0, "g": 1_700_000_000_000, "h": 0,
              "i": props, "j": 0, "k": False, "m": False}  # fmt: skip
    return await h.call(RequestCode.SEND_MESSAGE_V2, header, body)


def test_an_unknown_outcome_is_answered_with_the_local_append(tmp_path: Path) -> None:
    async def main() -> None:
        async with running_broker(tmp_path, store=one_node_group(tmp_path)) as h:
            dl = h.app.broker.dledger
            assert dl is not None and dl.driver is not None
            await wait_for("leadership", lambda: dl.is_master)
            driver = dl.driver
            real_propose = driver.propose_nowait
            shift_term = [0]

            def committed_then_unknown(data: bytes) -> asyncio.Future[int]:
                """Propose for real, then report the outcome as unknown (as a step-down would)."""
                inner = real_propose(data)
                outer: asyncio.Future[int] = asyncio.get_running_loop().create_future()

                def relay(f: asyncio.Future[int]) -> None:
                    index, term = f.result(), driver.status().term + shift_term[0]
                    outer.set_exception(LeadershipLostError("stepped down (test)", index, term))

                inner.add_done_callback(relay)
                return outer

            driver.propose_nowait = committed_then_unknown  # type: ignore[method-assign]
            try:
                resp = await send_unchecked(h, b"outcome unknown", 1)
                assert resp.code == ResponseCode.FLUSH_SLAVE_TIMEOUT, resp.remark
                assert "leadership changed before commit" in (resp.remark or "")
                ext = resp.ext_fields
                assert int(ext["queueId"]) == 1 and int(ext["queueOffset"]) == 0
                _host, offset = decode_offset_msg_id(ext["msgId"])
                stored = M.decode_record(h.app.broker.store.look_message_by_offset(offset) or b"")
                assert stored.body == b"outcome unknown" and stored.physical_offset == offset

                shift_term[0] = 1  # another term at that index: not ours, so no place is named
                resp = await send_unchecked(h, b"overwritten", 1)
                assert resp.code == ResponseCode.FLUSH_SLAVE_TIMEOUT
                assert "msgId" not in resp.ext_fields and "queueOffset" not in resp.ext_fields
            finally:
                driver.propose_nowait = real_propose  # type: ignore[method-assign]
            ok = await h.call(RequestCode.GET_BROKER_RUNTIME_INFO)
            assert ok.code == ResponseCode.SUCCESS

    asyncio.run(main())
