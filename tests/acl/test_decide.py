"""The decision for one request: the per-code table, whitelists, signatures, admin codes."""

from __future__ import annotations

import orjson
import pytest

from ledgermq.acl.decide import decide
from ledgermq.acl.model import PUB, SUB, parse_acl_text
from ledgermq.acl.resources import needed_access
from ledgermq.acl.signing import Credentials, sign_fields
from ledgermq.protocol.codes import RequestCode as RC

YML = """
globalWhiteRemoteAddresses:
  - 10.10.103.*
accounts:
  - accessKey: producerAK
    secretKey: producerSK
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
    topicPerms: [orders=PUB, audit=DENY]
  - accessKey: consumerAK
    secretKey: consumerSK
    defaultTopicPerm: SUB
    defaultGroupPerm: DENY
    topicPerms: [secret=DENY]
    groupPerms: [billing=SUB]
  - accessKey: adminAK1
    secretKey: adminSK1
    admin: true
  - accessKey: trustedAK
    secretKey: trustedSK
    whiteRemoteAddress: 192.168.1.*
"""
CFG = parse_acl_text(YML)
HOST = "127.0.0.1"
CREDS = {
    "producerAK": Credentials("producerAK", "producerSK"),
    "consumerAK": Credentials("consumerAK", "consumerSK"),
    "adminAK1": Credentials("adminAK1", "adminSK1"),
    "trustedAK": Credentials("trustedAK", "trustedSK"),
}


def ask(who: str | None, code: int, ext: dict[str, str], body: bytes = b"", host: str = HOST) -> tuple[bool, str]:
    ext = dict(ext)
    if who is not None:
        sign_fields(ext, body, CREDS[who])
    d = decide(CFG, code, ext, body, host)
    return d.allowed, d.reason


def heartbeat(group: str, *topics: str) -> bytes:
    subs = [{"topic": t, "subString": "*"} for t in topics]
    return orjson.dumps({"clientID": "c", "consumerDataSet": [{"groupName": group, "subscriptionDataSet": subs}]})


@pytest.mark.parametrize(
    ("code", "ext", "body", "admin", "resources"),
    [
        (RC.SEND_MESSAGE, {"topic": "T", "group": "G"}, b"", False, {"T": PUB}),
        (RC.SEND_MESSAGE, {"topic": "%RETRY%G", "group": "G"}, b"", False, {"%RETRY%G": SUB}),
        (RC.SEND_MESSAGE_V2, {"b": "T", "a": "P"}, b"", False, {"T": PUB}),
        (RC.SEND_MESSAGE_V2, {"b": "%RETRY%G", "a": "G"}, b"", False, {"%RETRY%G": SUB}),
        (RC.SEND_BATCH_MESSAGE, {"b": "T", "a": "P"}, b"", False, {"T": PUB}),
        (RC.CONSUMER_SEND_MSG_BACK, {"group": "G"}, b"", False, {"%RETRY%G": SUB}),
        (RC.PULL_MESSAGE, {"topic": "T", "consumerGroup": "G"}, b"", False, {"T": SUB, "%RETRY%G": SUB}),
        (RC.QUERY_MESSAGE, {"topic": "T"}, b"", False, {"T": SUB}),
        (RC.HEART_BEAT, {}, heartbeat("G", "T1", "T2"), False, {"%RETRY%G": SUB, "T1": SUB, "T2": SUB}),
        (RC.HEART_BEAT, {}, orjson.dumps({"clientID": "p", "producerDataSet": [{"groupName": "P"}]}), False, {}),
        (RC.UNREGISTER_CLIENT, {"consumerGroup": "G"}, b"", False, {"%RETRY%G": SUB}),
        (RC.UNREGISTER_CLIENT, {"producerGroup": "P"}, b"", False, {}),
        (RC.UNREGISTER_CLIENT, {"producerGroup": "P", "consumerGroup": ""}, b"", False, {}),  # the C++ producer
        (RC.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "G"}, b"", False, {"%RETRY%G": SUB}),
        (RC.UPDATE_CONSUMER_OFFSET, {"consumerGroup": "G", "topic": "T"}, b"", False, {"%RETRY%G": SUB, "T": SUB}),
        (RC.UPDATE_AND_CREATE_TOPIC, {"topic": "T"}, b"", True, {}),
        (RC.DELETE_TOPIC_IN_BROKER, {"topic": "T"}, b"", True, {}),
        (RC.UPDATE_BROKER_CONFIG, {}, b"", True, {}),
        (RC.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {}, b"", True, {}),
        (RC.DELETE_SUBSCRIPTIONGROUP, {"groupName": "G"}, b"", True, {}),
        (RC.DLEDGER_TRANSFER_LEADER, {"target": "n1"}, b"", True, {}),
        (RC.GET_MAX_OFFSET, {"topic": "T", "queueId": "0"}, b"", False, {}),
        (RC.GET_ALL_TOPIC_CONFIG, {}, b"", False, {}),
    ],
)
def test_permission_table(code: int, ext: dict[str, str], body: bytes, admin: bool, resources: dict[str, int]) -> None:
    needed = needed_access(code, ext, body)
    assert (needed.admin, needed.resources) == (admin, resources)


