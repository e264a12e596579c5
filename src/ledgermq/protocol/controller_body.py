"""JSON bodies of RocketMQ 5's controller requests, shaped as apache/rocketmq 5.3.x's
``remoting.protocol.body`` classes serialize them (fastjson: ``Map<Long, String>`` keys may
come unquoted; ``protocol.fastjson`` reads both forms and writes standard JSON).

A body that is not the expected shape raises ``RemoteProtocolError`` naming what is wrong,
so a processor answers it with a clear error instead of acting on half a value.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ledgermq.errors import RemoteProtocolError
from ledgermq.protocol import fastjson

__all__ = [
    "BrokerMemberGroup",
    "BrokerReplicasInfo",
    "ElectMasterResponseBody",
    "EpochEntry",
    "EpochEntryCache",
    "ReplicaIdentity",
    "ReplicasInfo",
    "SyncStateSet",
    "decode_broker_names",
    "encode_broker_names",
]

JAVA_LONG_MAX = (1 << 63) - 1


def _obj(raw: bytes, what: str) -> dict[str, Any]:
    doc = fastjson.loads(raw)
    if not isinstance(doc, dict):
        raise RemoteProtocolError(f"{what} body is not a JSON object")
    return doc


def _int(doc: Mapping[str, Any], key: str, what: str, default: int | None = None) -> int:
    value = doc.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise RemoteProtocolError(f"{what}.{key} is not an integer: {value!r}")
    return value


def _opt_int(doc: Mapping[str, Any], key: str, what: str) -> int | None:
    return None if doc.get(key) is None else _int(doc, key, what)


def _ids(value: Any, what: str) -> frozenset[int]:
    if value is None:
        return frozenset()
    if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise RemoteProtocolError(f"{what} is not a list of broker ids: {value!r}")
    return frozenset(value)


def _addr_map(value: Any, what: str) -> dict[int, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise RemoteProtocolError(f"{what} is not a map of broker id to address")
    out: dict[int, str] = {}
    for k, v in value.items():
        try:
            out[int(k)] = str(v)
        except ValueError:
            raise RemoteProtocolError(f"{what} has a key that is not a broker id: {k!r}") from None
    return out


@dataclass(frozen=True, slots=True)
class SyncStateSet:
    """The replicas caught up with the master, and the epoch of this set."""

    sync_state_set: frozenset[int]
    sync_state_set_epoch: int

    def to_json(self) -> dict[str, Any]:
        return {"syncStateSet": sorted(self.sync_state_set), "syncStateSetEpoch": self.sync_state_set_epoch}

    def encode(self) -> bytes:
        return fastjson.dumps(self.to_json())

    @classmethod
    def decode(cls, raw: bytes) -> SyncStateSet:
        doc = _obj(raw, "SyncStateSet")
        return cls(
            _ids(doc.get("syncStateSet"), "SyncStateSet.syncStateSet"),
            _int(doc, "syncStateSetEpoch", "SyncStateSet", 0),
        )


@dataclass(frozen=True, slots=True)
class BrokerMemberGroup:
    cluster: str
    broker_name: str
    broker_addrs: dict[int, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"cluster": self.cluster, "brokerName": self.broker_name, "brokerAddrs": dict(self.broker_addrs)}

    @classmethod
    def from_json(cls, doc: Any) -> BrokerMemberGroup:
        if not isinstance(doc, dict):
            raise RemoteProtocolError("BrokerMemberGroup is not a JSON object")
        return cls(
            str(doc.get("cluster") or ""),
            str(doc.get("brokerName") or ""),
            _addr_map(doc.get("brokerAddrs"), "BrokerMemberGroup.brokerAddrs"),
        )


@dataclass(frozen=True, slots=True)
class ElectMasterResponseBody:
    broker_member_group: BrokerMemberGroup | None
    sync_state_set: frozenset[int]

    def encode(self) -> bytes:
        doc: dict[str, Any] = {"syncStateSet": sorted(self.sync_state_set)}
        if self.broker_member_group is not None:
            doc["brokerMemberGroup"] = self.broker_member_group.to_json()
        return fastjson.dumps(doc)

    @classmethod
    def decode(cls, raw: bytes) -> ElectMasterResponseBody:
        doc = _obj(raw, "ElectMasterResponseBody")
        group = doc.get("brokerMemberGroup")
        return cls(
            None if group is None else BrokerMemberGroup.from_json(group),
            _ids(doc.get("syncStateSet"), "ElectMasterResponseBody.syncStateSet"),
        )


@dataclass(frozen=True, slots=True)
class ReplicaIdentity:
    broker_name: str
    broker_id: int
    broker_address: str
    alive: bool

    def to_json(self) -> dict[str, Any]:
        return {
            "brokerName": self.broker_name,
            "brokerId": self.broker_id,
            "brokerAddress": self.broker_address,
            "alive": self.alive,
        }

    @classmethod
    def from_json(cls, doc: Any) -> ReplicaIdentity:
        if not isinstance(doc, dict):
            raise RemoteProtocolError("ReplicaIdentity is not a JSON object")
        return cls(
            str(doc.get("brokerName") or ""),
            _int(doc, "brokerId", "ReplicaIdentity"),
            str(doc.get("brokerAddress") or ""),
            bool(doc.get("alive")),
        )

    def __str__(self) -> str:
        # mqadmin getSyncStateSet prints Java's toString.
        return (
            f"ReplicaIdentity{{brokerName='{self.broker_name}', brokerId={self.broker_id}, "
            f"brokerAddress='{self.broker_address}', alive={str(self.alive).lower()}}}"
        )


@dataclass(frozen=True, slots=True)
class ReplicasInfo:
    master_broker_id: int | None
    master_address: str | None
    master_epoch: int
    sync_state_set_epoch: int
    in_sync_replicas: tuple[ReplicaIdentity, ...]
    not_in_sync_replicas: tuple[ReplicaIdentity, ...]

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "masterEpoch": self.master_epoch,
            "syncStateSetEpoch": self.sync_state_set_epoch,
            "inSyncReplicas": [r.to_json() for r in self.in_sync_replicas],
            "notInSyncReplicas": [r.to_json() for r in self.not_in_sync_replicas],
        }
        if self.master_broker_id is not None:
            doc["masterBrokerId"] = self.master_broker_id
        if self.master_address is not None:
            doc["masterAddress"] = self.master_address
        return doc

    @classmethod
    def from_json(cls, doc: Any) -> ReplicasInfo:
        if not isinstance(doc, dict):
            raise RemoteProtocolError("ReplicasInfo is not a JSON object")

        def replicas(key: str) -> tuple[ReplicaIdentity, ...]:
            value = doc.get(key) or []
            if not isinstance(value, list):
                raise RemoteProtocolError(f"ReplicasInfo.{key} is not a list")
            return tuple(ReplicaIdentity.from_json(r) for r in value)

        addr = doc.get("masterAddress")
        return cls(
            _opt_int(doc, "masterBrokerId", "ReplicasInfo"),
            None if addr is None else str(addr),
            _int(doc, "masterEpoch", "ReplicasInfo", 0),
            _int(doc, "syncStateSetEpoch", "ReplicasInfo", 0),
            replicas("inSyncReplicas"),
            replicas("notInSyncReplicas"),
        )


@dataclass(frozen=True, slots=True)
class BrokerReplicasInfo:
    """GET_SYNC_STATE_DATA's answer: per broker name, its master, epochs and replicas."""

    replicas_info_table: dict[str, ReplicasInfo]

    def encode(self) -> bytes:
        return fastjson.dumps({"replicasInfoTable": {k: v.to_json() for k, v in self.replicas_info_table.items()}})

    @classmethod
    def decode(cls, raw: bytes) -> BrokerReplicasInfo:
        doc = _obj(raw, "BrokerReplicasInfo")
        table = doc.get("replicasInfoTable") or {}
        if not isinstance(table, dict):
            raise RemoteProtocolError("BrokerReplicasInfo.replicasInfoTable is not a JSON object")
        return cls({str(k): ReplicasInfo.from_json(v) for k, v in table.items()})


