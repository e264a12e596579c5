"""Controller mode: an old master with a tail its slave never got returns, truncates exactly that tail, and ends
byte-identical to the new master.

ASYNC_MASTER (allAckInSyncStateSet off): sends are SEND_OK once the master holds them. The master's HA link runs
through a fault proxy (tests/ha/partition.py); cutting it (bytes dropped, connections kept) stops replication while
the slave stays connected and in the SyncStateSet. The master takes 30 more sends, the slave gets none of them, and
the master is SIGKILLed: the controller elects the slave, whose epoch 2 begins at its log end. Started again, the
old master registers, follows the new master as a slave, and the epoch handshake tells it to cut what it holds
beyond the new epoch's start: exactly the 30 sends' bytes, nothing below. The lost sends are what
docs/controller.md says this configuration may lose; every other SEND_OK is on both brokers.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from ledgermq.ha.epoch_file import EpochFile
from ledgermq.net.client import RemotingClient
from ledgermq.protocol.codes import ResponseCode
from tests.compat.cluster import wait_until
from tests.ha.partition import ha_client_info, start_isolatable_pair
from tests.ha.process_group import BrokerProc, assert_identical, open_store, queue_bodies, send_raw

TOPIC = "CtlTailTopic"
QUEUES = 4


def body(seq: int) -> bytes:
    return f"tail-{seq:06d}-".encode() + b"t" * 250


def send_all(b: BrokerProc, seqs: range) -> dict[int, tuple[int, int]]:
    """Sync sends one by one; seq -> (queueId, queueOffset); every one must be SEND_OK."""

    async def run() -> dict[int, tuple[int, int]]:
        client = RemotingClient(connect_timeout=2.0)
        acked: dict[int, tuple[int, int]] = {}
        try:
            for seq in seqs:
                resp = await send_raw(client, b, TOPIC, seq % QUEUES, body(seq))
                assert resp.code == ResponseCode.SUCCESS, (seq, resp.code, resp.remark)
                acked[seq] = (int(resp.ext_fields["queueId"]), int(resp.ext_fields["queueOffset"]))
        finally:
            await client.close()
        return acked

    return asyncio.run(run())


def log_bytes(files: dict[str, bytes], end: int) -> bytes:
    """The commit log's bytes [0, end) from its segment files."""
    out = bytearray()
    for name in sorted(files):
        out += files[name]
        if len(out) >= end:
            break
    return bytes(out[:end])


def test_a_returning_old_master_truncates_exactly_its_unreplicated_tail(tmp_path: Path) -> None:
    # a stalled slave stays connected and in the SyncStateSet for the whole test
    group, links, a, b = start_isolatable_pair(tmp_path, haMaxTimeSlaveNotCatchup=30_000, haHousekeepingInterval=30_000)
    try:
        acked = send_all(a, range(60))
        replicated = group.wait_caught_up(a, [b], 20)
        links.cut("blackhole", only=("ha",))
        tail = send_all(a, range(60, 90))  # SEND_OK from the master alone
        end_a = group.max_offset(a)
        assert end_a > replicated and group.max_offset(b) == replicated
        assert group.info(a)["syncStateSet"].count(",") == 1  # the slave is still a member: it can be elected

        group.kill(a)
        group.wait_role(b, "MASTER", 10)
        before_restart = a.commitlog_files()
        acked.update(send_all(b, range(90, 135)))  # more than the tail: the logs' ends differ until a truncates
        links.heal()
        group.start_broker(a, "SLAVE")
        wait_until("a to follow b", lambda: ha_client_info(group, a).connected, 20)
        group.wait_caught_up(b, [a], 20)
        client = ha_client_info(group, a)
        assert group.stop(a) == 0 and group.stop(b) == 0, group.explain()
    finally:
        links.close()
        group.close()

    epochs = EpochFile(b.store_dir).load().epochs.pairs()
    assert [(n, start) for n, start, _ in epochs] == [(1, 0), (2, replicated)], epochs
    assert client.truncations == 1 and client.truncated_bytes == end_a - replicated, client
    after = a.commitlog_files()
    assert log_bytes(after, replicated) == log_bytes(before_restart, replicated)  # nothing below the tail touched
    assert_identical(b, a, all_segments=True)
    served = {}
    for x in (a, b):
        store = open_store(x)
        try:
            served[x.name] = {
                (q, off): data for q in range(QUEUES) for off, data in queue_bodies(store, TOPIC, q).items()
            }
        finally:
            store.shutdown()
    assert served["a"] == served["b"]
    missing = [seq for seq, where in acked.items() if served["b"].get(where) != body(seq)]
    assert not missing, f"SEND_OKs outside the unreplicated tail are missing: {missing[:10]}"
    survivors = [seq for seq, where in tail.items() if served["b"].get(where) == body(seq)]
    assert not survivors, f"the unreplicated tail's sends {survivors} are on the new master"
