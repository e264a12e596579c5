"""plain_acl.yml parsing: RocketMQ's distribution file, defaults, and strict refusals."""

from __future__ import annotations

from pathlib import Path

import pytest

from ledgermq.acl.addresses import AclConfigError
from ledgermq.acl.model import DENY, PUB, SUB, check_permission, parse_acl_text

# RocketMQ 4.9's distribution/conf/plain_acl.yml, comments trimmed.
DISTRIBUTION_YML = """
globalWhiteRemoteAddresses:
  - 10.10.103.*
  - 192.168.0.*

accounts:
  - accessKey: RocketMQ
    secretKey: 12345678
    whiteRemoteAddress:
    admin: false
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
      - topicA=DENY
      - topicB=PUB|SUB
      - topicC=SUB
    groupPerms:
      # the group should convert to retry topic
      - groupA=DENY
      - groupB=PUB|SUB
      - groupC=SUB

  - accessKey: rocketmq2
    secretKey: 12345678
    whiteRemoteAddress: 192.168.1.*
    # if it is admin, it could access all resources
    admin: true
"""


def test_distribution_file() -> None:
    cfg = parse_acl_text(DISTRIBUTION_YML)
    assert [p.text for p in cfg.global_white] == ["10.10.103.*", "192.168.0.*"]
    rmq = cfg.accounts["RocketMQ"]
    assert rmq.secret_key == "12345678"  # a YAML number, read as RocketMQ reads it: a string
    assert not rmq.admin and not rmq.white_address.match("127.0.0.1")
    assert (rmq.default_topic_perm, rmq.default_group_perm) == (DENY, SUB)
    assert rmq.perms == {
        "topicA": DENY,
        "topicB": PUB | SUB,
        "topicC": SUB,
        "%RETRY%groupA": DENY,
        "%RETRY%groupB": PUB | SUB,
        "%RETRY%groupC": SUB,
    }
    admin = cfg.accounts["rocketmq2"]
    assert admin.admin and admin.perms is None
    assert admin.default_topic_perm == DENY  # absent defaults are DENY
    assert admin.white_address.match("192.168.1.7")


def test_empty_file_is_an_empty_config() -> None:
    cfg = parse_acl_text("")
    assert cfg.accounts == {} and cfg.global_white == ()


def test_permission_rules() -> None:
    assert check_permission(PUB, PUB | SUB) and check_permission(SUB, SUB)
    assert not check_permission(PUB, SUB) and not check_permission(SUB, DENY | SUB)


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("accounts:\n  - accessKey: short\n    secretKey: 12345678\n", "longer than 6"),
        ("accounts:\n  - accessKey: rocketmq2\n    secretKey: 123456\n", "longer than 6"),
        ("accounts:\n  - secretKey: 12345678\n", "required"),
        ("accounts:\n  - accessKey: rocketmq2\n    secretKey: 12345678\n    topicPerms: [topicA=WRITE]\n", "WRITE"),
        ("accounts:\n  - accessKey: rocketmq2\n    secretKey: 12345678\n    topicPerms: [topicA]\n", "name=PERM"),
        ("accounts:\n  - accessKey: rocketmq2\n    secretKey: 12345678\n    defaultTopicPerm: ALL\n", "ALL"),
        ("accounts:\n  - accessKey: rocketmq2\n    secretKey: 12345678\n    topicPerm: [a=PUB]\n", "unknown keys"),
        (
            "accounts:\n  - {accessKey: rocketmq2, secretKey: 12345678}\n"
            "  - {accessKey: rocketmq2, secretKey: 8765432}\n",
            "twice",
        ),
        ("accounts:\n  - accessKey: rocketmq2\n    secretKey: 12345678\n    admin: maybe\n", "true or false"),
        ("globalWhiteRemoteAddresses: [192.168.1.300]\n", "not an IPv4"),
        ("globalWhiteRemoteAddresse: []\n", "unknown top-level"),
        ("accounts: [\n", "YAML"),
        ("- just a list\n", "mapping"),
    ],
)
def test_bad_files_are_refused(text: str, match: str) -> None:
    with pytest.raises(AclConfigError, match=match):
        parse_acl_text(text)


def test_shipped_example_file_loads() -> None:
    cfg = parse_acl_text((Path(__file__).resolve().parents[2] / "conf" / "plain_acl.yml").read_text())
    assert set(cfg.accounts) == {"ordersProducer", "billingConsumer", "opsAdmin", "brokerSync"}
    assert cfg.accounts["billingConsumer"].perms == {"orders": SUB, "%RETRY%billing": SUB}
