"""Apache's C++ client (the ``rocketmq`` wheel) against an aclEnable=true broker: it signs with
set_session_credentials, and what it signs passes; bad credentials or missing permissions are
refused (the send raises, a consumer gets nothing) and the broker says why."""

from __future__ import annotations

import uuid

import pytest

from tests.acl.acl_cluster import (
    CONSUMER,
    FORBIDDEN_TOPIC,
    GROUP,
    OTHER_GROUP,
    PRODUCER,
    TOPIC,
    WRONG_SECRET,
    cpp_credentials,
)
from tests.compat.cluster import HAVE_CPP_CLIENT, Cluster, wait_until

pytestmark = [
    pytest.mark.skipif(not HAVE_CPP_CLIENT, reason="the rocketmq wheel (C++ client) is not installed"),
    pytest.mark.timeout(120),
]


def messages(topic: str, n: int) -> tuple[list[str], list[dict[str, object]]]:
    uids = [str(uuid.uuid4()) for _ in range(n)]
    return uids, [{"topic": topic, "body": f"acl body {i}", "props": {"uid": u}} for i, u in enumerate(uids)]


def broker_log(c: Cluster) -> str:
    return c.broker.log_path.read_text(errors="replace")


def test_cpp_client_with_credentials_sends_and_consumes(acl_broker: Cluster) -> None:
    c = acl_broker
    uids, msgs = messages(TOPIC, 3)
    send = {
        "op": "send",
        "mode": "sync",
        "group": "aclProducerGroup",
        "messages": msgs,
        "credentials": cpp_credentials(PRODUCER),
        "retry_failed_sends": 2,
    }
    push = {
        "op": "push",
        "group": GROUP,
        "topic": TOPIC,
        "uid_prop": "uid",
        "expect_uids": uids,
        "props": [],
        "timeout": 30,
        "settle": 0.5,
        "credentials": cpp_credentials(CONSUMER),
    }
    pull = {"op": "pull", "group": GROUP, "topic": TOPIC, "expect_count": 3, "props": ["uid"], "timeout": 15}
    sent, pushed, pulled = c.send_and_consume(TOPIC, [send, push, {**pull, "credentials": cpp_credentials(CONSUMER)}])
    assert [r["status"] for r in sent["results"]] == ["OK"] * 3, c.explain()
    assert pushed["complete"], c.explain()
    assert {m["props"]["uid"] for m in pushed["messages"]} == set(uids)
    assert sorted(m["props"]["uid"] for m in pulled["messages"]) == sorted(uids)
    assert "ACL refused" not in broker_log(c), c.explain()


def test_cpp_client_is_refused_without_credentials_or_permission(acl_broker: Cluster) -> None:
    c = acl_broker
    _, msgs = messages(TOPIC, 1)
    _, forbidden = messages(FORBIDDEN_TOPIC, 1)
    base = {"op": "send", "mode": "sync", "group": "aclProducerGroup", "expect_error": True}
    wrong, anonymous, no_perm = c.run_client(
        [
            {**base, "messages": msgs, "credentials": cpp_credentials(WRONG_SECRET)},
            {**base, "messages": msgs},  # the C++ client then sends AccessKey ""
            {**base, "messages": forbidden, "credentials": cpp_credentials(PRODUCER)},
        ]
    )
    for step in (wrong, anonymous, no_perm):
        assert step["results"] == [] and len(step["errors"]) == 1, step

    # a consumer whose account lacks the group: its heartbeat and pulls are refused, nothing arrives
    uids, good = messages(TOPIC, 2)
    sent = c.run_client(
        [
            {
                "op": "send",
                "mode": "sync",
                "group": "aclProducerGroup",
                "messages": good,
                "retry_failed_sends": 2,
                "credentials": cpp_credentials(PRODUCER),
            }
        ]
    )[0]
    assert [r["status"] for r in sent["results"]] == ["OK", "OK"]
    c.wait_route(TOPIC)
    pushed = c.run_client(
        [
            {
                "op": "push",
                "group": OTHER_GROUP,
                "topic": TOPIC,
                "uid_prop": "uid",
                "expect_uids": uids,
                "props": [],
                "timeout": 4,
                "credentials": cpp_credentials(CONSUMER),
            }
        ]
    )[0]
    assert not pushed["complete"] and pushed["messages"] == []

    expected = [
        "ACL refused SEND_MESSAGE",
        "Check signature failed for accessKey=producerAK",
        "No acl config for ",
        f"No PUB permission for topic:{FORBIDDEN_TOPIC} (accessKey=producerAK)",
        f"No SUB permission for group:{OTHER_GROUP} (accessKey=consumerAK)",
    ]
    wait_until("the broker to log every refusal", lambda: all(e in broker_log(c) for e in expected), 10)
    assert not (c.store_dir / "consumequeue" / FORBIDDEN_TOPIC).exists()  # nothing stored, no topic created
