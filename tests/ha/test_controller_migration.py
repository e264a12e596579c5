"""Moving a master-slave group (native store, replication epochs) to controller mode, as docs/controller.md says.

A SYNC_MASTER and its slave (brokerId 0 and 1) take sends; the slave catches up; both are stopped cleanly, the
master first; their files lose brokerId and brokerRole=SLAVE and gain enableControllerMode, controllerAddr and
allAckInSyncStateSet; the old master is started first (the group's first election makes it master), then the old
slave (it follows, and joins the SyncStateSet). Every message sent before the move and after it is readable on
both, the logs are byte-identical, and the replication epochs continue (the master-slave epoch 1, then the
controller-mode epoch 2 beginning where the old log ended).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from ledgermq.ha.epoch_file import EpochFile
from ledgermq.net.client import RemotingClient
from ledgermq.protocol.codes import ResponseCode
from tests.compat.cluster import wait_until
from tests.ha.controller_group import ControllerGroup
from tests.ha.process_group import BrokerProc, assert_identical, open_store, queue_bodies, send_raw

TOPIC = "CtlMigrationTopic"
QUEUES = 4


def body(seq: int) -> bytes:
    return f"move-{seq:06d}-".encode() + b"m" * 200


def send_all(b: BrokerProc, seqs: range) -> dict[int, tuple[int, int]]:
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


def to_controller_mode(b: BrokerProc) -> None:
    """The documented edit: drop brokerId and brokerRole=SLAVE (a master's SYNC_MASTER may stay), add the keys."""
    keep = []
    for line in b.conf.read_text().splitlines():
        key, _, value = line.partition("=")
        if key == "brokerId" or (key == "brokerRole" and value == "SLAVE") or key == "enableControllerMode":
            continue
        keep.append(line)
    keep += ["enableControllerMode=true", "allAckInSyncStateSet=true"]  # controllerAddr: already in the file
    b.conf.write_text("".join(f"{line}\n" for line in keep))


def test_a_master_slave_group_moves_to_controller_mode_without_losing_a_message(tmp_path: Path) -> None:
    group = ControllerGroup(tmp_path)
    m = group.add("m", 0, "SYNC_MASTER", enableControllerMode="false")
    s = group.add("s", 1, "SLAVE", enableControllerMode="false")
    try:
        group.start_namesrv()
        group.start(m)
        group.start(s)
        wait_until("a SEND_OK with the slave attached", lambda: _probe(m), 20, 0.2, group.explain)
        acked = send_all(m, range(300))
        old_end = group.wait_caught_up(m, [s], 20)
        assert group.stop(m) == 0 and group.stop(s) == 0, group.explain()
        assert [e.number for e in EpochFile(m.store_dir).load().epochs.entries] == [1]

        to_controller_mode(m)
        to_controller_mode(s)
        group.start_broker(m, "MASTER")  # first: its log is the longest, and the first to ask becomes master
        group.start_broker(s, "SLAVE")
        group.wait_sync_state_set(m, 2)
        acked.update(send_all(m, range(300, 400)))
        group.wait_caught_up(m, [s], 20)
        assert group.stop(s) == 0 and group.stop(m) == 0, group.explain()
    finally:
        group.close()

    for b in (m, s):
        epochs = [(n, start) for n, start, _ in EpochFile(b.store_dir).load().epochs.pairs()]
        assert epochs == [(1, 0), (2, old_end)], (b.name, epochs)
    assert_identical(m, s, all_segments=True)
    served = {}
    for b in (m, s):
        store = open_store(b)
        try:
            served[b.name] = {(q, o): d for q in range(QUEUES) for o, d in queue_bodies(store, TOPIC, q).items()}
        finally:
            store.shutdown()
    assert served["m"] == served["s"]
    missing = [seq for seq, where in sorted(acked.items()) if served["m"].get(where) != body(seq)]
    assert not missing, f"{len(missing)} of {len(acked)} sends are missing after the move: {missing[:10]}"


def _probe(b: BrokerProc) -> bool:
    async def run() -> bool:
        client = RemotingClient(connect_timeout=2.0)
        try:
            return (await send_raw(client, b, "ProbeTopic", 0, b"probe")).code == ResponseCode.SUCCESS
        finally:
            await client.close()

    try:
        return asyncio.run(run())
    except Exception:
        return False
