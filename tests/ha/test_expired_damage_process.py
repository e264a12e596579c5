"""A slave's damaged range that its master's retention already deleted, with real processes.

A SYNC_MASTER and its slave, 1 MiB segments, two segments of acknowledged sends. The slave
is stopped and bytes of its first segment are flipped; meanwhile the master's retention
deletes that segment (fileReservedTime=0 and an operator's deleteExpiredCommitLog). No
replica will ever hold those bytes again. Before, the slave refused reads of them forever
and the master logged "holds [a, b) damaged and we cannot repair it" at every connection.
Now the slave lets them go as its own retention would: its first segment is deleted, the
damage forgotten, haStatus and the metrics count it as expired, a pull below the queue's
new minimum is told to move on, and everything the master still holds stays on the slave.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from pathlib import Path

from ledgermq.net.client import RemotingClient
from ledgermq.protocol.codes import RequestCode, ResponseCode
from ledgermq.protocol.command import RemotingCommand
from ledgermq.testing.ports import free_port
from tests.compat.cluster import wait_until
from tests.ha.process_group import SEG, BrokerProc, open_store, queue_bodies
from tests.ha.test_repair_process import (
    FLIP_AT,
    MESSAGES,
    QUEUES,
    TOPIC,
    body,
    flip,
    ha_status,
    metrics,
    pull_one,
    record_at,
    segment0,
    send_all,
    start_pair,
)


def _trigger_retention(b: BrokerProc) -> None:
    async def run() -> None:
        client = RemotingClient(connect_timeout=2.0)
        try:
            resp = await client.invoke(b.addr, RemotingCommand.request(RequestCode.TRIGGER_DELETE_FILES, {}), 5.0)
            assert resp.code == ResponseCode.SUCCESS, resp.remark
        finally:
            await client.close()

    asyncio.run(run())


def test_a_slave_lets_go_of_damage_its_masters_retention_deleted_and_keeps_the_rest(tmp_path: Path) -> None:
    not_now = f"{(dt.datetime.now().hour + 12) % 24:02d}"  # retention runs only when asked
    metrics_port = free_port()
    group, master, slave = start_pair(tmp_path, fileReservedTime=0, deleteWhen=not_now)
    slave.props["metricsPort"] = metrics_port
    slave.conf.write_text("".join(f"{k}={v}\n" for k, v in slave.props.items()))
    try:
        acked = send_all(master, range(MESSAGES))
        group.wait_caught_up(master, [slave], 30)
        assert group.stop(slave) == 0, group.explain()
        damaged_queue, damaged_offset, _ = record_at(slave, FLIP_AT)
        flip(segment0(slave), FLIP_AT)
        _trigger_retention(master)  # the slave is away: nothing holds the master's first segment back
        wait_until("the master's retention to delete its first segment", lambda: not segment0(master).exists(), 20,
                   0.2, group.explain)  # fmt: skip

        group.start(slave)
        wait_until(
            "the slave to let the expired damage go",
            lambda: (st := ha_status(group, slave)).repairs_expired == 1 and not st.damaged_ranges,
            20,
            0.2,
            group.explain,
        )
        st = ha_status(group, slave)
        assert st.unrepaired == [] and st.repair_bytes_expired > 0 and st.client.truncations == 0, st
        assert st.last_repair.startswith("let [") and f"log starts at {SEG}" in st.last_repair, st.last_repair
        assert not segment0(slave).exists()
        assert "ledgermq_ha_repairs_total{" in (text := metrics(metrics_port)) and 'direction="expired"' in text
        slave_log = (slave.store_dir.parent / "broker.log").read_text(errors="replace")
        assert "was expired by the group" in slave_log, slave_log[-3000:]

        # A consumer of the slave is told the offset is too small, as below any queue's minimum: a slave
        # names its minimum and sends the consumer to the master (RocketMQ's offsetCheckInSlave=false),
        # whose answer moves it on. Not refused forever.
        moved = pull_one(slave, damaged_queue, damaged_offset)
        assert moved.code == ResponseCode.PULL_OFFSET_MOVED and moved.remark == "OFFSET_TOO_SMALL", moved.remark
        low = int(moved.ext_fields["minOffset"])
        assert low > damaged_offset and moved.ext_fields["suggestWhichBrokerId"] == "0", moved.ext_fields
        on_master = pull_one(master, damaged_queue, damaged_offset)
        assert on_master.code == ResponseCode.PULL_OFFSET_MOVED and int(on_master.ext_fields["nextBeginOffset"]) == low
        served = pull_one(slave, damaged_queue, low)
        assert served.code == ResponseCode.SUCCESS and served.body, (served.code, served.remark)

        # The group goes on; the master says it cannot repair the range at most once (this one connection).
        more = send_all(master, range(MESSAGES, MESSAGES + 200))
        group.wait_caught_up(master, [slave], 20)
        master_log = (master.store_dir.parent / "broker.log").read_text(errors="replace")
        assert master_log.count("damaged and we cannot repair it") <= 1, master_log[-3000:]
        assert group.stop(slave) == 0 and group.stop(master) == 0, group.explain()
    finally:
        group.close()
    # Everything the master still holds is on the slave, byte for byte, and served.
    assert master.commitlog_files() == slave.commitlog_files()
    store = open_store(slave)
    try:
        assert store.damaged_ranges() == []
        got = {q: queue_bodies(store, TOPIC, q) for q in range(QUEUES)}
        low = {q: store.min_offset_in_queue(TOPIC, q) for q in range(QUEUES)}
    finally:
        store.shutdown()
    kept = {seq: qo for seq, qo in {**acked, **more}.items() if qo[1] >= low[qo[0]]}
    assert len(kept) >= len(more)
    missing = [seq for seq, (q, off) in sorted(kept.items()) if got[q].get(off) != body(seq)]
    assert not missing, f"{len(missing)} acknowledged sends the master still holds are not on the slave: {missing[:10]}"
