"""A master and slaves with aclEnable=true: a slave that signs with aclAccessKey/aclSecretKey keeps
copying the master's metadata; one without them is refused (RocketMQ 4.9 has no such keys and
needs the slaves' addresses in globalWhiteRemoteAddresses, which on loopback would open the broker
to everyone)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from ledgermq.admin.client import AdminClient
from ledgermq.broker.metadata_log import read_current
from ledgermq.protocol.codes import RequestCode, ResponseCode
from tests.acl.acl_cluster import ADMIN, BROKER, write_acl
from tests.compat.cluster import wait_until
from tests.ha.process_group import BrokerProc, HAGroup

pytestmark = pytest.mark.timeout(120)
SYNCED_TOPIC = "aclSyncedTopic"


def topics_on_disk(b: BrokerProc) -> set[str]:
    try:
        doc = read_current(b.store_dir / "config" / "topics.json", "topicConfigTable")
    except Exception:
        return set()
    return set(doc.get("topicConfigTable") or {})


def master_offset(b: BrokerProc) -> int | None:
    try:
        doc = read_current(b.store_dir / "config" / "consumerOffset.json", "offsetTable")
    except Exception:
        return None
    table = (doc.get("offsetTable") or {}).get(f"{SYNCED_TOPIC}@aclGroup") or {}
    return table.get("0", table.get(0))  # type: ignore[no-any-return]


def acl_refusals(b: BrokerProc) -> list[str]:
    return [ln for ln in b.server.log_path.read_text(errors="replace").splitlines() if "ACL refused" in ln]


def test_slave_with_broker_credentials_keeps_syncing(tmp_path: Path) -> None:
    acl = tmp_path / "plain_acl.yml"
    write_acl(acl)
    group = HAGroup(tmp_path / "group", aclEnable="true", aclFile=acl, slaveSyncInterval=300)
    own = {"aclAccessKey": BROKER.access_key, "aclSecretKey": BROKER.secret_key}
    master = group.add("m", 0, "ASYNC_MASTER", **own)
    signed = group.add("s1", 1, "SLAVE", **own)
    unsigned = group.add("s2", 2, "SLAVE")
    try:
        group.start_namesrv()
        for b in (master, signed, unsigned):
            group.start(b)

        async def create() -> None:
            async with AdminClient(group.namesrv_addr, credentials=ADMIN) as admin:
                await admin.create_topic(master.addr, SYNCED_TOPIC, read_queue_nums=2, write_queue_nums=2)

        asyncio.run(create())
        wait_until(
            "the signing slave to copy the new topic",
            lambda: SYNCED_TOPIC in topics_on_disk(signed),
            15,
            0.1,
            group.explain,
        )
        wait_until("the master to refuse the unsigned slave", lambda: acl_refusals(master), 10, 0.1, group.explain)
        refused = acl_refusals(master)
        assert all("No accessKey is configured" in ln for ln in refused), refused
        assert any("GET_ALL_TOPIC_CONFIG" in ln for ln in refused), refused
        assert SYNCED_TOPIC not in topics_on_disk(unsigned)

        # The master reads its slaves' consumer offsets back (signed too): an offset committed to
        # a slave reaches the master's table.
        async def commit_to_slave() -> None:
            async with AdminClient(group.namesrv_addr, credentials=ADMIN) as admin:
                ext = {"consumerGroup": "aclGroup", "topic": SYNCED_TOPIC, "queueId": 0, "commitOffset": 5}
                resp = await admin.invoke(signed.addr, RequestCode.UPDATE_CONSUMER_OFFSET, ext)
                assert resp.code == ResponseCode.SUCCESS, resp

        asyncio.run(commit_to_slave())
        wait_until("the master to adopt the slave's offset", lambda: master_offset(master) == 5, 15, 0.1, group.explain)
        assert acl_refusals(signed) == [] and acl_refusals(unsigned) == [], group.explain()
        assert BROKER.access_key not in "".join(refused)
    finally:
        group.close()
