"""One name server, one broker and two consoles (one without login, one with a users file)
as real processes, shared by every browser test of this directory that asks for them, and
one Chromium per test module.

The broker retries a failed consumption after 1 s (every delay level is 1 s), so a message
reaches a group's dead-letter queue within seconds; timers are delivered to the 100 ms."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from ledgermq.admin.timer_ops import TIMER_TOPIC
from tests.compat.cluster import Cluster
from tests.console.harness import Browser, ConsoleProcess, browser

USERS = "# rocketmq-dashboard's format\nadmin=admin-pw,1\nviewer=viewer-pw\n"


@dataclass
class ConsoleCluster:
    cluster: Cluster
    console: ConsoleProcess  # no users file: anyone on this machine is an admin
    guarded: ConsoleProcess  # a users file: admin and a read-only viewer

    @property
    def ns(self) -> str:
        return self.cluster.namesrv_addr


FAST_RETRIES = " ".join(["1s"] * 18)


@pytest.fixture(scope="session")
def console_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConsoleCluster]:
    root = tmp_path_factory.mktemp("console-cluster")
    cluster = Cluster(
        root / "cluster",
        "broker-a",
        autoCreateTopicEnable="true",
        messageDelayLevel=FAST_RETRIES,
        timerPrecisionMs=100,
    )
    # the topic config a RocketMQ 5 broker registers for its timer queue at start-up (ledgermq's
    # broker does not yet): with it the broker lets the queue be read, and the topic page lists
    # a topic's own pending timers
    config = cluster.store_dir / "config"
    config.mkdir(parents=True, exist_ok=True)
    timer_topic = {"topicName": TIMER_TOPIC, "readQueueNums": 1, "writeQueueNums": 1, "perm": 6}
    (config / "topics.json").write_text(json.dumps({"topicConfigTable": {TIMER_TOPIC: timer_topic}}))
    users = root / "users.properties"
    users.write_text(USERS)
    console = ConsoleProcess(root, cluster.namesrv_addr, "--refresh-ms", "1000")
    guarded = ConsoleProcess(root, cluster.namesrv_addr, "--users-file", str(users), name="guarded-console")
    try:
        cluster.start()
        console.start()
        guarded.start()
        yield ConsoleCluster(cluster, console, guarded)
    finally:
        guarded.close()
        console.close()
        cluster.close()


@pytest.fixture(scope="module")
def chromium(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Browser]:
    with browser(tmp_path_factory.mktemp("shots")) as b:
        yield b


@pytest.fixture
def problems(chromium: Browser) -> Iterator[list[str]]:
    """The page errors of this test (cleared before it)."""
    chromium.problems.clear()
    yield chromium.problems.errors
    chromium.close_pages()
