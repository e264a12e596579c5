"""End to end: ``ledgermq admin`` as a process against a name server and a broker running as
processes (what ``ledgermq cluster up`` starts), with a message sent by a plain
RemotingClient SEND_MESSAGE_V2 request."""

from __future__ import annotations

import asyncio
import subprocess
import time
from pathlib import Path

import orjson

from tests.admin.servers import BROKER, ProcessCluster, ledgermq_cmd, ns_route, send_message

COMMAND_TIMEOUT = 30.0


def run_admin(*args: str, ns: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ledgermq_cmd("admin", *args, "-n", ns), capture_output=True, text=True, timeout=COMMAND_TIMEOUT
    )


def test_update_topic_route_list_and_query_msg_by_id(tmp_path: Path) -> None:
    cluster = ProcessCluster(tmp_path / "cluster")
    try:
        cluster.start()
        ns = cluster.ns_addr

        created = run_admin("updateTopic", "-c", "DefaultCluster", "-t", "E2ETopic", "-r", "2", "-w", "2", ns=ns)
        assert created.returncode == 0, created.stderr
        assert f"create topic to {cluster.broker_addr} success." in created.stdout

        deadline = time.monotonic() + 10
        while asyncio.run(ns_route(ns, "E2ETopic")) is None:  # the broker re-registers at once; bounded anyway
            assert time.monotonic() < deadline, "E2ETopic never reached the name server"
            time.sleep(0.1)
        route = run_admin("topicRoute", "-t", "E2ETopic", ns=ns)
        assert route.returncode == 0, route.stderr
        doc = orjson.loads(route.stdout)
        assert doc["queueDatas"][0]["brokerName"] == BROKER
        assert (doc["queueDatas"][0]["readQueueNums"], doc["queueDatas"][0]["writeQueueNums"]) == (2, 2)
        assert doc["brokerDatas"][0]["brokerAddrs"] == {"0": cluster.broker_addr}

        listed = run_admin("topicList", ns=ns)
        assert listed.returncode == 0, listed.stderr
        assert "E2ETopic" in listed.stdout.splitlines()

        sent = asyncio.run(send_message(cluster.broker_addr, "E2ETopic", b"end to end", queue_id=1, keys="e2e-key"))
        offset_id = sent.ext_fields["msgId"]
        shown = run_admin("queryMsgById", "-i", offset_id, ns=ns)
        assert shown.returncode == 0, shown.stderr
        lines = {k.strip(): v.strip() for k, v in (ln.split(":", 1) for ln in shown.stdout.splitlines())}
        assert lines["OffsetID"] == offset_id
        assert lines["Topic"] == "E2ETopic"
        assert lines["Queue ID"] == "1"
        assert lines["Keys"] == "[e2e-key]"
        assert lines["Store Host"] == cluster.broker_addr
        assert lines["Message Body"] == "end to end"

        missing = run_admin("topicRoute", "-t", "NoSuchTopic", ns=ns)
        assert missing.returncode == 1
        assert missing.stderr.strip().splitlines() == [
            "Error: TOPIC_NOT_EXIST (17): No topic route info in name server for the topic: NoSuchTopic"
        ]
    finally:
        cluster.stop()
    for proc in cluster.procs:
        assert proc.returncode == 0, f"{proc.args} exited with {proc.returncode}"
