"""The controller's log entries: one event per operation, applied in log order on every node.

An event carries everything its outcome depends on besides the state it is applied to: the
request's fields, the leader's wall-clock time (``now_ms``), the leader's
``enableElectUncleanMaster`` and, for an election, what the leader's heartbeats said about
each candidate (epoch, max offset, priority). Applying the same log therefore gives the same
state and the same answers on every node, whatever their clocks or configs say, and a
refusal is decided when the event is applied, never on a view that may have moved since.

Entries are JSON objects ``{"v": 1, "rid": ..., "type": ..., ...}``; ``rid`` identifies the
proposal so the node that proposed it can hand the answer back to its caller. An entry that
does not decode is refused by the state machine (``EventFormatError``), the same way on
every node.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar

import orjson

from ledgermq.errors import LedgerError

__all__ = [
    "AlterSyncStateSet",
    "ApplyBrokerId",
    "BrokerHeartbeat",
    "BrokerInactive",
    "CandidateInfo",
    "CleanBrokerData",
    "ElectMaster",
    "Event",
    "EventFormatError",
    "RegisterBroker",
    "decode_entry",
    "encode_entry",
]

FORMAT_VERSION = 1


class EventFormatError(LedgerError):
    """A log entry that is not a controller event this version understands."""


@dataclass(frozen=True, slots=True)
class CandidateInfo:
    """What the leader's heartbeats last said about one replica (RocketMQ's BrokerLiveInfo)."""

    broker_id: int
    epoch: int = -1
    max_offset: int = -1
    election_priority: int = 2**31 - 1


@dataclass(frozen=True, slots=True)
class ApplyBrokerId:
    TYPE: ClassVar[str] = "APPLY_BROKER_ID"
    cluster_name: str
    broker_name: str
    broker_id: int
    register_check_code: str

    @property
    def broker_address(self) -> str:
        """RocketMQ's registerCheckCode is ``<address>;<disk-unique value>``."""
        return self.register_check_code.split(";", 1)[0]


@dataclass(frozen=True, slots=True)
class RegisterBroker:
    TYPE: ClassVar[str] = "REGISTER_BROKER"
    cluster_name: str
    broker_name: str
    broker_id: int
    broker_address: str


@dataclass(frozen=True, slots=True)
class BrokerHeartbeat:
    """The leader heard from a replica it does not count as alive: mark it alive."""

    TYPE: ClassVar[str] = "BROKER_HEARTBEAT"
    broker_name: str
    broker_id: int
    now_ms: int


@dataclass(frozen=True, slots=True)
class BrokerInactive:
    """The leader's heartbeat timeout (or a closed connection) says the replica is gone."""

    TYPE: ClassVar[str] = "BROKER_INACTIVE"
    broker_name: str
    broker_id: int
    now_ms: int


@dataclass(frozen=True, slots=True)
class AlterSyncStateSet:
    TYPE: ClassVar[str] = "ALTER_SYNC_STATE_SET"
    broker_name: str
    master_broker_id: int
    master_epoch: int
    sync_state_set: frozenset[int]
    sync_state_set_epoch: int


@dataclass(frozen=True, slots=True)
class ElectMaster:
    """``broker_id`` -1: the controller's own trigger; ``designate``: elect exactly that replica."""

    TYPE: ClassVar[str] = "ELECT_MASTER"
    broker_name: str
    broker_id: int
    designate: bool
    unclean: bool
    candidates: tuple[CandidateInfo, ...]
    now_ms: int


@dataclass(frozen=True, slots=True)
class CleanBrokerData:
    """``broker_ids`` None: the whole group; otherwise those replicas."""

    TYPE: ClassVar[str] = "CLEAN_BROKER_DATA"
    broker_name: str
    broker_ids: frozenset[int] | None
    clean_living: bool


Event = (
    ApplyBrokerId
    | RegisterBroker
    | BrokerHeartbeat
    | BrokerInactive
    | AlterSyncStateSet
    | ElectMaster
    | CleanBrokerData
)

_TYPES: dict[str, type[Any]] = {
    cls.TYPE: cls
    for cls in (
        ApplyBrokerId,
        RegisterBroker,
        BrokerHeartbeat,
        BrokerInactive,
        AlterSyncStateSet,
        ElectMaster,
        CleanBrokerData,
    )
}


def _to_json(event: Event) -> dict[str, Any]:
    doc: dict[str, Any] = {"type": event.TYPE}
    for f in dataclasses.fields(event):
        name = f.name
        value = getattr(event, name)
        if isinstance(value, frozenset):
            value = sorted(value)
        elif name == "candidates":
            value = [[c.broker_id, c.epoch, c.max_offset, c.election_priority] for c in value]
        doc[name] = value
    return doc


def encode_entry(event: Event, request_id: str = "") -> bytes:
    doc = _to_json(event)
    doc["v"] = FORMAT_VERSION
    doc["rid"] = request_id
    return orjson.dumps(doc)


def _field(doc: dict[str, Any], name: str, kind: type | tuple[type, ...]) -> Any:
    value = doc.get(name)
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is int):
        raise EventFormatError(f"field {name!r} is {value!r}, not {getattr(kind, '__name__', kind)}")
    return value


def _ids(value: Any, name: str) -> frozenset[int]:
    if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise EventFormatError(f"field {name!r} is not a list of broker ids")
    return frozenset(value)


def decode_entry(data: bytes) -> tuple[Event, str]:
    """The event in a log entry and its request id; EventFormatError for anything else."""
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise EventFormatError(f"not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise EventFormatError("not a JSON object")
    if doc.get("v") != FORMAT_VERSION:
        raise EventFormatError(f"format version {doc.get('v')!r}, this controller reads {FORMAT_VERSION}")
    cls = _TYPES.get(str(doc.get("type")))
    if cls is None:
        raise EventFormatError(f"unknown event type {doc.get('type')!r}")
    kwargs: dict[str, Any] = {}
    hints = {"str": str, "int": int, "bool": bool}
    for f in dataclasses.fields(cls):
        name, annotation = f.name, str(f.type)
        if name == "candidates":
            rows = doc.get(name)
            if not isinstance(rows, list) or not all(
                isinstance(r, list) and len(r) == 4 and all(isinstance(x, int) for x in r) for r in rows
            ):
                raise EventFormatError("field 'candidates' is not a list of [id, epoch, maxOffset, priority]")
            kwargs[name] = tuple(CandidateInfo(*r) for r in rows)
        elif annotation.startswith("frozenset[int] | None"):
            raw = doc.get(name)
            kwargs[name] = None if raw is None else _ids(raw, name)
        elif annotation.startswith("frozenset"):
            kwargs[name] = _ids(doc.get(name), name)
        else:
            kwargs[name] = _field(doc, name, hints[annotation])
    rid = doc.get("rid", "")
    return cls(**kwargs), rid if isinstance(rid, str) else ""
