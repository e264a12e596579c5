"""RouteInfo (RocketMQ RouteInfoManager) as a pure, clock-free table: every call gets now_ms.

Behaviour checked against J namesrv/routeinfo/RouteInfoManager.java (4.9.7): only masters
write queue data (on first registration or a new DataVersion), an address lives under one
id only, a slave learns its live master's HA and broker address, expiry is strict
(now - last > expiry), and a broker group's queues go when its last address goes.
"""

from __future__ import annotations

from ledgermq.namesrv.routeinfo import RegisterResult, RouteInfo
from ledgermq.protocol.route import BrokerData, DataVersion, QueueData, TopicConfig, TopicRouteData

CLUSTER = "DefaultCluster"
A0, A1 = "10.0.0.1:10911", "10.0.0.2:10911"
B0 = "10.0.1.1:10911"
V1 = DataVersion(1_700_000_000_000, 1)
V2 = DataVersion(1_700_000_000_500, 2)


def topics(**specs: tuple[int, int, int]) -> dict[str, TopicConfig]:
    """topics(T=(read, write, perm)) -> topic config table."""
    return {name: TopicConfig(name, r, w, p) for name, (r, w, p) in specs.items()}


def reg(
    ri: RouteInfo,
    addr: str,
    *,
    name: str = "broker-a",
    bid: int = 0,
    cluster: str = CLUSTER,
    tcs: dict[str, TopicConfig] | None = None,
    version: DataVersion = V1,
    now: int = 1_000,
    conn: object | None = None,
) -> RegisterResult:
    return ri.register_broker(
        cluster=cluster,
        broker_addr=addr,
        broker_name=name,
        broker_id=bid,
        ha_server_addr=addr.replace(":10911", ":10912"),
        data_version=version,
        topic_configs=tcs if tcs is not None else topics(T=(4, 4, 6)),
        now_ms=now,
        connection_id=conn,
    )


# -- registration ------------------------------------------------------------------------
def test_master_registration_creates_queue_data_for_each_topic() -> None:
    ri = RouteInfo()
    result = reg(ri, A0, tcs=topics(T=(4, 4, 6), U=(8, 2, 4), TBW102=(8, 8, 7)))
    assert result == RegisterResult(None, None)
    assert ri.topic_queues == {
        "T": {"broker-a": QueueData("broker-a", 4, 4, 6, 0)},
        "U": {"broker-a": QueueData("broker-a", 8, 2, 4, 0)},
        "TBW102": {"broker-a": QueueData("broker-a", 8, 8, 7, 0)},
    }
    assert ri.brokers == {"broker-a": BrokerData(CLUSTER, "broker-a", {0: A0})}
    assert ri.clusters == {CLUSTER: {"broker-a"}}
    assert ri.live[A0].last_update_ms == 1_000
    assert ri.live[A0].data_version == V1
    assert ri.live[A0].ha_server_addr == "10.0.0.1:10912"


def test_master_without_topic_table_registers_address_only() -> None:
    ri = RouteInfo()
    reg(ri, A0, tcs={})
    assert ri.topic_queues == {}
    assert ri.brokers["broker-a"].broker_addrs == {0: A0}
    assert ri.route("T") is None


def test_slave_registration_does_not_touch_queues() -> None:
    ri = RouteInfo()
    # A slave alone: its topic table is ignored, no master to report.
    assert reg(ri, A1, bid=1, tcs=topics(T=(4, 4, 6))) == RegisterResult(None, None)
    assert ri.topic_queues == {}
    assert ri.brokers["broker-a"].broker_addrs == {1: A1}
    assert A1 in ri.live
    # With a master: the slave's different table still does not change the master's queues.
    reg(ri, A0, tcs=topics(T=(4, 4, 6)))
    reg(ri, A1, bid=1, tcs=topics(T=(16, 16, 6), Extra=(1, 1, 6)), version=V2)
    assert ri.topic_queues == {"T": {"broker-a": QueueData("broker-a", 4, 4, 6, 0)}}


