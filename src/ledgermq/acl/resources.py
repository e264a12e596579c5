"""Which resources a request needs, and with which permission (PlainAccessValidator.parse).

* SEND_MESSAGE (``topic``), SEND_MESSAGE_V2 and SEND_BATCH_MESSAGE (``b``): PUB on the
  topic; a send to a retry topic needs SUB on the sending group (``group``, ``a``) instead;
* CONSUMER_SEND_MSG_BACK: SUB on the group;
* PULL_MESSAGE: SUB on the topic and on ``consumerGroup``;
* QUERY_MESSAGE: SUB on the topic;
* HEART_BEAT: SUB on every consumer group in the body and every topic they subscribe;
* UNREGISTER_CLIENT, GET_CONSUMER_LIST_BY_GROUP: SUB on ``consumerGroup``;
* UPDATE_CONSUMER_OFFSET: SUB on ``consumerGroup`` and the topic;
* UPDATE_AND_CREATE_TOPIC, UPDATE_BROKER_CONFIG, DELETE_TOPIC_IN_BROKER,
  UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, DELETE_SUBSCRIPTIONGROUP, and ledgermq's
  DLEDGER_TRANSFER_LEADER: an admin account;
* anything else: a known access key and a valid signature only.

A group is named by its retry topic ``%RETRY%group`` (see model.py). RocketMQ 4.9 left
SEND_BATCH_MESSAGE out of the table, so a batch needed no topic permission; 5.x checks it
like SEND_MESSAGE_V2, and so do we.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ledgermq.acl.model import PUB, SUB, is_group_resource, retry_topic
from ledgermq.errors import RemoteProtocolError
from ledgermq.protocol import fastjson
from ledgermq.protocol.codes import RequestCode

ADMIN_CODES = frozenset(
    {
        RequestCode.UPDATE_AND_CREATE_TOPIC,
        RequestCode.UPDATE_BROKER_CONFIG,
        RequestCode.DELETE_TOPIC_IN_BROKER,
        RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
        RequestCode.DELETE_SUBSCRIPTIONGROUP,
        RequestCode.DLEDGER_TRANSFER_LEADER,  # ledgermq's own code: moving a group's leader is an admin act
    }
)


@dataclass(slots=True)
class Needed:
    """What one request asks for: resource -> permission, and whether only an admin may ask."""

    admin: bool = False
    resources: dict[str, int] = field(default_factory=dict)

    def add(self, resource: str | None, perm: int) -> None:
        if resource is not None:  # RocketMQ skips a resource the request does not name
            self.resources[resource] = perm

    def add_group(self, group: str | None) -> None:
        # An empty group is no group: the C++ producer unregisters with consumerGroup "",
        # which RocketMQ checks as a group named "" (and refuses, so the producer lingers).
        if group:
            self.add(retry_topic(group), SUB)


def _send(needed: Needed, topic: str | None, group: str | None) -> None:
    if topic is not None and is_group_resource(topic):
        needed.add_group(group)  # a consumer resending to its retry topic: the group's right
    else:
        needed.add(topic, PUB)


def _heartbeat(needed: Needed, body: bytes) -> None:
    try:
        doc = fastjson.loads(body) if body else {}
    except Exception as exc:
        raise RemoteProtocolError(f"HEART_BEAT body is not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise RemoteProtocolError("HEART_BEAT body is not a JSON object")
    for consumer in _list(doc.get("consumerDataSet")):
        needed.add_group(_text(consumer.get("groupName")))
        for sub in _list(consumer.get("subscriptionDataSet")):
            needed.add(_text(sub.get("topic")), SUB)


def _list(value: Any) -> list[dict[str, Any]]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise RemoteProtocolError("HEART_BEAT body: a data set is not a list of objects")
    return value


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


def needed_access(code: int, ext: Mapping[str, str], body: bytes) -> Needed:
    """The table above for one request; RemoteProtocolError if its heartbeat body is unreadable."""
    needed = Needed(admin=code in ADMIN_CODES)
    if code == RequestCode.SEND_MESSAGE:
        _send(needed, ext.get("topic"), ext.get("group"))
    elif code in (RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE):
        _send(needed, ext.get("b"), ext.get("a"))
    elif code == RequestCode.CONSUMER_SEND_MSG_BACK:
        needed.add_group(ext.get("group"))
    elif code == RequestCode.PULL_MESSAGE:
        needed.add(ext.get("topic"), SUB)
        needed.add_group(ext.get("consumerGroup"))
    elif code == RequestCode.QUERY_MESSAGE:
        needed.add(ext.get("topic"), SUB)
    elif code == RequestCode.HEART_BEAT:
        _heartbeat(needed, body)
    elif code in (RequestCode.UNREGISTER_CLIENT, RequestCode.GET_CONSUMER_LIST_BY_GROUP):
        needed.add_group(ext.get("consumerGroup"))
    elif code == RequestCode.UPDATE_CONSUMER_OFFSET:
        needed.add_group(ext.get("consumerGroup"))
        needed.add(ext.get("topic"), SUB)
    return needed
