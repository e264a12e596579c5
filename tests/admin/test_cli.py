"""``ledgermq admin <command>`` through click's CliRunner, against a name server and a broker
running in this process on a background thread (each command runs its own event loop)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import orjson
import pytest
from click.testing import CliRunner, Result

from ledgermq.admin import AdminClient
from ledgermq.cli.main import cli
from ledgermq.testing.ports import closed_port
from tests.admin.servers import (
    BROKER,
    CLUSTER,
    HOST,
    BackgroundCluster,
    Cluster,
    commit_offset,
    ns_route,
    send_message,
)

TOPIC = "CliTopic"


@pytest.fixture(scope="module")
def bg(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BackgroundCluster]:
    cluster = BackgroundCluster(tmp_path_factory.mktemp("admin-cli"))
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def c(bg: BackgroundCluster) -> Cluster:
    assert bg.cluster is not None
    return bg.cluster


def admin(*args: str, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(cli, ["admin", *args], env=env, catch_exceptions=False)


def ok(*args: str, ns: str) -> str:
    result = admin(*args, "-n", ns)
    assert result.exit_code == 0, (result.output, result.stderr)
    return result.stdout


def failed(*args: str) -> str:
    """The command failed with exit 1 and said why in one line on stderr, without a traceback."""
    result = admin(*args)
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("Error: ")
    return lines[0]


def wait_route(bg: BackgroundCluster, c: Cluster, topic: str) -> None:
    deadline = time.monotonic() + 10
    while bg.call(ns_route(c.ns_addr, topic)) is None:
        assert time.monotonic() < deadline, f"no route for {topic}"
        time.sleep(0.05)


def rows(text: str) -> list[list[str]]:
    """Table rows split on runs of blanks (header and rule lines included)."""
    return [line.split() for line in text.splitlines() if line.strip()]


def test_update_topic_then_route_list_and_status(bg: BackgroundCluster, c: Cluster) -> None:
    out = ok("updateTopic", "-c", CLUSTER, "-t", TOPIC, "-r", "4", "-w", "4", ns=c.ns_addr)
    assert out.splitlines() == [
        f"create topic to {c.broker_addr} success.",
        f"TopicConfig [topicName={TOPIC}, readQueueNums=4, writeQueueNums=4, perm=RW-, topicFilterType=SINGLE_TAG, "
        "topicSysFlag=0, order=false]",
    ]
    wait_route(bg, c, TOPIC)

    route = orjson.loads(ok("topicRoute", "-t", TOPIC, ns=c.ns_addr))
    assert route["queueDatas"] == [
        {"brokerName": BROKER, "perm": 6, "readQueueNums": 4, "topicSysFlag": 0, "writeQueueNums": 4}
    ]
    assert route["brokerDatas"] == [{"brokerAddrs": {"0": c.broker_addr}, "brokerName": BROKER, "cluster": CLUSTER}]
    table = rows(ok("topicRoute", "-t", TOPIC, "-l", ns=c.ns_addr))
    assert table[0] == ["#ClusterName", "#BrokerName", "#BrokerAddrs", "#ReadQueue", "#WriteQueue", "#Perm"]
    assert [CLUSTER, BROKER, f"{{0={c.broker_addr}}}", "4", "4", "6"] in table
    assert ["Total:", "1", "4", "4"] in table

    assert TOPIC in ok("topicList", ns=c.ns_addr).splitlines()
    assert [CLUSTER, TOPIC] in rows(ok("topicList", "-c", ns=c.ns_addr))

    for queue_id in (0, 0, 3):
        bg.call(send_message(c.broker_addr, TOPIC, queue_id=queue_id))
    deadline = time.monotonic() + 10
    while True:
        status = rows(ok("topicStatus", "-t", TOPIC, ns=c.ns_addr))
        mine = [r for r in status if r[0] == BROKER]
        if [r[:4] for r in mine] == [[BROKER, "0", "0", "2"], [BROKER, "1", "0", "0"], [BROKER, "2", "0", "0"],
                                     [BROKER, "3", "0", "1"]]:  # fmt: skip
            break
        assert time.monotonic() < deadline, status
        time.sleep(0.05)
    assert status[0] == ["#Broker", "Name", "#QID", "#Min", "Offset", "#Max", "Offset", "#Last", "Updated"]
    assert len(mine[0]) == 6  # a "yyyy-MM-dd HH:mm:ss,SSS" last-updated time where messages are
    assert len(mine[1]) == 4  # none where none are


def test_update_topic_on_one_broker_with_order(bg: BackgroundCluster, c: Cluster) -> None:
    out = ok("updateTopic", "-b", c.broker_addr, "-t", "CliOrder", "-w", "2", "-r", "2", "-o", "true", ns=c.ns_addr)
    assert f"set broker orderConf. isOrder=true, orderConf=[{BROKER}:2]" in out
    assert f"create topic to {c.broker_addr} success." in out
    assert "order=true]" in out
    wait_route(bg, c, "CliOrder")
    assert orjson.loads(ok("topicRoute", "-t", "CliOrder", ns=c.ns_addr))["orderTopicConf"] == f"{BROKER}:2"


def test_update_topic_usage_errors(c: Cluster) -> None:
    result = admin("updateTopic", "-t", "X", "-n", c.ns_addr)
    assert result.exit_code == 2 and "exactly one of -b brokerAddr or -c clusterName" in result.stderr
    result = admin("updateTopic", "-t", "X", "-b", c.broker_addr, "-c", CLUSTER, "-n", c.ns_addr)
    assert result.exit_code == 2
    result = admin("updateTopic", "-b", c.broker_addr, "-n", c.ns_addr)
    assert result.exit_code == 2 and "'-t'" in result.stderr
    line = failed("updateTopic", "-b", c.broker_addr, "-t", "bad topic", "-n", c.ns_addr)
    assert "illegal characters" in line
    line = failed("updateTopic", "-c", "NoSuchCluster", "-t", "X", "-n", c.ns_addr)
    assert "NoSuchCluster" in line


def test_cluster_list_and_broker_status(c: Cluster) -> None:
    table = rows(ok("clusterList", ns=c.ns_addr))
    assert table[0][:5] == ["#Cluster", "Name", "#Broker", "Name", "#BID"]
    row = next(r for r in table if r[0] == CLUSTER)
    assert row[:5] == [CLUSTER, BROKER, "0", c.broker_addr, "V4_9_7"]
    more = rows(ok("clusterList", "-m", ns=c.ns_addr))
    assert more[0] == ["#Cluster", "Name", "#Broker", "Name", "#InTotalYest", "#OutTotalYest", "#InTotalToday",
                       "#OutTotalToday"]  # fmt: skip
    assert any(r[:2] == [CLUSTER, BROKER] for r in more)

    status = rows(ok("brokerStatus", "-b", c.broker_addr, ns=c.ns_addr))
    assert ["brokerVersionDesc", "V4_9_7"] in status
    keys = [r[0] for r in status[2:]]
    assert keys == sorted(keys)
    by_cluster = rows(ok("brokerStatus", "-c", CLUSTER, ns=c.ns_addr))
    assert [c.broker_addr, "brokerVersionDesc", "V4_9_7"] in by_cluster
    assert admin("brokerStatus", "-n", c.ns_addr).exit_code == 2
    assert "cannot connect" in failed("brokerStatus", "-b", f"{HOST}:{closed_port()}", "-n", c.ns_addr)


def test_consumer_progress(bg: BackgroundCluster, c: Cluster) -> None:
    topic = "CliProgress"
    ok("updateTopic", "-b", c.broker_addr, "-t", topic, "-r", "2", "-w", "2", ns=c.ns_addr)
    for queue_id in (0, 0, 1):
        bg.call(send_message(c.broker_addr, topic, queue_id=queue_id))
    bg.call(commit_offset(c.broker_addr, "cli-group", topic, 0, 1))
    bg.call(commit_offset(c.broker_addr, "cli-group", topic, 1, 1))
    deadline = time.monotonic() + 10
    while True:
        out = ok("consumerProgress", "-g", "cli-group", ns=c.ns_addr)
        if "Diff Total: 1" in out:
            break
        assert time.monotonic() < deadline, out
        time.sleep(0.05)
    table = rows(out)
    assert table[0] == ["#Topic", "#Broker", "Name", "#QID", "#Broker", "Offset", "#Consumer", "Offset", "#Diff",
                        "#LastTime"]  # fmt: skip
    assert table[2][:6] == [topic, BROKER, "0", "2", "1", "1"]
    assert table[3][:6] == [topic, BROKER, "1", "1", "1", "0"]
    assert ["Consume", "TPS:", "0.00"] in table
    assert rows(ok("consumerProgress", "-g", "cli-group", "-t", topic, ns=c.ns_addr))[2:4] == table[2:4]
    assert "no consume stats for group nobody" in failed("consumerProgress", "-g", "nobody", "-n", c.ns_addr)
    overview = rows(ok("consumerProgress", ns=c.ns_addr))
    assert overview[0] == ["#Group", "#Count", "#Version", "#Type", "#Model", "#TPS", "#Diff", "Total"]


def test_query_msg_by_id_and_by_key(bg: BackgroundCluster, c: Cluster) -> None:
    topic = "CliQuery"
    ok("updateTopic", "-b", c.broker_addr, "-t", topic, "-r", "1", "-w", "1", ns=c.ns_addr)
    wait_route(bg, c, topic)
    uniq = "7F000001000100000000000000000C1D"
    sent = bg.call(send_message(c.broker_addr, topic, b"body of the message", keys="k-1 [k-2]", uniq_key=uniq))
    offset_id = sent.ext_fields["msgId"]

    out = ok("queryMsgById", "-i", offset_id, ns=c.ns_addr)
    fields = {k.strip(): v.strip() for k, v in (line.split(":", 1) for line in out.splitlines())}
    for volatile in ("Born Timestamp", "Store Timestamp", "Born Host"):
        assert fields.pop(volatile)
    assert (
        fields
        == {
            "OffsetID": offset_id,
            "Topic": topic,
            "Tags": "[TagA]",
            "Keys": "[k-1 [k-2]]",  # printed as stored: brackets are not taken for markup
            "Queue ID": "0",
            "Queue Offset": "0",
            "CommitLog Offset": str(int(offset_id[16:], 16)),
            "Reconsume Times": "0",
            "Store Host": c.broker_addr,
            "System Flag": "0",
            "Properties": f"{{TAGS=TagA, KEYS=k-1 [k-2], UNIQ_KEY={uniq}, CLUSTER={CLUSTER}}}",  # WAIT is not stored
            "Message Body": "body of the message",
        }
    )
    two = ok("queryMsgById", "-i", f"{offset_id},{offset_id}", ns=c.ns_addr)
    assert two.count("OffsetID:") == 2

    deadline = time.monotonic() + 10
    while True:
        result = admin("queryMsgByKey", "-t", topic, "-k", "k-1", "-n", c.ns_addr)
        if result.exit_code == 0:
            break
        assert time.monotonic() < deadline, result.output
        time.sleep(0.05)
    table = rows(result.stdout)
    assert table[0] == ["#Message", "ID", "#QID", "#Offset", "#Offset", "Msg", "ID"]
    assert table[2] == [uniq, "0", "0", offset_id]

    assert "no message with key 'nope'" in failed("queryMsgByKey", "-t", topic, "-k", "nope", "-n", c.ns_addr)
    # Not an offset id: looked up as a unique key (as mqadmin does), found nowhere.
    assert "no message with id XYZ in any topic" in failed("queryMsgById", "-i", "XYZ", "-n", c.ns_addr)
    missing = offset_id[:16] + "00000000000FFFFF"
    assert "SYSTEM_ERROR (1)" in failed("queryMsgById", "-i", missing, "-n", c.ns_addr)


def test_errors_are_one_line(c: Cluster) -> None:
    dead = f"{HOST}:{closed_port()}"
    assert "no name server reachable" in failed("topicList", "-n", dead)
    assert "no name server reachable" in failed("clusterList", "-n", dead)
    line = failed("topicRoute", "-t", "NoSuchTopic", "-n", c.ns_addr)
    assert line == ("Error: TOPIC_NOT_EXIST (17): No topic route info in name server for the topic: NoSuchTopic")
    assert "TOPIC_NOT_EXIST" in failed("topicStatus", "-t", "NoSuchTopic", "-n", c.ns_addr)
    assert "TOPIC_NOT_EXIST" in failed("queryMsgByKey", "-t", "NoSuchTopic", "-k", "k", "-n", c.ns_addr)


def test_namesrv_addr_comes_from_the_environment(c: Cluster) -> None:
    result = admin("topicList", env={"NAMESRV_ADDR": c.ns_addr})
    assert result.exit_code == 0 and "TBW102" in result.stdout.splitlines()
    result = admin("topicList", env={"NAMESRV_ADDR": f"{HOST}:{closed_port()};{c.ns_addr}"})
    assert result.exit_code == 0 and "TBW102" in result.stdout.splitlines()
    help_text = admin("topicList", "--help").stdout
    assert "NAMESRV_ADDR" in help_text and "127.0.0.1:9876" in help_text


def test_the_admin_client_works_from_another_loop(bg: BackgroundCluster, c: Cluster) -> None:
    """The CLI and the client library share AdminClient; one per event loop is all it needs."""

    async def topics() -> list[str]:
        async with AdminClient(c.ns_addr) as client:
            return await client.topic_list()

    assert "TBW102" in asyncio.run(topics())
    assert "TBW102" in bg.call(topics())
