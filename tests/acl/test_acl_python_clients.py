"""Our client, admin CLI and broker process with aclEnable=true: credentials sign every request;
unsigned or unpermitted requests are refused with NO_PERMISSION and a remark that says why; the
file changed at runtime takes effect; a broker with a missing or broken file does not start."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from ledgermq.acl.signing import Credentials
from ledgermq.broker.metadata_log import read_current
from ledgermq.cli.main import cli
from ledgermq.client import ConsumeConcurrentlyStatus, ConsumeFromWhere, Message, Producer, PushConsumer
from ledgermq.client.errors import MQClientError
from ledgermq.protocol.message import MessageRecord
from ledgermq.testing.ports import free_port
from tests.acl.acl_cluster import (
    ACL_YML,
    ADMIN,
    CONSUMER,
    FORBIDDEN_TOPIC,
    GROUP,
    OTHER_GROUP,
    PRODUCER,
    TOPIC,
    write_acl,
)
from tests.compat.cluster import HOST, Cluster

pytestmark = pytest.mark.timeout(120)


async def send(c: Cluster, topic: str, body: bytes, creds: Credentials | None) -> str:
    """SEND_OK's msg id, or the error text."""
    async with Producer("aclPyProducer", c.namesrv_addr, credentials=creds, retry_times=0) as producer:
        try:
            result = await producer.send(Message(topic, body))
        except MQClientError as exc:
            return f"error: {exc} / {getattr(exc, 'last', None)}"
        return result.status.name


async def consume(c: Cluster, group: str, topic: str, count: int, timeout: float) -> list[MessageRecord]:
    got: list[MessageRecord] = []

    def on_messages(msgs: list[MessageRecord], _ctx: object) -> ConsumeConcurrentlyStatus:
        got.extend(msgs)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    consumer = PushConsumer(
        group,
        c.namesrv_addr,
        consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
        credentials=CONSUMER,
        heartbeat_interval=1.0,
    )
    consumer.subscribe(topic)
    consumer.register_listener(on_messages)
    async with consumer:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while len(got) < count and loop.time() < deadline:
            await asyncio.sleep(0.05)
    return got


def test_our_clients_sign_and_are_checked(acl_broker: Cluster) -> None:
    c = acl_broker

    async def main() -> None:
        for i in range(3):
            assert await send(c, TOPIC, b"py %d" % i, PRODUCER) == "SEND_OK"
        refused = await send(c, TOPIC, b"anonymous", None)
        assert "NO_PERMISSION (16)" in refused and "No accessKey is configured" in refused, refused
        refused = await send(c, FORBIDDEN_TOPIC, b"x", PRODUCER)
        assert f"No PUB permission for topic:{FORBIDDEN_TOPIC} (accessKey=producerAK)" in refused, refused
        refused = await send(c, TOPIC, b"x", Credentials(PRODUCER.access_key, "wrong-secret"))
        assert "Check signature failed for accessKey=producerAK" in refused, refused
        big = os.urandom(300 * 1024)  # incompressible, over GATE_IN_THREAD_BODY: checked in a worker thread
        assert await send(c, TOPIC, big, PRODUCER) == "SEND_OK"
        refused = await send(c, TOPIC, big, Credentials(PRODUCER.access_key, "wrong-secret"))
        assert "Check signature failed for accessKey=producerAK" in refused, refused
        refused = await send(c, FORBIDDEN_TOPIC, big, PRODUCER)
        assert f"No PUB permission for topic:{FORBIDDEN_TOPIC}" in refused, refused
        refused = await send(c, TOPIC, b"x", CONSUMER)  # SUB only
        assert "No PUB permission for topic:aclTopic (accessKey=consumerAK)" in refused, refused

        got = await consume(c, GROUP, TOPIC, 4, 20.0)
        assert sorted(m.body for m in got) == sorted([b"py 0", b"py 1", b"py 2", big]), c.explain()
        assert await consume(c, OTHER_GROUP, TOPIC, 1, 3.0) == []  # its account lacks the group

    asyncio.run(main())
    log = c.broker.log_path.read_text()
    assert f"No SUB permission for group:{OTHER_GROUP} (accessKey=consumerAK)" in log


