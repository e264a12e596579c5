"""Controller mode, allAckInSyncStateSet: a slave's fault between real processes.

minInSyncReplicas=1: a paused slave (SIGSTOP, its connection open) holds sends back only until the master drops it
from the SyncStateSet (haMaxTimeSlaveNotCatchup, 1 s here) and the controller agrees; sends waiting meanwhile are
then answered SEND_OK. After SIGCONT the slave catches up and joins again. minInSyncReplicas=2: once the slave is
gone (kill -9) and the set shrank to the master alone, sends are refused ("in-sync replicas not enough", RocketMQ's
SYSTEM_ERROR) and nothing is stored.
"""

from __future__ import annotations

import asyncio
import time
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from ledgermq.admin.client import AdminClient
from ledgermq.admin.model import HARuntimeInfo
from ledgermq.net.client import RemotingClient
from ledgermq.protocol.codes import ResponseCode
from ledgermq.testing.ports import free_port
from tests.compat.cluster import wait_until
from tests.ha.controller_group import ControllerGroup
from tests.ha.process_group import BrokerProc, send_raw

TOPIC = "CtlSlaveFaultTopic"
MAX_LAG_S = 1.0


def send(b: BrokerProc, text: str) -> tuple[int, str, float]:
    async def run() -> tuple[int, str, float]:
        client = RemotingClient(connect_timeout=1.0)
        started = time.monotonic()
        try:
            resp = await send_raw(client, b, TOPIC, 0, text.encode())
            return resp.code, resp.remark or "", time.monotonic() - started
        finally:
            await client.close()

    return asyncio.run(run())


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Controller-mode and in-sync samples, keyed by name and the labels beyond cluster/broker/broker_id."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=3) as resp:
        text = resp.read().decode()
    base = ("cluster", "broker", "broker_id")
    return {
        (s.name, tuple(sorted((k, v) for k, v in s.labels.items() if k not in base))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name.startswith(("ledgermq_controller_mode_", "ledgermq_ha_slave_in_sync", "ledgermq_ha_in_sync"))
    }


def ha_status(group: ControllerGroup, b: BrokerProc) -> HARuntimeInfo:
    async def ask() -> HARuntimeInfo:
        async with AdminClient(group.namesrv_addr, timeout=2.0) as admin:
            return await admin.ha_status(b.addr)

    return asyncio.run(ask())


def test_a_paused_slave_is_dropped_and_writes_resume_within_the_lag_limit(tmp_path: Path) -> None:
    group = ControllerGroup(tmp_path, allAckInSyncStateSet="true", haMaxTimeSlaveNotCatchup=int(MAX_LAG_S * 1000))
    metrics_port = free_port()
    a = group.add_broker("a", metricsPort=metrics_port)
    b = group.add_broker("b")
    try:
        group.start_pair(a, b)
        assert send(a, "both hold it")[0] == ResponseCode.SUCCESS
        group.pause(b)
        code, remark, took = send(a, "waits for the paused slave")
        print(f"\nslave paused -> send answered after {took * 1000:.0f} ms")
        assert code == ResponseCode.SUCCESS, (code, remark)
        assert took < MAX_LAG_S + 1.0  # the limit and the controller's answer (1.003-1.006 s quiet), room for load
        assert group.info(a)["syncStateSet"] == group.info(a)["brokerControllerId"]
        assert send(a, "master alone")[0] == ResponseCode.SUCCESS
        # the paused slave is still connected and one message behind (in sync by master-slave mode's lag rule),
        # but out of the SyncStateSet: haStatus and the metrics say so
        (conn,) = ha_status(group, a).connections
        assert conn.connected and not conn.in_sync, conn
        m = scrape(metrics_port)
        slave = (("slave", conn.addr),)
        assert m[("ledgermq_ha_slave_in_sync", slave)] == 0 and m[("ledgermq_ha_in_sync_slaves", ())] == 0
        assert m[("ledgermq_controller_mode_role", (("role", "MASTER"),))] == 1
        assert m[("ledgermq_controller_mode_role", (("role", "SLAVE"),))] == 0
        assert m[("ledgermq_controller_mode_master_epoch", ())] == 1
        assert m[("ledgermq_controller_mode_sync_state_set_size", ())] == 1
        assert m[("ledgermq_controller_mode_sync_state_set_epoch", ())] >= 2  # the join, then the drop
        assert m[("ledgermq_controller_mode_sync_state_set_changes_total", (("result", "accepted"),))] >= 2
        assert 0 < m[("ledgermq_controller_mode_lease_remaining_seconds", ())] <= 0.6
        assert m[("ledgermq_controller_mode_elections_seen_total", ())] == 0
        group.resume(b)
        group.wait_sync_state_set(a, 2)
        wait_until("the slave in sync again", lambda: ha_status(group, a).in_sync_slave_nums == 1, 5)
        m = scrape(metrics_port)
        assert m[("ledgermq_controller_mode_sync_state_set_size", ())] == 2
        assert m[("ledgermq_ha_slave_in_sync", slave)] == 1
    finally:
        group.close()


def test_with_min_in_sync_replicas_2_a_lost_slave_stops_writes_loudly(tmp_path: Path) -> None:
    group = ControllerGroup(tmp_path, allAckInSyncStateSet="true", minInSyncReplicas=2)
    a = group.add_broker("a")
    b = group.add_broker("b")
    try:
        group.start_namesrv()
        group.start_broker(a, "MASTER")
        code, remark, _ = send(a, "alone before any slave")
        assert code == ResponseCode.SYSTEM_ERROR and "in-sync replicas not enough" in remark, (code, remark)
        group.start_broker(b, "SLAVE")
        group.wait_sync_state_set(a, 2)
        assert send(a, "two replicas")[0] == ResponseCode.SUCCESS
        before = group.max_offset(a)
        group.kill(b)
        group.wait_sync_state_set(a, 1, timeout=5)
        code, remark, _ = send(a, "refused")
        assert code == ResponseCode.SYSTEM_ERROR and "in-sync replicas not enough" in remark, (code, remark)
        assert "minInSyncReplicas=2" in remark
        assert group.max_offset(a) == before  # refused, not stored
    finally:
        group.close()
