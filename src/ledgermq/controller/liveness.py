"""Which brokers this controller node hears from (RocketMQ's DefaultBrokerHeartbeatManager), pure.

Brokers send BROKER_HEARTBEAT to every controller node, so each node keeps its own table
and a newly elected leader already knows who is alive. The table is local: it is not in
the replicated log (a heartbeat every few hundred milliseconds per broker would grow a log
that has no snapshots without bound). The leader turns what it sees here into replicated
BROKER_HEARTBEAT / BROKER_INACTIVE events on transitions only.

A broker is gone when nothing came from it for its timeout: the ``heartbeatTimeoutMills``
it sends in each heartbeat (RocketMQ's broker key controllerHeartBeatTimeoutMills), or the
controller's ``defaultHeartbeatTimeoutMills`` when it sends none; or at once when the
connection its heartbeats came on closes. Time is an input (milliseconds, monotonic).
"""

from __future__ import annotations

from dataclasses import dataclass

from ledgermq.controller.events import CandidateInfo

__all__ = ["BrokerKey", "LiveInfo", "Liveness"]

BrokerKey = tuple[str, int]
"""(brokerName, brokerId)."""


@dataclass(slots=True)
class LiveInfo:
    cluster_name: str
    broker_name: str
    broker_id: int
    address: str
    last_seen_ms: int
    timeout_ms: int
    epoch: int = -1
    max_offset: int = -1
    confirm_offset: int = -1
    election_priority: int = 2**31 - 1
    connection: object | None = None

    def candidate(self) -> CandidateInfo:
        return CandidateInfo(self.broker_id, self.epoch, self.max_offset, self.election_priority)


class Liveness:
    def __init__(self, default_timeout_ms: int) -> None:
        if default_timeout_ms <= 0:
            raise ValueError("default_timeout_ms must be positive")
        self.default_timeout_ms = default_timeout_ms
        self.table: dict[BrokerKey, LiveInfo] = {}

    def heartbeat(
        self,
        now_ms: int,
        cluster_name: str,
        broker_name: str,
        broker_id: int,
        address: str,
        *,
        timeout_ms: int | None = None,
        epoch: int | None = None,
        max_offset: int | None = None,
        confirm_offset: int | None = None,
        election_priority: int | None = None,
        connection: object | None = None,
    ) -> bool:
        """Record a heartbeat; True when this broker was not counted alive before."""
        key = (broker_name, broker_id)
        timeout = timeout_ms if timeout_ms is not None and timeout_ms > 0 else self.default_timeout_ms
        prev = self.table.get(key)
        fresh = prev is None or not self._alive(prev, now_ms)
        if prev is None or fresh:
            prev = self.table[key] = LiveInfo(cluster_name, broker_name, broker_id, address, now_ms, timeout)
        prev.last_seen_ms = max(prev.last_seen_ms, now_ms)
        prev.timeout_ms = timeout
        prev.address = address
        prev.connection = connection
        if election_priority is not None:
            prev.election_priority = election_priority
        # As RocketMQ: epoch and offsets only move forward (a reordered heartbeat cannot undo them).
        e = -1 if epoch is None else epoch
        o = -1 if max_offset is None else max_offset
        if e > prev.epoch or (e == prev.epoch and o > prev.max_offset):
            prev.epoch, prev.max_offset = e, o
            prev.confirm_offset = -1 if confirm_offset is None else confirm_offset
        return fresh

    @staticmethod
    def _alive(info: LiveInfo, now_ms: int) -> bool:
        return now_ms - info.last_seen_ms <= info.timeout_ms

    def is_alive(self, broker_name: str, broker_id: int, now_ms: int) -> bool:
        info = self.table.get((broker_name, broker_id))
        return info is not None and self._alive(info, now_ms)

    def info(self, broker_name: str, broker_id: int) -> LiveInfo | None:
        return self.table.get((broker_name, broker_id))

    def expire(self, now_ms: int) -> list[LiveInfo]:
        """Drop and return the brokers whose timeout passed."""
        gone = [i for i in self.table.values() if not self._alive(i, now_ms)]
        for i in gone:
            del self.table[(i.broker_name, i.broker_id)]
        return gone

    def connection_closed(self, connection: object) -> list[LiveInfo]:
        """Drop and return the brokers whose heartbeats came on ``connection``."""
        gone = [i for i in self.table.values() if i.connection is connection]
        for i in gone:
            del self.table[(i.broker_name, i.broker_id)]
        return gone

    def candidates(self, broker_name: str, now_ms: int) -> tuple[CandidateInfo, ...]:
        """What heartbeats say about the alive replicas of ``broker_name``, for an election."""
        return tuple(
            sorted(
                (i.candidate() for (n, _), i in self.table.items() if n == broker_name and self._alive(i, now_ms)),
                key=lambda c: c.broker_id,
            )
        )
