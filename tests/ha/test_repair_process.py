"""Issue #23 ("disks that lie") with real processes: a corrupt range in a sealed commit-log segment is
repaired from the healthy replica of a master-slave group, never skipped and never truncated.

A name server, a SYNC_MASTER and its slave, 1 MiB segments, a few thousand acknowledged sends; then 64 bytes
are flipped in the middle of the first (sealed) segment: on the master after a clean stop, on the slave
after a clean stop, or in a running master's file (found by the scrub). Before repairs the restarted master
cut its log at the flip and dropped every acknowledged message after it, then told its slave to truncate
the same bytes. Now:

* the damaged range is refused (a pull of it is an error, not a skip) until a replica's bytes repair it;
* the repair happens through the HA handshake within seconds of the slave (re)connecting, with no
  truncation on either side, and shows in ``admin haStatus`` and the metrics;
* afterwards every acknowledged message is served again, content for content, and both commit logs are
  byte-identical.
"""

from __future__ import annotations

import asyncio
import os
import struct
import urllib.request
from pathlib import Path

from ledgermq.admin.client import AdminClient
from ledgermq.admin.model import HARuntimeInfo
from ledgermq.net.client import RemotingClient
from ledgermq.protocol.codes import RequestCode, ResponseCode
from ledgermq.protocol.command import RemotingCommand
from ledgermq.protocol.message import decode_record
from ledgermq.testing.ports import free_port
from tests.compat.cluster import wait_until
from tests.ha.process_group import SEG, BrokerProc, HAGroup, open_store, queue_bodies, send_raw

TOPIC = "RotTopic"
QUEUES = 4
MESSAGES = 3000  # ~1.6 MB: segment 0 is sealed, segment 1 holds the rest
FLIP_AT = SEG // 2
FLIP = 64


def body(seq: int) -> bytes:
    return f"rot-{seq:06d}-".encode() + b"z" * 400


def send_all(b: BrokerProc, seqs: range) -> dict[int, tuple[int, int]]:
    """Sends, 16 in flight; seq -> (queueId, queueOffset) of each SEND_OK (every one must be)."""

    async def run() -> dict[int, tuple[int, int]]:
        client = RemotingClient(connect_timeout=2.0)
        acked: dict[int, tuple[int, int]] = {}

        async def one(seq: int) -> None:
            resp = await send_raw(client, b, TOPIC, seq % QUEUES, body(seq))
            assert resp.code == ResponseCode.SUCCESS, (seq, resp.code, resp.remark)
            acked[seq] = (int(resp.ext_fields["queueId"]), int(resp.ext_fields["queueOffset"]))

        try:
            for i in range(0, len(seqs), 16):
                await asyncio.gather(*(one(seq) for seq in seqs[i : i + 16]))
        finally:
            await client.close()
        return acked

    return asyncio.run(run())


def segment0(b: BrokerProc) -> Path:
    return b.store_dir / "commitlog" / f"{0:020d}"


def record_at(b: BrokerProc, offset: int) -> tuple[int, int, int]:
    """(queueId, queueOffset, physical start) of the record holding ``offset`` in a stopped broker's first segment."""
    data = segment0(b).read_bytes()
    pos = 0
    while True:
        (size,) = struct.unpack_from(">i", data, pos)
        if pos + size > offset:
            rec = decode_record(data[pos : pos + size], check_crc=True)
            return rec.queue_id, rec.queue_offset, pos
        pos += size


def flip(path: Path, at: int) -> None:
    """Invert FLIP bytes of the file at ``at`` (the file may be mapped by a running broker)."""
    fd = os.open(path, os.O_RDWR)
    try:
        old = os.pread(fd, FLIP, at)
        os.pwrite(fd, bytes(x ^ 0xFF for x in old), at)
    finally:
        os.close(fd)


def ha_status(group: HAGroup, b: BrokerProc) -> HARuntimeInfo:
    async def ask() -> HARuntimeInfo:
        async with AdminClient(group.namesrv_addr, timeout=3.0, connect_timeout=1.0) as admin:
            return await admin.ha_status(b.addr)

    return asyncio.run(ask())