@dataclass(frozen=True, slots=True)
class EpochEntry:
    epoch: int
    start_offset: int
    end_offset: int = JAVA_LONG_MAX

    def __str__(self) -> str:
        return f"EpochEntry{{epoch={self.epoch}, startOffset={self.start_offset}, endOffset={self.end_offset}}}"


@dataclass(frozen=True, slots=True)
class EpochEntryCache:
    """GET_BROKER_EPOCH_CACHE's answer (from a broker): its epoch history and max offset."""

    cluster_name: str
    broker_name: str
    broker_id: int
    epoch_list: tuple[EpochEntry, ...]
    max_offset: int

    def encode(self) -> bytes:
        return fastjson.dumps(
            {
                "clusterName": self.cluster_name,
                "brokerName": self.broker_name,
                "brokerId": self.broker_id,
                "epochList": [
                    {"epoch": e.epoch, "startOffset": e.start_offset, "endOffset": e.end_offset}
                    for e in self.epoch_list
                ],
                "maxOffset": self.max_offset,
            }
        )

    @classmethod
    def decode(cls, raw: bytes) -> EpochEntryCache:
        doc = _obj(raw, "EpochEntryCache")
        entries = doc.get("epochList") or []
        if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
            raise RemoteProtocolError("EpochEntryCache.epochList is not a list of objects")
        return cls(
            str(doc.get("clusterName") or ""),
            str(doc.get("brokerName") or ""),
            _int(doc, "brokerId", "EpochEntryCache", 0),
            tuple(
                EpochEntry(
                    _int(e, "epoch", "EpochEntry"),
                    _int(e, "startOffset", "EpochEntry", 0),
                    _int(e, "endOffset", "EpochEntry", JAVA_LONG_MAX),
                )
                for e in entries
            ),
            _int(doc, "maxOffset", "EpochEntryCache", 0),
        )


def encode_broker_names(names: Iterable[str]) -> bytes:
    """GET_SYNC_STATE_DATA's request body: a JSON list of broker names."""
    return fastjson.dumps(list(names))


def decode_broker_names(raw: bytes) -> list[str]:
    doc = fastjson.loads(raw)
    if not isinstance(doc, list) or not all(isinstance(n, str) for n in doc):
        raise RemoteProtocolError("the body is not a JSON list of broker names")
    return list(doc)
