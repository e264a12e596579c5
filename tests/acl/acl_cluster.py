"""A name server and an aclEnable=true broker as real processes, with the accounts the ACL process
tests use (all on loopback: no global white address, so every request is checked)."""

from __future__ import annotations

import os
from pathlib import Path

from ledgermq.acl.signing import Credentials
from tests.compat.cluster import Cluster

TOPIC = "aclTopic"
FORBIDDEN_TOPIC = "aclForbidden"
GROUP = "aclGroup"
OTHER_GROUP = "aclOtherGroup"

PRODUCER = Credentials("producerAK", "producerSK")
CONSUMER = Credentials("consumerAK", "consumerSK")
ADMIN = Credentials("adminAK01", "adminSK01")
BROKER = Credentials("brokerAK01", "brokerSK01")  # the brokers' own requests to each other
WRONG_SECRET = Credentials("producerAK", "not-the-secret")

ACL_YML = f"""
globalWhiteRemoteAddresses:
  - 10.10.103.*
accounts:
  - accessKey: {PRODUCER.access_key}
    secretKey: {PRODUCER.secret_key}
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
    topicPerms:
      - {TOPIC}=PUB
      - {FORBIDDEN_TOPIC}=DENY
  - accessKey: {CONSUMER.access_key}
    secretKey: {CONSUMER.secret_key}
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
    topicPerms:
      - {TOPIC}=SUB
    groupPerms:
      - {GROUP}=SUB
  - accessKey: {ADMIN.access_key}
    secretKey: {ADMIN.secret_key}
    admin: true
  - accessKey: {BROKER.access_key}
    secretKey: {BROKER.secret_key}
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
"""


def write_acl(path: Path, text: str = ACL_YML) -> None:
    """Write a new version of the file; the mtime moves on by a second so the broker's poll sees
    a change even where the clock or file system is coarse."""
    old = path.stat().st_mtime_ns if path.exists() else None
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
    if old is not None:
        os.utime(path, ns=(old + 1_000_000_000, old + 1_000_000_000))


def acl_cluster(root: Path, **props: object) -> Cluster:
    """Not started; ``root / "plain_acl.yml"`` holds ACL_YML."""
    root.mkdir(parents=True, exist_ok=True)
    acl = root / "plain_acl.yml"
    write_acl(acl)
    return Cluster(root, credentials=ADMIN, aclEnable="true", aclFile=acl, **props)


def cpp_credentials(creds: Credentials) -> dict[str, str]:
    return {"access_key": creds.access_key, "secret_key": creds.secret_key}
