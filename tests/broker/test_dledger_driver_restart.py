"""A one-node DLedger group in process (its own quorum, so it leads at once) whose Raft
driver fails on a torn write: the entry head is written, then ENOSPC (failpoint
``dledger.after_entry_head``). The broker must show the failure, stop being the master,
fail its restart attempts while the checkpoint cannot be written (``atomic_file.before_fsync``),
and once both faults are gone re-recover the store (cutting the torn entry), start a new
driver that leads again, keep every acknowledged message and take new sends at the next
queue offsets.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from ledgermq import failpoints
from ledgermq.broker.dledger import RestartPolicy
from ledgermq.protocol import properties as P
from ledgermq.protocol.codes import RequestCode, ResponseCode
from ledgermq.protocol.command import RemotingCommand
from tests.broker.harness import Harness, running_broker
from tests.broker.test_dledger_internal_writes import one_node_group

TORN = "dledger.after_entry_head"
CHECKPOINT = "atomic_file.before_fsync"


def _enospc() -> None:
    raise OSError(errno.ENOSPC, "No space left on device (failpoint)")


async def _wait_for(what: str, check: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


async def _send_unchecked(h: Harness, topic: str, body: bytes) -> RemotingCommand:
    """``Harness.send`` without its SUCCESS assertion."""
    props = P.encode_properties({"UNIQ_KEY": "1" * 32})
    header = {"a": "pg", "b": topic, "c": "TBW102", "d": 4, "e": 0, "f": 0, "g": 1_700_000_000_000, "h": 0,
              "i": props, "j": 0, "k": False, "m": False}  # fmt: skip
    return await h.call(RequestCode.SEND_MESSAGE_V2, header, body)


def test_a_torn_write_fails_the_driver_and_the_broker_restarts_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="ledgermq.store.dledger.recovery")

    def fast_restarts(app: object) -> None:
        dl = app.broker.dledger  # type: ignore[attr-defined]
        dl.restart_policy = RestartPolicy(first_delay_s=0.1, max_delay_s=0.4, healthy_after_s=10.0)

    async def main() -> None:
        async with running_broker(tmp_path, store=one_node_group(tmp_path), before_start=fast_restarts) as h:
            dl = h.app.broker.dledger
            assert dl is not None
            await _wait_for("leadership", lambda: dl.is_master)
            for i in range(5):
                await h.send("T", f"before-{i}".encode())

            failpoints.arm(TORN, _enospc)
            failpoints.arm(CHECKPOINT, _enospc)
            try:
                resp = await _send_unchecked(h, "T", b"torn")
                assert resp.code != ResponseCode.SUCCESS  # not acknowledged: it was never stored
                await _wait_for("the driver to fail", lambda: dl.state == "failed")
                st = dl.status()
                assert st is not None and st.failed and "No space left" in st.failed
                assert not dl.is_master and st.leader is None
                failures = dl.driver_failures
                await asyncio.sleep(1.0)  # several restart attempts, all failing on the checkpoint
                assert dl.state == "failed" and dl.driver_restarts == 0
                failpoints.disarm(TORN)
                await asyncio.sleep(0.5)
                assert dl.state == "failed"  # the checkpoint still cannot be written
            finally:
                failpoints.disarm(TORN)
                failpoints.disarm(CHECKPOINT)

            await _wait_for("the restart", lambda: dl.state == "running" and dl.is_master)
            assert dl.driver_failures == failures and dl.driver_restarts == 1
            ledger = h.app.broker.store.commitlog
            assert ledger is not None and ledger.ledger.recovery is not None
            assert ledger.ledger.recovery.last_index == 5  # the NOOP and the 5 sends; the torn entry is gone
            assert any("data cut at" in r.getMessage() for r in caplog.records)  # found and cut by the first attempt
            await h.send("T", b"after")
            await h.dispatched()  # SEND_OK means committed; the reput makes it readable just after
            bodies = [m.body for m in await h.pull("cg", "T")]
            assert bodies == [*(f"before-{i}".encode() for i in range(5)), b"after"]

    asyncio.run(main())