def test_producer_account() -> None:
    assert ask("producerAK", RC.SEND_MESSAGE_V2, {"a": "P", "b": "orders"}) == (True, "")
    ok, reason = ask("producerAK", RC.SEND_MESSAGE_V2, {"a": "P", "b": "audit"})
    assert not ok and reason == "No PUB permission for topic:audit (accessKey=producerAK)"
    ok, reason = ask("producerAK", RC.SEND_MESSAGE_V2, {"a": "P", "b": "unlisted"})  # default DENY
    assert not ok and "topic:unlisted" in reason
    ok, reason = ask("producerAK", RC.PULL_MESSAGE, {"topic": "orders", "consumerGroup": "G"})
    assert not ok and "No SUB permission" in reason


def test_consumer_account_and_groups() -> None:
    body = heartbeat("billing", "orders")
    assert ask("consumerAK", RC.HEART_BEAT, {}, body)[0]
    assert ask("consumerAK", RC.PULL_MESSAGE, {"topic": "orders", "consumerGroup": "billing"})[0]
    ok, reason = ask("consumerAK", RC.PULL_MESSAGE, {"topic": "secret", "consumerGroup": "billing"})
    assert not ok and "topic:secret" in reason
    ok, reason = ask("consumerAK", RC.PULL_MESSAGE, {"topic": "orders", "consumerGroup": "other"})
    assert not ok and reason == "No SUB permission for group:other (accessKey=consumerAK)"
    # a consumer's resend to its retry topic needs the group, not PUB on the topic
    assert ask("consumerAK", RC.SEND_MESSAGE_V2, {"a": "billing", "b": "%RETRY%billing"})[0]
    assert not ask("consumerAK", RC.SEND_MESSAGE_V2, {"a": "billing", "b": "orders"})[0]


def test_admin_codes() -> None:
    ok, reason = ask("producerAK", RC.UPDATE_AND_CREATE_TOPIC, {"topic": "orders"})
    assert not ok and reason.startswith("Need admin permission for request code=17")
    assert ask("adminAK1", RC.UPDATE_AND_CREATE_TOPIC, {"topic": "orders"})[0]
    assert ask("adminAK1", RC.SEND_MESSAGE_V2, {"a": "P", "b": "anything"})[0]  # admin without lists


def test_identity_and_signature() -> None:
    assert ask(None, RC.SEND_MESSAGE_V2, {"a": "P", "b": "orders"}) == (False, "No accessKey is configured")
    assert ask(None, RC.SEND_MESSAGE_V2, {"AccessKey": "nobodyAK"}) == (False, "No acl config for nobodyAK")
    ext = {"a": "P", "b": "orders"}
    sign_fields(ext, b"x", CREDS["producerAK"])
    assert decide(CFG, RC.SEND_MESSAGE_V2, ext, b"x", HOST).allowed
    assert not decide(CFG, RC.SEND_MESSAGE_V2, ext, b"y", HOST).allowed  # body changed
    assert not decide(CFG, RC.SEND_MESSAGE_V2, {**ext, "b": "audit2"}, b"x", HOST).allowed
    reason = decide(CFG, RC.SEND_MESSAGE_V2, {**ext, "Signature": "AAAA"}, b"x", HOST).reason
    assert reason == "Check signature failed for accessKey=producerAK"


def test_whitelists_skip_the_checks() -> None:
    # global: anyone, signed or not
    assert ask(None, RC.UPDATE_AND_CREATE_TOPIC, {"topic": "T"}, host="10.10.103.7")[0]
    # account whitelist: the access key is enough, no signature or permission check (RocketMQ's order)
    assert decide(CFG, RC.UPDATE_AND_CREATE_TOPIC, {"AccessKey": "trustedAK"}, b"", "192.168.1.9").allowed
    assert not decide(CFG, RC.SEND_MESSAGE, {"AccessKey": "trustedAK"}, b"", "192.168.2.9").allowed


def test_trace_topic_send_passes_with_a_valid_signature() -> None:
    assert ask("producerAK", RC.SEND_MESSAGE_V2, {"a": "P", "b": "RMQ_SYS_TRACE_TOPIC"})[0]


def test_unreadable_heartbeat_is_refused() -> None:
    ok, reason = ask("consumerAK", RC.HEART_BEAT, {}, b"{not json")
    assert not ok and "HEART_BEAT" in reason
