"""Admin bodies keyed by MessageQueue, in the JSON form Java's fastjson writes and reads.

RocketMQ serialises ``HashMap<MessageQueue, V>`` (TopicStatsTable, ConsumeStats,
ResetOffsetBody, ...) with the key objects written *inline as keys*::

    {"offsetTable":{{"brokerName":"broker-a","queueId":0,"topic":"T"}:{"maxOffset":3,...}}}

That is not JSON, but it is exactly what a 4.9.7 broker sends and what the Java admin
tools (``mqadmin topicStatus``, ``consumerProgress``, the dashboard) decode, so we write
the same. ``loads_lenient`` reads it back (and plain JSON, fastjson's unquoted integer
keys, or keys given as JSON text in a string): a key that is an object or an array comes
back as its canonical JSON text (sorted keys, no spaces), which ``MessageQueue.from_key``
turns into a queue.

Sets of queues (LOCK_BATCH_MQ bodies) are plain JSON arrays of the same objects.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from ledgermq.errors import RemoteProtocolError

_SORTED = orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS


@dataclass(frozen=True, slots=True, order=True)
class MessageQueue:
    """RocketMQ ``MessageQueue``; ordered as the clients sort queues (topic, broker, id)."""

    topic: str
    broker_name: str
    queue_id: int

    def to_json(self) -> dict[str, Any]:
        return {"brokerName": self.broker_name, "queueId": self.queue_id, "topic": self.topic}

    @classmethod
    def from_json(cls, doc: Any) -> MessageQueue:
        if not isinstance(doc, dict):
            raise RemoteProtocolError(f"a message queue must be an object, got {doc!r}")
        try:
            return cls(str(doc["topic"]), str(doc.get("brokerName") or ""), int(doc["queueId"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise RemoteProtocolError(f"message queue {doc!r} does not decode: {exc!r}") from exc

    @classmethod
    def from_key(cls, key: str) -> MessageQueue:
        """A map key as ``loads_lenient`` returns it (the queue's JSON text)."""
        try:
            doc = orjson.loads(key)
        except orjson.JSONDecodeError as exc:
            raise RemoteProtocolError(f"map key {key!r} is not a message queue") from exc
        return cls.from_json(doc)


def mq_table(table: Mapping[MessageQueue, Any]) -> orjson.Fragment:
    """``{mq:value,...}`` with inline object keys (sorted), to embed in an orjson document."""
    parts = [
        orjson.dumps(mq.to_json(), option=_SORTED) + b":" + orjson.dumps(value, option=_SORTED)
        for mq, value in sorted(table.items())
    ]
    return orjson.Fragment(b"{" + b",".join(parts) + b"}")


def mq_list(queues: Iterable[MessageQueue]) -> list[dict[str, Any]]:
    return [mq.to_json() for mq in sorted(set(queues))]


def mq_set(items: Any) -> set[MessageQueue]:
    """A JSON array of queue objects (a Java ``Set<MessageQueue>``)."""
    if items is None:
        return set()
    if not isinstance(items, list):
        raise RemoteProtocolError(f"a set of message queues must be an array, got {type(items).__name__}")
    return {MessageQueue.from_json(item) for item in items}


def decode_mq_table(table: Any) -> dict[MessageQueue, Any]:
    """The inner map of a lenient-parsed body, keys turned back into queues."""
    if not isinstance(table, dict):
        raise RemoteProtocolError("a message-queue table must be an object")
    return {MessageQueue.from_key(k): v for k, v in table.items()}


# -- a lenient reader for fastjson output ----------------------------------------------
_WS = re.compile(r"\s*")
_STRING = re.compile(r'"(?:\\.|[^"\\])*"')
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?")
_LITERALS = {"true": True, "false": False, "null": None}


class _Reader:
    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    def fail(self, what: str) -> RemoteProtocolError:
        return RemoteProtocolError(f"body is not fastjson: {what} at offset {self.pos}")

    def skip(self) -> None:
        m = _WS.match(self.text, self.pos)
        self.pos = m.end() if m else self.pos

    def peek(self) -> str:
        self.skip()
        if self.pos >= len(self.text):
            raise self.fail("unexpected end")
        return self.text[self.pos]

    def value(self, depth: int = 0) -> Any:
        if depth > 64:
            raise self.fail("nesting too deep")
        ch = self.peek()
        if ch == "{":
            return self.obj(depth)
        if ch == "[":
            self.pos += 1
            out: list[Any] = []
            if self.peek() == "]":
                self.pos += 1
                return out
            while True:
                out.append(self.value(depth + 1))
                ch = self.peek()
                self.pos += 1
                if ch == "]":
                    return out
                if ch != ",":
                    raise self.fail("expected ',' or ']'")
        if ch == '"':
            m = _STRING.match(self.text, self.pos)
            if m is None:
                raise self.fail("unterminated string")
            self.pos = m.end()
            return orjson.loads(m.group(0))
        m = _NUMBER.match(self.text, self.pos)
        if m is not None:
            self.pos = m.end()
            token = m.group(0)
            return float(token) if any(c in token for c in ".eE") else int(token)
        for word, literal in _LITERALS.items():
            if self.text.startswith(word, self.pos):
                self.pos += len(word)
                return literal
        raise self.fail(f"unexpected {ch!r}")

    def obj(self, depth: int) -> dict[str, Any]:
        self.pos += 1
        out: dict[str, Any] = {}
        if self.peek() == "}":
            self.pos += 1
            return out
        while True:
            key = self.value(depth + 1)
            if isinstance(key, dict | list):
                key = orjson.dumps(key, option=_SORTED).decode()
            elif isinstance(key, bool) or key is None:
                raise self.fail("a key must be a string, a number or an object")
            if self.peek() != ":":
                raise self.fail("expected ':'")
            self.pos += 1
            out[str(key)] = self.value(depth + 1)
            ch = self.peek()
            self.pos += 1
            if ch == "}":
                return out
            if ch != ",":
                raise self.fail("expected ',' or '}'")


def loads_lenient(raw: bytes | str) -> Any:
    """Parse JSON as fastjson writes it: object or array keys, unquoted integer keys."""
    try:
        text = raw.decode("utf-8") if isinstance(raw, bytes | bytearray) else raw
    except UnicodeDecodeError as exc:
        raise RemoteProtocolError(f"body is not UTF-8: {exc}") from exc
    reader = _Reader(text)
    doc = reader.value()
    reader.skip()
    if reader.pos != len(text):
        raise reader.fail("trailing data")
    return doc
