"""A DLedger leader that loses leadership before a proposal commits cannot tell whether the
message will survive (a new leader may still commit it, or cut it). RocketMQ's
DLedgerCommitLog answers that SYSTEM_ERROR ("in-sync replicas not enough"), not
FLUSH_SLAVE_TIMEOUT, which clients hand to the application as stored; with SYSTEM_ERROR
every client sends again, on the new master. This broker must answer the same.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from ledgermq.protocol import properties as P
from ledgermq.protocol.codes import RequestCode, ResponseCode
from ledgermq.protocol.command import RemotingCommand
from ledgermq.raftio.driver import LeadershipLostError
from ledgermq.raftio.proposals import OnSettled
from tests.broker.harness import Harness, running_broker
from tests.broker.test_dledger_internal_writes import one_node_group, wait_for


async def send_unchecked(h: Harness, body: bytes) -> RemotingCommand:
    """``Harness.send`` without its SUCCESS assertion."""
    props = P.encode_properties({"UNIQ_KEY": "1" * 32})
    header = {"a": "pg", "b": "T", "c": "TBW102", "d": 4, "e": 1, "f": 0, "g": 1_700_000_000_000, "h": 0,
              "i": props, "j": 0, "k": False, "m": False}  # fmt: skip
    return await h.call(RequestCode.SEND_MESSAGE_V2, header, body)


def test_an_unknown_outcome_is_answered_as_rocketmq_dledger_does(tmp_path: Path) -> None:
    async def main() -> None:
        async with running_broker(tmp_path, store=one_node_group(tmp_path)) as h:
            dl = h.app.broker.dledger
            assert dl is not None and dl.driver is not None
            await wait_for("leadership", lambda: dl.is_master)
            driver = dl.driver
            real_propose = driver.propose_with

            def then_unknown(data: bytes, on_settled: OnSettled) -> int:
                """Propose for real, then report the outcome as unknown (as a step-down would)."""

                def unknown(index: int, _error: BaseException | None) -> None:
                    on_settled(index, LeadershipLostError("stepped down (test)", index, driver.status().term))

                return real_propose(data, unknown)

            driver.propose_with = then_unknown  # type: ignore[method-assign]
            try:
                resp = await send_unchecked(h, b"outcome unknown")
            finally:
                driver.propose_with = real_propose  # type: ignore[method-assign]
            assert resp.code == ResponseCode.SYSTEM_ERROR, resp
            assert "in-sync replicas not enough" in (resp.remark or "")
            assert "leadership changed before commit" in (resp.remark or "")
            assert "msgId" not in resp.ext_fields  # no result: nothing is promised
            ok = await send_unchecked(h, b"next")
            assert ok.code == ResponseCode.SUCCESS, ok

    asyncio.run(main())
