"""Metrics an operator alerts on, from a real master and slave: messages in and out, consumer
lag, request latency by code, labels that tell master and slave apart; and the consume
statistics of brokerStatus / VIEW_BROKER_STATS_DATA."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

from ledgermq.broker.app import BrokerApp
from ledgermq.broker.metrics import (
    HA_ERROR_CONNECT,
    HA_ERROR_DIVERGED,
    HA_ERROR_NO_MASTER,
    HA_ERROR_NONE,
    ha_error_state,
)
from ledgermq.broker.stats import BrokerStats
from ledgermq.config import BrokerRole
from ledgermq.namesrv.app import NamesrvApp, NamesrvConfig
from ledgermq.net.client import RemotingClient
from ledgermq.protocol import fastjson
from ledgermq.protocol.codes import RequestCode, ResponseCode
from ledgermq.protocol.command import RemotingCommand
from ledgermq.testing.ports import free_port
from tests.broker.test_metrics import Samples, _broker, _one, _scrape, _send, _until

TOPIC = "MetricsTopic"
GROUP = "metrics-cg"
COMMIT_OFFSET, SUBSCRIPTION = 1, 4
DASHBOARD = Path(__file__).resolve().parents[2] / "conf" / "grafana-ledgermq.json"


async def _pull(client: RemotingClient, broker: BrokerApp, queue_id: int, offset: int, commit: int) -> RemotingCommand:
    header = {
        "consumerGroup": GROUP,
        "topic": TOPIC,
        "queueId": queue_id,
        "queueOffset": offset,
        "maxMsgNums": 32,
        "sysFlag": SUBSCRIPTION | (COMMIT_OFFSET if commit >= 0 else 0),
        "commitOffset": max(commit, 0),
        "suspendTimeoutMillis": 0,
        "subscription": "*",
        "subVersion": 0,
    }
    return await client.invoke(broker.config.broker_addr, RemotingCommand.request(RequestCode.PULL_MESSAGE, header), 10)


def _sum(samples: Samples, name: str, **labels: str) -> float:
    return sum(v for lbl, v in samples.get(name, []) if all(lbl.get(k) == w for k, w in labels.items()))


def _histogram_count(samples: Samples, code: str) -> float:
    return _sum(samples, "ledgermq_request_duration_seconds_count", code=code)


def test_traffic_lag_requests_and_consume_stats(tmp_path: Path) -> None:
    async def run() -> None:
        ns = NamesrvApp(NamesrvConfig(listen_host="127.0.0.1", listen_port=0, kv_config_path=""))
        await ns.start()
        namesrv = f"127.0.0.1:{ns.port}"
        m_port, s_port = free_port(), free_port()
        master = _broker(tmp_path / "m", namesrv, 0, BrokerRole.SYNC_MASTER, m_port)
        slave = _broker(tmp_path / "s", namesrv, 1, BrokerRole.SLAVE, s_port)
        client = RemotingClient()
        try:
            await master.start()
            await slave.start()
            ha = master.broker.ha
            assert ha is not None
            await _until(lambda: any(s.connected for s in ha.status()), 20, "the slave to connect")
            before = await _scrape(m_port)
            sends_before = _histogram_count(before, "SEND_MESSAGE_V2")
            for i in range(8):  # two per queue
                assert (await _send(client, master, i)).code == ResponseCode.SUCCESS
            store = master.broker.store
            await _until(lambda: store.dispatch_behind_bytes == 0, 10, "the dispatch")

            m = await _scrape(m_port)
            assert _one(m, "ledgermq_messages_in_total", topic=TOPIC) == 8
            assert _one(m, "ledgermq_bytes_in_total", topic=TOPIC) > 8 * len(b"message 0")
            assert _histogram_count(m, "SEND_MESSAGE_V2") == sends_before + 8
            assert _one(m, "ledgermq_request_duration_seconds_count", code="SEND_MESSAGE_V2", status="SUCCESS") >= 8
            buckets = [
                v for lbl, v in m["ledgermq_request_duration_seconds_bucket"] if lbl["code"] == "SEND_MESSAGE_V2"
            ]
            assert max(buckets) == _histogram_count(m, "SEND_MESSAGE_V2")  # +Inf holds them all
            assert _one(m, "ledgermq_ha_replication_wait_seconds_count") == 8  # SYNC_MASTER waited 8 times
            assert _one(m, "ledgermq_commitlog_flush_seconds_count") >= 0
            assert 0 < _one(m, "ledgermq_store_disk_used_ratio") <= 1
            assert _one(m, "ledgermq_store_commitlog_size_bytes") == 256 * 1024
            for lbl, _ in (s for fam in m.values() for s in fam):
                assert {"cluster", "broker", "broker_id"} <= lbl.keys(), lbl
            assert "ledgermq_consumer_lag_messages" not in m  # no group has committed yet

            # First pulls commit offset 0 (nothing consumed yet): the group's lag is all 8.
            for q in range(4):
                resp = await _pull(client, master, q, 0, commit=0)
                assert resp.code == ResponseCode.SUCCESS
            m = await _scrape(m_port)
            assert _one(m, "ledgermq_messages_out_total", topic=TOPIC, group=GROUP) == 8
            assert _one(m, "ledgermq_bytes_out_total", topic=TOPIC, group=GROUP) == _one(
                m, "ledgermq_bytes_in_total", topic=TOPIC
            )
            assert _one(m, "ledgermq_consumer_lag_messages", group=GROUP, topic=TOPIC) == 8
            assert _one(m, "ledgermq_consumer_queue_lag_messages", group=GROUP, topic=TOPIC, queue="1") == 2
            assert _histogram_count(m, "PULL_MESSAGE") == 4

            for i in range(8, 12):  # one more per queue: lag goes up
                assert (await _send(client, master, i)).code == ResponseCode.SUCCESS
            await _until(lambda: store.dispatch_behind_bytes == 0, 10, "the dispatch")
            assert _one(await _scrape(m_port), "ledgermq_consumer_lag_messages", group=GROUP, topic=TOPIC) == 12

            for q in range(4):  # consume the rest, then commit everything
                assert (await _pull(client, master, q, 2, commit=-1)).code == ResponseCode.SUCCESS
                assert (await _pull(client, master, q, 3, commit=3)).code == ResponseCode.PULL_NOT_FOUND
            m = await _scrape(m_port)
            assert _one(m, "ledgermq_consumer_lag_messages", group=GROUP, topic=TOPIC) == 0
            assert _sum(m, "ledgermq_consumer_queue_lag_messages", group=GROUP) == 0
            assert _one(m, "ledgermq_messages_out_total", topic=TOPIC, group=GROUP) == 12
            assert _one(m, "ledgermq_pull_results_total", result="found") == 8
            assert _one(m, "ledgermq_pull_results_total", result="miss") == 4
            assert _one(m, "ledgermq_request_duration_seconds_count", code="PULL_MESSAGE", status="PULL_NOT_FOUND") == 4

            # Master and slave are told apart by broker_id; they share cluster and broker.
            s = await _scrape(s_port)
            m_lbl = m["ledgermq_commitlog_max_offset"][0][0]
            s_lbl = s["ledgermq_commitlog_max_offset"][0][0]
            assert m_lbl == {"cluster": "DefaultCluster", "broker": "broker-a", "broker_id": "0"}
            assert s_lbl == {**m_lbl, "broker_id": "1"}
            assert _one(s, "ledgermq_ha_client_error_state") == HA_ERROR_NONE
            assert all("last_error" not in lbl for lbl, _ in s["ledgermq_ha_client_errors"])

            # Consume statistics: brokerStatus and VIEW_BROKER_STATS_DATA.
            master.broker.stats.tick()
            info = await client.invoke(
                master.config.broker_addr, RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO), 10
            )
            table = fastjson.loads(info.body)["table"]
            assert int(table["msgGetTotalTodayNow"]) == 12
            assert int(table["msgPutTotalTodayNow"]) == 12
            for key in ("getTotalTps", "getTransferedTps", "putTps", "getFoundTps", "getMissTps"):
                assert len([float(x) for x in table[key].split(" ")]) == 3
            view = await client.invoke(
                master.config.broker_addr,
                RemotingCommand.request(
                    RequestCode.VIEW_BROKER_STATS_DATA, {"statsName": "GROUP_GET_NUMS", "statsKey": f"{TOPIC}@{GROUP}"}
                ),
                10,
            )
            assert view.code == ResponseCode.SUCCESS, view.remark
            assert set(fastjson.loads(view.body)) == {"statsMinute", "statsHour", "statsDay"}
            missing = await client.invoke(
                master.config.broker_addr,
                RemotingCommand.request(
                    RequestCode.VIEW_BROKER_STATS_DATA, {"statsName": "GROUP_GET_NUMS", "statsKey": "x@y"}
                ),
                10,
            )
            assert missing.code == ResponseCode.SYSTEM_ERROR and "not exist" in (missing.remark or "")

            who = await client.invoke(
                master.config.broker_addr,
                RemotingCommand.request(RequestCode.QUERY_TOPIC_CONSUME_BY_WHO, {"topic": TOPIC}),
                10,
            )
            assert who.code == ResponseCode.SUCCESS and fastjson.loads(who.body)["groupList"] == [GROUP]

            # The dashboard only asks for metrics a broker exports.
            names = {n.removesuffix(suf) for n in {*m, *s} for suf in ("_bucket", "_count", "_sum", "")}
            dashboard = json.loads(DASHBOARD.read_text())
            exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
            assert len(exprs) >= 8
            used = {w for e in exprs for w in re.findall(r"\bledgermq_[a-z_]+", e)}
            assert used, exprs
            # DLedger figures are checked against a DLedger group in tests/ha/test_dledger_ops.py.
            missing_names = sorted(u for u in used if u not in names and not u.startswith("ledgermq_dledger_"))
            assert not missing_names, missing_names
        finally:
            await client.close()
            await slave.stop()
            await master.stop()
            await ns.stop()

    asyncio.run(run())


def test_ha_error_state_is_a_number_per_kind() -> None:
    assert ha_error_state("", False) == HA_ERROR_NONE
    assert ha_error_state("no master HA address known yet", False) == HA_ERROR_NO_MASTER
    assert ha_error_state("ConnectionRefusedError: [Errno 111] Connect call failed", False) == HA_ERROR_CONNECT
    assert ha_error_state("our log is ahead of or diverged from the master's", False) == HA_ERROR_DIVERGED
    assert ha_error_state("", True) == HA_ERROR_DIVERGED


def test_stats_windows_and_bounds() -> None:
    now = [1_000_000]
    stats = BrokerStats(now_ms=lambda: now[0])
    stats.count_put("T", 2, 100)
    stats.tick()
    for _ in range(6):
        now[0] += 10_000
        stats.count_put("T", 1, 50)
        stats.count_get("T", "g", 3, 30)
        stats.count_get("T", "g", 0, 0)
        stats.tick()
    minute = stats.key_stats("TOPIC_PUT_NUMS", "T")
    assert minute is not None and minute[0].sum == 6 and abs(minute[0].tps - 0.1) < 1e-9
    size = stats.key_stats("TOPIC_PUT_SIZE", "T")
    assert size is not None and size[0].sum == 300 and size[0].avgpt == 50
    assert stats.tps(1, 60) == 0.1 and stats.tps(2, 60) == 0.3
    # All 18 of the group's messages over 50 s: its first pull, counted before the item's
    # first sample, is in the window (the ring starts with a zero sample).
    assert abs(stats.group_get_tps("T", "g") - 0.36) < 1e-9 and stats.group_get_tps("T", "h") == 0.0
    assert stats.get_found == 6 and stats.get_miss == 6 and stats.get_msgs == 18
    assert stats.key_stats("NOPE", "T") is None and stats.key_stats("GROUP_GET_NUMS", "T@h") is None
    small = BrokerStats()
    small.settings = type(small.settings)(max_keys=2)
    for t in ("a", "b", "c", "d"):
        small.count_put(t, 1, 1)
    assert sorted(small.topic_put) == ["__other__", "a", "b"] and small.topic_put["__other__"].nums == 2