def test_slave_registration_returns_the_live_masters_addresses() -> None:
    ri = RouteInfo(expiry_ms=10_000)
    reg(ri, A0, now=1_000)
    result = reg(ri, A1, bid=1, now=1_000)
    assert result == RegisterResult(ha_server_addr="10.0.0.1:10912", master_addr=A0)
    # The master stops registering and expires; the slave keeps going.
    reg(ri, A1, bid=1, now=9_000)
    assert ri.scan_not_active(now_ms=12_000) == [A0]
    assert reg(ri, A1, bid=1, now=12_500) == RegisterResult(None, None)
    # The master comes back.
    reg(ri, A0, now=13_000)
    assert reg(ri, A1, bid=1, now=13_100) == RegisterResult("10.0.0.1:10912", A0)


def test_master_registration_result_has_no_master_info() -> None:
    ri = RouteInfo()
    reg(ri, A1, bid=1)
    assert reg(ri, A0) == RegisterResult(None, None)


def test_promoted_slave_address_is_dropped_from_its_old_id() -> None:
    ri = RouteInfo()
    reg(ri, A0)
    reg(ri, A1, bid=1)
    assert ri.brokers["broker-a"].broker_addrs == {0: A0, 1: A1}
    # The old master is gone; the slave comes back as the master (same address, id 0).
    ri.remove_broker_addr(A0)
    reg(ri, A1, bid=0, tcs=topics(T=(4, 4, 6)), version=V2)
    assert ri.brokers["broker-a"].broker_addrs == {0: A1}
    assert ri.topic_queues["T"] == {"broker-a": QueueData("broker-a", 4, 4, 6, 0)}
    # And the other way round: a master re-registering as slave 2 leaves id 0 empty.
    reg(ri, A1, bid=2)
    assert ri.brokers["broker-a"].broker_addrs == {2: A1}


def test_unchanged_data_version_does_not_rewrite_queue_data() -> None:
    ri = RouteInfo()
    reg(ri, A0, tcs=topics(T=(4, 4, 6)), version=V1)
    # Same version, different table: a heartbeat-style re-registration; queues stay.
    reg(ri, A0, tcs=topics(T=(8, 8, 6), U=(2, 2, 6)), version=DataVersion(V1.timestamp, V1.counter), now=2_000)
    assert ri.topic_queues == {"T": {"broker-a": QueueData("broker-a", 4, 4, 6, 0)}}
    assert ri.live[A0].last_update_ms == 2_000
    assert not ri.is_topic_config_changed(A0, V1)
    # New version: the table is applied.
    assert ri.is_topic_config_changed(A0, V2)
    reg(ri, A0, tcs=topics(T=(8, 8, 6), U=(2, 2, 6)), version=V2, now=3_000)
    assert ri.topic_queues == {
        "T": {"broker-a": QueueData("broker-a", 8, 8, 6, 0)},
        "U": {"broker-a": QueueData("broker-a", 2, 2, 6, 0)},
    }
    assert ri.live[A0].data_version == V2
    # A timestamp-only change counts as a new version too (DataVersion.equals compares both).
    reg(ri, A0, tcs=topics(T=(1, 1, 6)), version=DataVersion(V2.timestamp + 1, V2.counter), now=4_000)
    assert ri.topic_queues["T"]["broker-a"].read_queue_nums == 1


def test_unknown_address_counts_as_changed() -> None:
    assert RouteInfo().is_topic_config_changed(A0, V1)


def test_first_registration_of_a_new_master_id_applies_its_table_even_with_a_known_version() -> None:
    """registerFirst covers a new id in an existing group (J: registerFirst || oldAddr == null)."""
    ri = RouteInfo()
    reg(ri, A1, bid=1, version=V1)
    reg(ri, A0, bid=0, version=V1, tcs=topics(T=(3, 3, 6)))
    assert ri.topic_queues["T"]["broker-a"] == QueueData("broker-a", 3, 3, 6, 0)


