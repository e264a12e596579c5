"""``cluster up --mode controller``: a name server with the controller inside and two
brokers in controller mode, their files, and how to see who is master now.

The choices, for a development cluster that fails over by itself:

* one controller node inside the name server (``enableControllerInNamesrv``); its Raft port
  is the name server's port + 1 and brokers reach it on the name server's own port
  (``controllerAddr`` = the name server), as RocketMQ 5.0 did;
* ``allAckInSyncStateSet=true``: SEND_OK only once every SyncStateSet member holds the
  message, so a master's death loses nothing it acknowledged;
* ``minInSyncReplicas=1``: when the slave dies or falls behind, the master drops it from
  the set (after ``haMaxTimeSlaveNotCatchup``) and goes on taking writes alone, instead of
  refusing them until the slave is back. The price: while the set is the master alone, a
  master's loss loses what it acknowledged meanwhile (no member could be elected anyway);
* the controller's ``controllerHeartBeatTimeoutMills`` matches the brokers' (1.5 s) and
  it scans for silent brokers every 200 ms, so a hung master is replaced within ~2 s; a
  killed one is seen at once (its connection closes).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ledgermq.admin.client import AdminClient
from ledgermq.client.tls import TlsOptions
from ledgermq.clock import SYSTEM_CLOCK
from ledgermq.errors import LedgerError

CONTROLLER_GROUP = "ledgermq-controller"
CONTROLLER_SELF_ID = "n0"
HEARTBEAT_TIMEOUT_MS = 1500  # the brokers' default (broker/controller_mode/config.py)

ASK_TIMEOUT_S = 0.5


def namesrv_properties(raft_addr: str, store: Path) -> str:
    """The name server's file: one controller node inside it."""
    return "\n".join(
        [
            "enableControllerInNamesrv=true",
            f"controllerDLegerGroup={CONTROLLER_GROUP}",
            f"controllerDLegerPeers={CONTROLLER_SELF_ID}-{raft_addr}",
            f"controllerDLegerSelfId={CONTROLLER_SELF_ID}",
            f"controllerStorePath={store}",
            f"controllerHeartBeatTimeoutMills={HEARTBEAT_TIMEOUT_MS}",
            "scanNotActiveBrokerInterval=200",
            "scanInactiveMasterInterval=1000",
            "",
        ]
    )


def broker_properties(
    group: str, port: int, namesrv: str, store: Path, host: str, advertised: str, metrics_port: int
) -> str:
    """A replica of ``group``; the controller decides its id and role (no brokerId, no brokerRole)."""
    return "\n".join(
        [
            "brokerClusterName=DefaultCluster",
            f"brokerName={group}",
            f"brokerIP1={advertised}",
            f"listenHost={host}",
            f"listenPort={port}",
            f"metricsPort={metrics_port}",
            f"namesrvAddr={namesrv}",
            f"storePathRootDir={store}",
            "mappedFileSizeCommitLog=104857600",
            "enableControllerMode=true",
            f"controllerAddr={namesrv}",
            "allAckInSyncStateSet=true",
            "minInSyncReplicas=1",
            "",
        ]
    )


@dataclass(frozen=True)
class ReplicaState:
    role: str  # the broker's controllerRole (MASTER, SLAVE, STARTING, SWITCHING), "down" when it does not answer
    controller_id: str
    sync_state_set: str  # the master's accepted set: "1,2"


def replica_states(namesrv: str, addrs: list[str], tls: TlsOptions | None = None) -> dict[str, ReplicaState]:
    """Each broker's own word on its role (GET_BROKER_RUNTIME_INFO), one short query each
    (over TLS with ``tls``: a ``--tls`` cluster's brokers take nothing else)."""

    async def ask() -> dict[str, ReplicaState]:
        out: dict[str, ReplicaState] = {}
        async with AdminClient(namesrv, timeout=ASK_TIMEOUT_S, connect_timeout=ASK_TIMEOUT_S, tls=tls) as admin:
            for addr in addrs:
                try:
                    info = await admin.broker_runtime_info(addr)
                except (LedgerError, OSError, TimeoutError):
                    out[addr] = ReplicaState("down", "", "")
                    continue
                out[addr] = ReplicaState(
                    info.get("controllerRole", "?"), info.get("brokerControllerId", ""), info.get("syncStateSet", "")
                )
        return out

    try:
        return asyncio.run(ask())
    except (LedgerError, OSError, TimeoutError):
        return {addr: ReplicaState("down", "", "") for addr in addrs}


def wait_in_sync(
    namesrv: str, addrs: list[str], timeout: float, poll_s: float = 0.2, tls: TlsOptions | None = None
) -> dict[str, ReplicaState]:
    """Until one replica is master with every replica in its SyncStateSet (bounded: the
    last states seen either way). Until then a master's loss would have no one to elect."""
    deadline = SYSTEM_CLOCK.monotonic() + timeout
    while True:
        states = replica_states(namesrv, addrs, tls)
        masters = [s for s in states.values() if s.role == "MASTER"]
        if len(masters) == 1 and len([m for m in masters[0].sync_state_set.split(",") if m]) == len(addrs):
            return states
        if SYSTEM_CLOCK.monotonic() >= deadline:
            return states
        time.sleep(poll_s)


class RoleWatch:
    """Called on every supervision poll: every ``every_s`` it asks each broker its role and
    says when one changed ("broker-a 2 (...) is now MASTER (in sync: 2)") or the master's
    SyncStateSet did, so the operator sees the failover and the slave's return."""

    def __init__(
        self,
        namesrv: str,
        labels: dict[str, str],
        echo: Callable[[str], None],
        every_s: float = 0.5,
        clock: Callable[[], float] = SYSTEM_CLOCK.monotonic,
        tls: TlsOptions | None = None,
    ) -> None:
        self.namesrv = namesrv
        self.tls = tls
        self.labels = labels  # addr -> "broker-a 1"
        self.echo = echo
        self.every_s = every_s
        self.clock = clock
        self.seen: dict[str, tuple[str, str]] = {}  # addr -> (role, SyncStateSet as a master sees it)
        self._next = 0.0

    def seed(self, states: dict[str, ReplicaState]) -> None:
        self.seen = {addr: _shown(s) for addr, s in states.items()}

    def __call__(self) -> None:
        now = self.clock()
        if now < self._next:
            return
        self._next = now + self.every_s
        for addr, state in replica_states(self.namesrv, list(self.labels), self.tls).items():
            if state.role not in ("MASTER", "SLAVE") or self.seen.get(addr) == _shown(state):
                continue  # down, starting or switching: the supervisor's lines say what happens
            before = self.seen.get(addr, ("", ""))
            self.seen[addr] = _shown(state)
            sss = f" (in sync: {state.sync_state_set or '-'})" if state.role == "MASTER" else ""
            if before[0] == state.role:
                self.echo(f"{self.labels[addr]} ({addr}) master, in sync now: {state.sync_state_set or '-'}")
            else:
                self.echo(f"{self.labels[addr]} ({addr}) is now {state.role}{sss}")


def _shown(state: ReplicaState) -> tuple[str, str]:
    return state.role, state.sync_state_set if state.role == "MASTER" else ""