def test_admin_cli_signs_with_access_key_options(acl_broker: Cluster) -> None:
    c = acl_broker
    runner = CliRunner()
    update = ["updateTopic", "-n", c.namesrv_addr, "-b", c.broker_addr, "-t", "aclAdminTopic"]
    anonymous = runner.invoke(cli, ["admin", *update])
    assert anonymous.exit_code == 1 and "No accessKey is configured" in anonymous.output, anonymous.output
    producer = runner.invoke(cli, ["admin", "--access-key", "producerAK", "--secret-key", "producerSK", *update])
    assert producer.exit_code == 1 and "Need admin permission for request code=17" in producer.output
    admin = runner.invoke(
        cli, ["admin", *update], env={"LEDGERMQ_ACCESS_KEY": ADMIN.access_key, "LEDGERMQ_SECRET_KEY": ADMIN.secret_key}
    )
    assert admin.exit_code == 0, admin.output
    topics = read_current(c.store_dir / "config" / "topics.json", "topicConfigTable")["topicConfigTable"]
    assert "aclAdminTopic" in topics
    half = runner.invoke(cli, ["admin", "--access-key", "adminAK01", *update])
    assert half.exit_code != 0 and "both" in half.output


def test_file_changed_at_runtime_takes_effect(acl_broker: Cluster) -> None:
    c = acl_broker
    acl_file = c.root / "plain_acl.yml"

    async def until(expect_ok: bool, timeout: float = 10.0) -> float:
        started = time.monotonic()
        while True:
            outcome = await send(c, TOPIC, b"probe", PRODUCER)
            if (outcome == "SEND_OK") == expect_ok:
                return time.monotonic() - started
            assert time.monotonic() - started < timeout, f"still {outcome!r}\n{c.explain()}"
            await asyncio.sleep(0.1)

    async def main() -> None:
        await until(True)
        write_acl(acl_file, ACL_YML.replace(f"{TOPIC}=PUB", f"{TOPIC}=DENY"))
        await until(False)
        write_acl(acl_file, "accounts: [\n")  # broken: the last good (denying) file stays in force
        await asyncio.sleep(1.2)
        assert (await send(c, TOPIC, b"x", PRODUCER)).startswith("error"), "a broken file must not open the broker"
        write_acl(acl_file, ACL_YML)
        await until(True)

    asyncio.run(main())
    log = c.broker.log_path.read_text()
    assert "reloaded" in log and "cannot be used" in log, c.explain()
    assert c.broker.alive


def _start_broker(tmp_path: Path, **props: object) -> subprocess.CompletedProcess[str]:
    tmp_path.mkdir(parents=True)
    conf = tmp_path / "broker.properties"
    all_props = {
        "brokerName": "acl-start",
        "listenHost": HOST,
        "brokerIP1": HOST,
        "listenPort": free_port(span=2),
        "storePathRootDir": tmp_path / "store",
        "aclEnable": "true",
        **props,
    }
    conf.write_text("".join(f"{k}={v}\n" for k, v in all_props.items()))
    env = {k: v for k, v in os.environ.items() if k != "ROCKETMQ_HOME"}
    return subprocess.run(
        [sys.executable, "-m", "ledgermq.cli.main", "broker", "-c", str(conf)],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        stdin=subprocess.DEVNULL,
    )


def test_broker_refuses_to_start_without_a_usable_file(tmp_path: Path) -> None:
    nowhere = _start_broker(tmp_path / "a")
    assert nowhere.returncode == 1 and "needs aclFile, rocketmqHome or ROCKETMQ_HOME" in nowhere.stderr
    missing = _start_broker(tmp_path / "b", rocketmqHome=tmp_path / "home")
    assert missing.returncode == 1, missing.stderr
    assert f"{tmp_path / 'home' / 'conf' / 'plain_acl.yml'} does not exist" in missing.stderr
    broken = tmp_path / "broken.yml"
    broken.write_text("accounts:\n  - {accessKey: producerAK, secretKey: producerSK, topicPerms: [aclTopic=ALL]}\n")
    bad = _start_broker(tmp_path / "c", aclFile=broken)
    assert bad.returncode == 1 and "permission 'ALL' is not DENY" in bad.stderr, bad.stderr
    assert not (tmp_path / "c" / "store" / "commitlog").exists()  # refused before the store was touched