def pull_one(b: BrokerProc, queue_id: int, queue_offset: int) -> RemotingCommand:
    async def run() -> RemotingCommand:
        client = RemotingClient(connect_timeout=2.0)
        try:
            pull = RemotingCommand.request(
                RequestCode.PULL_MESSAGE,
                {"consumerGroup": "rot-cg", "topic": TOPIC, "queueId": queue_id, "queueOffset": queue_offset,
                 "maxMsgNums": 1, "sysFlag": 4, "commitOffset": 0, "suspendTimeoutMillis": 0, "subscription": "*",
                 "subVersion": 0},
            )  # fmt: skip
            return await client.invoke(b.addr, pull, 5.0)
        finally:
            await client.close()

    return asyncio.run(run())


def metrics(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=3) as resp:
        return str(resp.read().decode())


def repaired(group: HAGroup, b: BrokerProc) -> bool:
    try:
        st = ha_status(group, b)
    except Exception:
        return False
    return st.repairs_taken >= 1 and not st.damaged_ranges


def assert_every_ack_served_and_logs_identical(
    master: BrokerProc, slave: BrokerProc, acked: dict[int, tuple[int, int]]
) -> None:
    assert master.commitlog_files() == slave.commitlog_files(), "master and slave commit logs differ"
    for b in (master, slave):
        store = open_store(b)
        try:
            assert store.damaged_ranges() == [], f"{b.name} still has damaged ranges"
            served = {q: queue_bodies(store, TOPIC, q) for q in range(QUEUES)}
        finally:
            store.shutdown()
        missing = [seq for seq, (q, off) in sorted(acked.items()) if served[q].get(off) != body(seq)]
        assert not missing, f"{b.name}: {len(missing)} of {len(acked)} acknowledged sends not served: {missing[:20]}"


def start_pair(tmp_path: Path, **master_props: object) -> tuple[HAGroup, BrokerProc, BrokerProc]:
    group = HAGroup(tmp_path)
    master = group.add("m", 0, "SYNC_MASTER", **master_props)
    slave = group.add("s", 1, "SLAVE")
    group.start_namesrv()
    group.start(master)
    group.start(slave)
    wait_until("the slave to attach", lambda: ha_status(group, master).in_sync_slave_nums == 1, 20, 0.2, group.explain)
    return group, master, slave


def test_a_master_restarted_with_a_flipped_sealed_segment_gets_the_range_back_from_its_slave(tmp_path: Path) -> None:
    metrics_port = free_port()
    group, master, slave = start_pair(tmp_path, metricsPort=metrics_port)
    try:
        acked = send_all(master, range(MESSAGES))
        end = group.wait_caught_up(master, [slave], 30)
        assert end > SEG + SEG // 2
        assert group.stop(slave) == 0 and group.stop(master) == 0, group.explain()

        queue_id, queue_offset, record_start = record_at(master, FLIP_AT)
        flip(segment0(master), FLIP_AT)
        group.start(master)  # alone: a clean stop, so it takes writes at once
        st = ha_status(group, master)
        assert len(st.damaged_ranges) == 1, st
        bad_start, bad_end = st.damaged_ranges[0]
        assert bad_start <= FLIP_AT and bad_end >= FLIP_AT + FLIP, st.damaged_ranges
        assert group.max_offset(master) == end  # nothing after the flip was cut
        refused = pull_one(master, queue_id, queue_offset)
        assert refused.code != ResponseCode.SUCCESS and "corrupt" in (refused.remark or ""), (
            refused.code,
            refused.remark,
        )
        assert st.unrepaired and st.unrepaired[0].startswith("no replica holds ["), st.unrepaired
        text = metrics(metrics_port)
        for gauge in ("ledgermq_store_damaged_ranges{", "ledgermq_ha_unrepaired_ranges{"):
            assert any(line.startswith(gauge) and line.endswith(" 1.0") for line in text.splitlines()), text

        group.start(slave)
        wait_until("the master's repair", lambda: repaired(group, master), 20, 0.2, group.explain)
        st = ha_status(group, master)
        # (the scrub may have widened the range to its digest block meanwhile: one range, repaired at once)
        assert st.repairs_taken == 1 and st.repair_bytes_taken >= bad_end - bad_start and st.unrepaired == []
        assert st.last_repair.startswith(f"took [{bad_start}, ") and " from slave " in st.last_repair, st.last_repair
        text = metrics(metrics_port)
        assert any(
            line.startswith("ledgermq_ha_repairs_total{") and 'direction="taken"' in line and line.endswith(" 1.0")
            for line in text.splitlines()
        ), text
        again = pull_one(master, queue_id, queue_offset)
        assert again.code == ResponseCode.SUCCESS and again.body, (again.code, again.remark)
        assert decode_record(again.body, check_crc=True).physical_offset == record_start
        s_st = ha_status(group, slave)
        assert s_st.client.truncations == 0 and s_st.client.truncated_bytes == 0

        acked.update(send_all(master, range(MESSAGES, MESSAGES + 20)))  # the pair goes on
        group.wait_caught_up(master, [slave], 20)
        assert group.stop(slave) == 0 and group.stop(master) == 0, group.explain()
    finally:
        group.close()
    assert_every_ack_served_and_logs_identical(master, slave, acked)