# -- liveness ------------------------------------------------------------------------------
def test_scan_not_active_removes_expired_brokers_and_their_queue_data() -> None:
    ri = RouteInfo(expiry_ms=1_000)
    reg(ri, A0, name="broker-a", tcs=topics(T=(4, 4, 6), OnlyA=(1, 1, 6)), now=0)
    reg(ri, B0, name="broker-b", tcs=topics(T=(2, 2, 6)), now=800)
    assert ri.scan_not_active(now_ms=1_000) == []  # exactly expiry_ms old: still alive
    assert ri.scan_not_active(now_ms=1_001) == [A0]
    assert A0 not in ri.live and B0 in ri.live
    assert "broker-a" not in ri.brokers
    assert ri.topic_queues == {"T": {"broker-b": QueueData("broker-b", 2, 2, 6, 0)}}
    assert ri.clusters == {CLUSTER: {"broker-b"}}
    assert ri.route("OnlyA") is None
    assert ri.scan_not_active(now_ms=1_801) == [B0]
    assert (ri.topic_queues, ri.brokers, ri.clusters, ri.live) == ({}, {}, {}, {})


def test_expired_master_with_live_slave_keeps_the_group_and_its_queues() -> None:
    ri = RouteInfo(expiry_ms=1_000)
    reg(ri, A0, now=0)
    reg(ri, A1, bid=1, now=900)
    assert ri.scan_not_active(now_ms=1_500) == [A0]
    assert ri.brokers["broker-a"].broker_addrs == {1: A1}
    assert "broker-a" in ri.topic_queues["T"]
    route = ri.route("T")
    assert route is not None and route.broker_datas[0].broker_addrs == {1: A1}


def test_on_connection_closed_removes_only_that_connections_brokers() -> None:
    ri = RouteInfo()
    conn_a, conn_b = object(), object()
    reg(ri, A0, name="broker-a", conn=conn_a)
    reg(ri, B0, name="broker-b", conn=conn_b)
    assert ri.on_connection_closed(object()) == []
    assert ri.on_connection_closed(conn_a) == [A0]
    assert set(ri.live) == {B0}
    assert set(ri.brokers) == {"broker-b"}
    assert ri.topic_queues == {"T": {"broker-b": QueueData("broker-b", 4, 4, 6, 0)}}


def test_a_broker_that_re_registered_on_a_new_connection_survives_the_old_ones_close() -> None:
    ri = RouteInfo()
    old, new = object(), object()
    reg(ri, A0, conn=old, now=1)
    reg(ri, A0, conn=new, now=2)
    assert ri.on_connection_closed(old) == []
    assert A0 in ri.live and ri.route("T") is not None


def test_unregister_broker() -> None:
    ri = RouteInfo()
    reg(ri, A0)
    reg(ri, A1, bid=1)
    ri.unregister_broker(cluster=CLUSTER, broker_addr=A1, broker_name="broker-a", broker_id=1)
    assert A1 not in ri.live
    assert ri.brokers["broker-a"].broker_addrs == {0: A0}
    assert "broker-a" in ri.topic_queues["T"]
    # An unregister whose address does not match the id's current address leaves the entry.
    ri.unregister_broker(cluster=CLUSTER, broker_addr="9.9.9.9:1", broker_name="broker-a", broker_id=0)
    assert ri.brokers["broker-a"].broker_addrs == {0: A0}
    # Unknown broker name: nothing happens.
    ri.unregister_broker(cluster=CLUSTER, broker_addr=B0, broker_name="nope", broker_id=0)
    ri.unregister_broker(cluster=CLUSTER, broker_addr=A0, broker_name="broker-a", broker_id=0)
    assert (ri.topic_queues, ri.brokers, ri.clusters, ri.live) == ({}, {}, {}, {})


# -- queries -------------------------------------------------------------------------------
def two_groups() -> RouteInfo:
    ri = RouteInfo()
    reg(ri, B0, name="broker-b", tcs=topics(T=(8, 8, 6), Bonly=(1, 1, 4)))
    reg(ri, A0, name="broker-a", tcs=topics(T=(4, 4, 6)))
    reg(ri, A1, name="broker-a", bid=1)
    reg(ri, "10.0.9.9:10911", name="broker-x", cluster="OtherCluster", tcs=topics(X=(2, 2, 6)))
    return ri


