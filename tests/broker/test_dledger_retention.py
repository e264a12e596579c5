"""Retention in a DLedger-mode broker, in process: a one-node group (its own quorum) whose
store's clean service runs on its own timer, as the native store's does.

Old DLedger data files go by themselves once expired at a deleteWhen hour; a pull below
the queue's new minimum is answered PULL_OFFSET_MOVED with the next offset moved to it;
sends go on; GET_DLEDGER_STATUS reports the new first index; the member watch is wired as
the store's ledger guard.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from pathlib import Path

from ledgermq.broker.metrics import BrokerCollector
from ledgermq.broker.processors.dledger_admin import dledger_status_doc
from ledgermq.config import FlushDiskType
from ledgermq.protocol.codes import RequestCode, ResponseCode
from ledgermq.store.dledger.retention import DLedgerCleanService
from ledgermq.testing.ports import free_port
from tests.broker.harness import running_broker

EVERY_HOUR = ";".join(f"{h:02d}" for h in range(24))


def one_node_group() -> dict[str, object]:
    return dict(
        enable_dleger_commit_log=True,
        dleger_group="broker-a",
        dleger_self_id="n0",
        dleger_peers=f"n0-127.0.0.1:{free_port()}",
        mapped_file_size_commitlog=4096,
        clean_resource_interval_ms=50,
        delete_when=EVERY_HOUR,
        file_reserved_time_hours=0.0,  # DLedger files expire after fileReservedTime + 1 hours
        flush_disk_type=FlushDiskType.SYNC_FLUSH,  # every entry durable: the checkpoint reaches the end
    )


async def wait_for(what: str, check: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


def test_a_dledger_broker_deletes_expired_data_files_on_its_own(tmp_path: Path) -> None:
    async def main() -> None:
        async with running_broker(tmp_path, store=one_node_group()) as h:
            dl = h.app.broker.dledger
            store = h.app.broker.store
            assert dl is not None and store.commitlog is not None
            assert isinstance(store.cleaner, DLedgerCleanService) and store.cleaner.alive
            assert dl.watch.keep_from in store.cleaner.ledger_guards
            await wait_for("leadership", lambda: dl.is_master)
            ledger = store.commitlog.ledger
            sent = 0
            while len(ledger.data.files) < 5:
                await h.send("Old", b"%04d" % sent + bytes(300))
                sent += 1
            await h.dispatched()
            # The checkpoint (the driver's, every second) covers the old files, then they age.
            await wait_for("the commit checkpoint", lambda: ledger.committed_index == ledger.last_index)
            old = time.time() - 2 * 3600
            for mf in ledger.data.files[:-1]:
                os.utime(mf.path, (old, old))
            await wait_for("the clean service to delete them", lambda: len(ledger.data.files) == 1)
            await wait_for("the queue's min offset to move", lambda: store.min_offset_in_queue("Old", 0) > 0)

            first = ledger.first_index
            low = store.min_offset_in_queue("Old", 0)
            assert first > 0 and low > 0
            header = {
                "consumerGroup": "cg",
                "topic": "Old",
                "queueId": 0,
                "queueOffset": 0,
                "maxMsgNums": 32,
                "sysFlag": 4,
                "commitOffset": 0,
                "suspendTimeoutMillis": 0,
                "subscription": "*",
                "subVersion": 0,
            }
            resp = await h.call(RequestCode.PULL_MESSAGE, header)
            assert resp.code == ResponseCode.PULL_OFFSET_MOVED
            assert int(resp.ext_fields["nextBeginOffset"]) == int(resp.ext_fields["minOffset"]) == low
            assert [int(m.body[:4]) for m in await h.pull("cg", "Old", offset=low)][:1] == [low]

            await h.send("Old", b"after")
            await h.dispatched()
            assert store.max_offset_in_queue("Old", 0) == sent + 1
            st = dl.status()
            assert st is not None
            doc = dledger_status_doc(h.app.broker, dl, st)
            assert doc["firstIndex"] == ledger.first_index + 1 and doc["lastIndex"] == ledger.last_index + 1
            assert all(m["stuck"] is False for m in doc["members"])
            metrics = {
                (m.name, sample.labels.get("member", "")): sample.value
                for m in BrokerCollector(h.app.broker).collect()
                for sample in m.samples
            }
            assert metrics[("ledgermq_dledger_first_index", "")] == ledger.first_index + 1
            assert metrics[("ledgermq_dledger_member_stuck", "n0")] == 0

    asyncio.run(asyncio.wait_for(main(), 60))
