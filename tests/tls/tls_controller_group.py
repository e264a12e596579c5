"""A controller-mode group with TLS on, as real processes: a name server, a controller (one
node inside the name server, or three standalone ``ledgermq controller`` nodes) and brokers
in controller mode, every one with the same TLS keys (``TlsCluster``'s server keys).

Timing is the controller-mode process tests' (tests/ha/controller_group.py), with the
controller's heartbeat timeout at its 1.5 s default: a SIGKILLed master is seen at once (its
connection closes), and TLS handshakes on a loaded machine do not depose a live one.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from ledgermq.admin.client import AdminClient
from ledgermq.client.tls import TlsOptions
from tests.compat.cluster import HOST, free_port, tcp_open, wait_until
from tests.ha.controller_group import BROKER_KEYS, CONTROLLER_KEYS
from tests.tls.tls_group import CLUSTER, GROUP, Member, TlsCluster

HEARTBEAT_TIMEOUT_MS = 1500
CONTROLLER_IDS = ("c0", "c1", "c2")


class TlsControllerGroup(TlsCluster):
    """``embedded``: the controller runs inside the name server; else three standalone nodes."""

    def __init__(self, root: Path, server_keys: str, *, embedded: bool) -> None:
        super().__init__(root, server_keys)
        self.embedded = embedded
        self.controllers: list[Member] = []
        timing = CONTROLLER_KEYS + f"controllerHeartBeatTimeoutMills={HEARTBEAT_TIMEOUT_MS}\n"
        if embedded:
            raft_port = free_port()
            self.raft_ports = [raft_port]
            (root / "namesrv.properties").write_text(
                self.server_keys + "enableControllerInNamesrv=true\ncontrollerDLegerGroup=tls-ctl\n"
                f"controllerDLegerPeers=n0-{HOST}:{raft_port}\ncontrollerDLegerSelfId=n0\n"
                f"controllerStorePath={root / 'controller'}\n{timing}"
            )
            self.controller_addr = self.namesrv.addr  # it answers controller requests on its own port too
        else:
            self.raft_ports = [free_port() for _ in CONTROLLER_IDS]
            peers = ";".join(f"{c}-{HOST}:{p}" for c, p in zip(CONTROLLER_IDS, self.raft_ports, strict=True))
            for c, port in zip(CONTROLLER_IDS, self.raft_ports, strict=True):
                conf = root / f"{c}.properties"
                conf.write_text(
                    self.server_keys + f"controllerDLegerGroup=tls-ctl\ncontrollerDLegerPeers={peers}\n"
                    f"controllerDLegerSelfId={c}\ncontrollerStorePath={root / c}\n{timing}"
                )
                self.controllers.append(self._member(c, port, ["controller", "-c", str(conf), "--host", HOST]))
            self.controller_addr = ";".join(f"{HOST}:{p}" for p in self.raft_ports)

    def controlled_broker(self, name: str) -> Member:
        """A replica whose id and role the controller decides (no brokerId, no brokerRole)."""
        port = free_port(span=3)
        store = self.root / name / "store"
        store.mkdir(parents=True, exist_ok=True)
        props: dict[str, object] = {
            "brokerClusterName": CLUSTER,
            "brokerName": GROUP,
            "brokerIP1": HOST,
            "listenHost": HOST,
            "listenPort": port,
            "namesrvAddr": self.namesrv.addr,
            "storePathRootDir": store,
            "mappedFileSizeCommitLog": 1024 * 1024,
            "registerNameServerPeriod": 1000,
            **BROKER_KEYS,
            "controllerHeartBeatTimeoutMills": HEARTBEAT_TIMEOUT_MS,
            "controllerAddr": self.controller_addr,
            "allAckInSyncStateSet": "true",
        }
        conf = self.root / name / "broker.properties"
        conf.write_text("".join(f"{k}={v}\n" for k, v in props.items()) + self.server_keys)
        return self._member(name, port, ["broker", "-c", str(conf)])

    def start_controllers(self) -> None:
        """The name server (with the controller inside, or beside three nodes), all ports open."""
        self.start(self.namesrv)
        for c in self.controllers:
            c.server.start()
        for m, port in zip(self.controllers or [self.namesrv], self.raft_ports, strict=True):
            wait_until(f"{m.name}'s Raft port", lambda m=m, port=port: m.server.check_alive() and tcp_open(port), 20)

    def info(self, broker: Member, tls: TlsOptions) -> dict[str, str]:
        """The broker's GET_BROKER_RUNTIME_INFO table over TLS ({} when it does not answer)."""

        async def ask() -> dict[str, str]:
            async with AdminClient(self.namesrv.addr, timeout=2.0, connect_timeout=1.0, tls=tls) as admin:
                return await admin.broker_runtime_info(broker.addr)

        try:
            return asyncio.run(ask())
        except Exception:
            return {}

    def wait_role(self, broker: Member, role: str, tls: TlsOptions, timeout: float = 30.0) -> dict[str, str]:
        seen: dict[str, str] = {}

        def check() -> bool:
            broker.server.check_alive()
            seen.clear()
            seen.update(self.info(broker, tls))
            return seen.get("controllerRole") == role

        wait_until(f"{broker.name} to serve as {role}", check, timeout, 0.1, lambda: f"{seen}\n{self.explain()}")
        return seen

    def wait_in_sync(self, master: Member, size: int, tls: TlsOptions, timeout: float = 30.0) -> dict[str, str]:
        seen: dict[str, str] = {}

        def check() -> bool:
            seen.clear()
            seen.update(self.info(master, tls))
            return len([m for m in seen.get("syncStateSet", "").split(",") if m]) == size

        wait_until(f"a SyncStateSet of {size}", check, timeout, 0.1, lambda: f"{seen}\n{self.explain()}")
        return seen