def test_route_for_two_broker_groups() -> None:
    route = two_groups().route("T")
    assert route is not None
    assert route.to_json() == {
        "brokerDatas": [
            {"brokerAddrs": {"0": A0, "1": A1}, "brokerName": "broker-a", "cluster": CLUSTER},
            {"brokerAddrs": {"0": B0}, "brokerName": "broker-b", "cluster": CLUSTER},
        ],
        "filterServerTable": {},
        "queueDatas": [
            {"brokerName": "broker-a", "perm": 6, "readQueueNums": 4, "topicSysFlag": 0, "writeQueueNums": 4},
            {"brokerName": "broker-b", "perm": 6, "readQueueNums": 8, "topicSysFlag": 0, "writeQueueNums": 8},
        ],
    }
    assert TopicRouteData.decode(route.encode()) == route
    assert two_groups().route("nope") is None


def test_route_is_a_copy() -> None:
    ri = two_groups()
    route = ri.route("T")
    assert route is not None
    route.queue_datas[0].perm = 0
    route.broker_datas[0].broker_addrs.clear()
    again = ri.route("T")
    assert again is not None
    assert again.queue_datas[0].perm == 6 and again.broker_datas[0].broker_addrs == {0: A0, 1: A1}


def test_cluster_info_and_topic_lists() -> None:
    ri = two_groups()
    assert ri.cluster_info() == {
        "brokerAddrTable": {
            "broker-a": {"brokerAddrs": {"0": A0, "1": A1}, "brokerName": "broker-a", "cluster": CLUSTER},
            "broker-b": {"brokerAddrs": {"0": B0}, "brokerName": "broker-b", "cluster": CLUSTER},
            "broker-x": {
                "brokerAddrs": {"0": "10.0.9.9:10911"},
                "brokerName": "broker-x",
                "cluster": "OtherCluster",
            },
        },
        "clusterAddrTable": {CLUSTER: ["broker-a", "broker-b"], "OtherCluster": ["broker-x"]},
    }
    assert ri.topic_list() == ["Bonly", "T", "X"]
    assert ri.topics_by_cluster(CLUSTER) == ["Bonly", "T"]
    assert ri.topics_by_cluster("OtherCluster") == ["X"]
    assert ri.topics_by_cluster("NoSuchCluster") == []


def test_set_write_perm() -> None:
    ri = two_groups()
    assert ri.set_write_perm("broker-b", writable=False) == 2  # T and Bonly
    assert ri.topic_queues["T"]["broker-b"].perm == 4
    assert ri.topic_queues["Bonly"]["broker-b"].perm == 4
    assert ri.topic_queues["T"]["broker-a"].perm == 6  # other groups untouched
    assert ri.set_write_perm("broker-b", writable=True) == 2
    assert ri.topic_queues["T"]["broker-b"].perm == 6
    assert ri.topic_queues["Bonly"]["broker-b"].perm == 6
    assert ri.set_write_perm("nope", writable=False) == 0


def test_delete_topic() -> None:
    ri = two_groups()
    ri.delete_topic("T", cluster="OtherCluster")  # no broker of that cluster serves T
    assert set(ri.topic_queues["T"]) == {"broker-a", "broker-b"}
    ri.delete_topic("X", cluster="OtherCluster")
    assert "X" not in ri.topic_queues
    ri.delete_topic("T")
    assert "T" not in ri.topic_queues and ri.route("T") is None
    ri.delete_topic("missing")
    ri.delete_topic("missing", cluster=CLUSTER)
    assert "missing" not in ri.topic_queues
    # Brokers stay registered; a new DataVersion brings the topic back.
    assert set(ri.brokers) == {"broker-a", "broker-b", "broker-x"}
    reg(ri, A0, name="broker-a", tcs=topics(T=(4, 4, 6)), version=V2)
    assert set(ri.topic_queues["T"]) == {"broker-a"}


def test_delete_topic_in_one_cluster_keeps_the_others_queues() -> None:
    ri = two_groups()
    reg(ri, "10.0.9.9:10911", name="broker-x", cluster="OtherCluster", tcs=topics(T=(2, 2, 6)), version=V2)
    assert set(ri.topic_queues["T"]) == {"broker-a", "broker-b", "broker-x"}
    ri.delete_topic("T", cluster=CLUSTER)
    assert set(ri.topic_queues["T"]) == {"broker-x"}