def test_a_slave_restarted_with_a_flipped_sealed_segment_repairs_it_from_its_master(tmp_path: Path) -> None:
    group, master, slave = start_pair(tmp_path)
    try:
        acked = send_all(master, range(MESSAGES))
        group.wait_caught_up(master, [slave], 30)
        assert group.stop(slave) == 0, group.explain()
        flip(segment0(slave), FLIP_AT)
        group.start(slave)
        wait_until("the slave's repair", lambda: repaired(group, slave), 20, 0.2, group.explain)
        st = ha_status(group, slave)
        assert st.client.truncations == 0 and st.repairs_taken == 1, st
        assert st.last_repair.startswith("took [") and f"from master {master.props['brokerIP1']}:" in st.last_repair
        assert ha_status(group, master).repairs_given == 1
        group.wait_caught_up(master, [slave], 20)
        assert group.stop(slave) == 0 and group.stop(master) == 0, group.explain()
    finally:
        group.close()
    assert_every_ack_served_and_logs_identical(master, slave, acked)


def test_a_flip_in_a_running_masters_sealed_segment_is_found_by_the_scrub_and_repaired(tmp_path: Path) -> None:
    group, master, slave = start_pair(tmp_path, storeScrubIntervalSeconds=1, storeScrubBytesPerSecond=64 << 20)
    try:
        acked = send_all(master, range(MESSAGES))
        group.wait_caught_up(master, [slave], 30)
        digest = master.store_dir / "digests" / "commitlog" / f"{0:020d}.crc"
        wait_until("the sealed segment's digest", digest.exists, 20, 0.1, group.explain)  # written from healthy bytes
        flip(segment0(master), FLIP_AT)  # no restart: the running master finds it itself
        wait_until("the scrub to find it and the slave to return it", lambda: repaired(group, master), 30, 0.2,
                   group.explain)  # fmt: skip
        st = ha_status(group, master)
        assert st.repairs_taken == 1 and st.unrepaired == [] and ha_status(group, slave).client.truncations == 0
        assert segment0(master).read_bytes() == segment0(slave).read_bytes()
        assert group.stop(slave) == 0 and group.stop(master) == 0, group.explain()
    finally:
        group.close()
    assert_every_ack_served_and_logs_identical(master, slave, acked)


def test_a_master_whose_first_segment_was_deleted_gets_it_back_from_its_slave(tmp_path: Path) -> None:
    """The 100-cycle segment-loss run's data loss: a stopped master's first segment deleted
    looked like retention, so the master began its log one segment later and its 857
    acknowledged messages there were gone, silently. Now the commit log's recorded start
    makes the missing file damage: refused, repaired from the slave, every ack served."""
    group, master, slave = start_pair(tmp_path)
    try:
        acked = send_all(master, range(MESSAGES))
        group.wait_caught_up(master, [slave], 30)
        assert group.stop(slave) == 0 and group.stop(master) == 0, group.explain()
        queue_id, queue_offset, _ = record_at(master, 0)
        segment0(master).unlink()
        group.start(master)
        st = ha_status(group, master)
        assert st.damaged_ranges == [(0, SEG)], st.damaged_ranges
        refused = pull_one(master, queue_id, queue_offset)
        assert refused.code != ResponseCode.SUCCESS and "corrupt" in (refused.remark or ""), refused.remark

        group.start(slave)
        wait_until("the master's repair", lambda: repaired(group, master), 20, 0.2, group.explain)
        again = pull_one(master, queue_id, queue_offset)
        assert again.code == ResponseCode.SUCCESS and again.body, (again.code, again.remark)
        group.wait_caught_up(master, [slave], 20)
        assert group.stop(slave) == 0 and group.stop(master) == 0, group.explain()
    finally:
        group.close()
    assert_every_ack_served_and_logs_identical(master, slave, acked)
