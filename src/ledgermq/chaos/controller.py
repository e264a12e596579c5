"""``ControllerLayout``: a master-slave group in controller mode, as real processes.

Two brokers b1 and b2 of one group in controller mode (``enableControllerMode=true``,
``allAckInSyncStateSet=true``, ``minInSyncReplicas=1``); the controller decides which is
master, so ``current_master`` asks the controller (its GET_REPLICA_INFO), never assumes.
The controller is either

* one node inside the name server (``enableControllerInNamesrv``), as ``cluster up
  --mode controller`` runs it; or
* three standalone nodes c0, c1, c2 (``ledgermq controller``) beside a plain name server,
  when the run hits the controller itself (its leader killed or isolated).

**Links through fault proxies** (on 127.0.0.2, which Linux routes to loopback), so one
broker can be isolated from its peer and from the controller while clients still reach
it (its listen port and the name server stay direct):

* ``ha:bX->bY``: bX's replication connection to bY's HA port. Every broker binds its HA
  port on 127.0.0.1 and advertises ``brokerIP2=127.0.0.2`` (the HA address a slave learns
  from its master's config), where the proxy listens;
* ``ctl:bX->cK``: bX's requests and heartbeats to controller node cK (bX's
  ``controllerAddr`` lists its proxies);
* ``raft:cJ->cK`` (three nodes): cJ's Raft messages to cK, as the DLedger layout does it
  (each node's ``controllerDLegerPeers`` names the others by proxy).

With ``tls`` (``chaos run --tls``) every process, the controller nodes included, runs in
enforcing mode with mutual TLS: the brokers' requests and heartbeats to the controller and
the controller's Raft messages go over TLS through their proxies, and the harness asks the
controller and the brokers over TLS with the run's client certificate.

What is not proxied: the controller's NOTIFY_BROKER_ROLE_CHANGED (sent to a broker's listen
address), and a controller request a broker sends to the leader address a follower named
in a CONTROLLER_NOT_LEADER answer (it goes through that follower's Raft proxy instead; a
broker's heartbeats, which carry its lease, always use its own proxies).
"""

from __future__ import annotations

import time
from pathlib import Path

from ledgermq.chaos.layout import (
    CLUSTER,
    CQ_SEGMENT,
    HOST,
    PROXY_HOST,
    SEGMENT,
    START_TIMEOUT_S,
    Link,
    Node,
    ProcessLayout,
    Stability,
    _poll,
    node_env,
)
from ledgermq.chaos.process import ChildProcess
from ledgermq.chaos.tls import ChaosTls
from ledgermq.client.instance.tls import client_tls
from ledgermq.controller.client import ControllerClient
from ledgermq.net.tls.profile import ClientTls
from ledgermq.protocol.route import TopicRouteData
from ledgermq.testing.ports import free_port

GROUP = "chaos-ctl"
BROKERS = ("b1", "b2")
CONTROLLER_IDS = ("c0", "c1", "c2")
RAFT_HEARTBEAT_MS = 100
RAFT_ELECTION_TIMEOUT_MS = 800
HEARTBEAT_TIMEOUT_MS = 1500  # the brokers' default; the controller uses the same
ROLES = ("MASTER", "SLAVE")
# What every controller node gets (standalone or inside the name server).
CONTROLLER_KEYS: dict[str, object] = {
    "controllerDLegerGroup": "chaos-controller",
    "controllerHeartBeatTimeoutMills": HEARTBEAT_TIMEOUT_MS,
    "scanNotActiveBrokerInterval": 200,
    "scanInactiveMasterInterval": 1000,
    "controllerDLegerHeartBeatIntervalMs": RAFT_HEARTBEAT_MS,
    "controllerDLegerElectionTimeoutMs": RAFT_ELECTION_TIMEOUT_MS,
    "mappedFileSize": 1 << 20,
}


def _write(path: Path, props: dict[str, object]) -> Path:
    path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    return path


class ControllerLayout(ProcessLayout):
    """``ControllerLayout(root, controllers=1)``; ``await start()``; ... ; ``close()``."""

    name = "controller"
    roles_move = True

    def __init__(
        self,
        root: Path,
        *,
        controllers: int = 1,
        extra_props: dict[str, object] | None = None,
        tls: ChaosTls | None = None,
    ) -> None:
        if controllers not in (1, 3):
            raise ValueError(f"a controller group of {controllers} nodes: choose 1 (inside the name server) or 3")
        super().__init__(root, tls)
        # The harness's own controller requests (it installs no process TLS profile).
        self._controller_tls: ClientTls | None = client_tls(tls is not None, self.client_tls)
        self.controller_ids = CONTROLLER_IDS[:controllers]
        self.embedded = controllers == 1
        # A controller node's real address: the name server's port when embedded (it also
        # answers there), else its Raft port.
        self.raft_ports = {c: free_port() for c in self.controller_ids}
        self.controller_ports = {
            c: self.namesrv_port if self.embedded else self.raft_ports[c] for c in self.controller_ids
        }
        self.broker_ports = {b: free_port(span=2) for b in BROKERS}
        self._links = self._plan_links()
        self.controllers: dict[str, ChildProcess] = {}
        if self.embedded:
            conf = _write(self.root / "namesrv.properties", self._controller_props("c0"))
            self.namesrv = ChildProcess(
                "namesrv",
                ["namesrv", "-c", str(conf), "-p", str(self.namesrv_port), "--host", HOST,
                 "--kv-config", str(self.root / "kvConfig.json")],
                self.root / "logs" / "namesrv.log",
            )  # fmt: skip
        else:
            for c in self.controller_ids:
                (self.root / c).mkdir(parents=True, exist_ok=True)
                conf = _write(self.root / c / "controller.properties", self._controller_props(c))
                self.controllers[c] = ChildProcess(
                    c, ["controller", "-c", str(conf), "--host", HOST], self.root / "logs" / f"{c}.log"
                )
        self.nodes = {b: self._node(b, extra_props or {}) for b in BROKERS}

    # -- configuration ----------------------------------------------------------------
    def _plan_links(self) -> list[Link]:
        """HA links between the brokers, each broker's link to each controller node, and
        (three nodes) the controller's Raft links."""
        links: list[Link] = []
        for src in BROKERS:
            for dst in BROKERS:
                if src != dst:
                    ha = self.broker_ports[dst] + 1
                    links.append(Link(f"ha:{src}->{dst}", (PROXY_HOST, ha), (HOST, ha)))
            for c in self.controller_ids:
                links.append(Link(f"ctl:{src}->{c}", (PROXY_HOST, free_port()), (HOST, self.controller_ports[c])))
        if not self.embedded:
            for src in self.controller_ids:
                for dst in self.controller_ids:
                    if src != dst:
                        links.append(
                            Link(f"raft:{src}->{dst}", (PROXY_HOST, free_port()), (HOST, self.raft_ports[dst]))
                        )
        return links

    def _link(self, name: str) -> Link:
        return next(link for link in self._links if link.name == name)

    def _controller_props(self, self_id: str) -> dict[str, object]:
        peers = []
        for c in self.controller_ids:
            if c == self_id:
                peers.append(f"{c}-{HOST}:{self.raft_ports[c]}")
            else:
                host, port = self._link(f"raft:{self_id}->{c}").listen
                peers.append(f"{c}-{host}:{port}")
        props: dict[str, object] = {
            "controllerDLegerPeers": ";".join(peers),
            "controllerDLegerSelfId": self_id,
            "controllerStorePath": self.root / "controller" / self_id,
            **CONTROLLER_KEYS,
            **self.server_props(),
        }
        if self.embedded:
            props["enableControllerInNamesrv"] = "true"
        return props

    def _node(self, name: str, extra: dict[str, object]) -> Node:
        port = self.broker_ports[name]
        home = self.root / name
        store = home / "store"
        store.mkdir(parents=True, exist_ok=True)
        controller_addr = ";".join("{}:{}".format(*self._link(f"ctl:{name}->{c}").listen) for c in self.controller_ids)
        props: dict[str, object] = {
            "brokerClusterName": CLUSTER,
            "brokerName": GROUP,
            "brokerIP1": HOST,
            "brokerIP2": PROXY_HOST,  # the HA address a slave learns: the proxy ha:<slave>-><this>
            "listenHost": HOST,
            "listenPort": port,
            "namesrvAddr": self.namesrv_addr,
            "storePathRootDir": store,
            "mappedFileSizeCommitLog": SEGMENT,
            "mappedFileSizeConsumeQueue": CQ_SEGMENT,
            "registerNameServerPeriod": 1000,
            "haSendHeartbeatInterval": 500,
            "haHousekeepingInterval": 3000,
            "slaveSyncInterval": 1000,
            "flushConsumerOffsetInterval": 1000,
            "enableControllerMode": "true",
            "controllerAddr": controller_addr,
            "allAckInSyncStateSet": "true",
            "minInSyncReplicas": 1,
            "controllerHeartBeatTimeoutMills": HEARTBEAT_TIMEOUT_MS,
            "checkSyncStateSetPeriod": 250,
            "haMaxTimeSlaveNotCatchup": 2000,
            "syncFlushTimeout": 2500,  # past haMaxTimeSlaveNotCatchup: a stalled slave is dropped first
            **self.server_props(),
            **extra,
        }
        conf = _write(home / "broker.properties", props)
        proc = ChildProcess(name, ["broker", "-c", str(conf)], self.root / "logs" / f"{name}.log", node_env(home))
        node = Node(name, -1, "CONTROLLED", port, store, home / "disk-full.flag", proc)
        node.clear_flags()
        return node

    @property
    def controller_addrs(self) -> list[str]:
        """The controller nodes' real addresses (the harness's own view, not through proxies)."""
        return [f"{HOST}:{self.controller_ports[c]}" for c in self.controller_ids]

    # -- the protocol -----------------------------------------------------------------
    def links(self) -> list[Link]:
        return list(self._links)

    async def controller_view(self) -> tuple[str | None, str]:
        """(the master's address, its SyncStateSet "1,2") as the controller holds them now."""
        async with ControllerClient(self.controller_addrs, request_timeout=1.0, tls=self._controller_tls) as client:
            hdr, sss = await client.get_replica_info(GROUP)
        members = ",".join(str(i) for i in sorted(sss.sync_state_set))
        return hdr.master_address, members

    async def current_master(self) -> str | None:
        """The running broker the controller names master now, else None."""
        try:
            addr, _ = await self.controller_view()
        except Exception:
            return None
        return self.running_node_at(addr)

    async def controller_leader(self, timeout: float = 10.0) -> str | None:
        """The running controller node that answers as Raft leader (bounded wait)."""
        deadline = time.monotonic() + timeout
        found: str | None = None

        async def check() -> bool:
            nonlocal found
            for c, addr in zip(self.controller_ids, self.controller_addrs, strict=True):
                proc = self.controllers.get(c, self.namesrv)
                if not proc.alive or proc.paused:
                    continue
                try:
                    async with ControllerClient([addr], request_timeout=1.0, tls=self._controller_tls) as client:
                        meta = await client.get_metadata(addr)
                except Exception:
                    continue
                if meta.is_leader:
                    found = c
                    return True
            return time.monotonic() > deadline

        await _poll(check, timeout, 0.05)
        return found

    def kill_controller(self, name: str) -> None:
        self.controllers[name].kill()

    async def restart_controller(self, name: str) -> None:
        self.controllers[name].start()
        await self._wait_controller(name)

    async def _wait_controller(self, name: str) -> None:
        proc, port = self.controllers[name], self.raft_ports[name]
        if not await _poll(lambda: self._alive_and_open(proc, port), START_TIMEOUT_S, 0.05):
            raise RuntimeError(f"controller {name} did not open its port{self.explain()}")

    async def start(self) -> None:
        await self._start_namesrv()
        for proc in self.controllers.values():
            proc.start()
        for c in self.controllers:
            await self._wait_controller(c)
        if await self.controller_leader(START_TIMEOUT_S) is None:
            raise RuntimeError(f"the controller elected no leader within {START_TIMEOUT_S:.0f}s{self.explain()}")
        for name in BROKERS:  # one at a time: the first to register becomes master
            await self.restart(name)
        if not (await self.wait_stable(START_TIMEOUT_S)).stable:
            raise RuntimeError(f"the group did not form (a master with its slave in sync){self.explain()}")

    async def _await_up(self, node: Node) -> None:
        await self._wait_port(node)
        if not await _poll(lambda: self._has_role(node), START_TIMEOUT_S, 0.1):
            raise RuntimeError(f"{node.name} took no role from the controller{self.explain()}")
        await self._wait_registered(node)

    async def _has_role(self, node: Node) -> bool:
        if not node.process.alive:
            raise RuntimeError(f"{node.name} exited with {node.process.exit_code}:\n{node.process.tail()}")
        return (await self.runtime(node.name)).get("controllerRole") in ROLES

    async def runtime(self, name: str) -> dict[str, str]:
        """The broker's runtime info ({} when it does not answer)."""
        try:
            async with self.admin(timeout=2.0, connect_timeout=1.0) as admin:
                return await admin.broker_runtime_info(self.nodes[name].addr)
        except Exception:
            return {}

    async def ready_for_fault(self, timeout: float) -> str:
        """Until the master has its slave in its SyncStateSet again (bounded): a fault is then
        a single fault; one on a group whose only other replica is still out (dead, behind)
        would be a double one, which two replicas do not promise to survive."""
        why = ""

        async def whole() -> bool:
            nonlocal why
            try:
                addr, members = await self.controller_view()
            except Exception as exc:
                why = f"the controller does not answer ({type(exc).__name__})"
                return False
            why = f"master {addr}, SyncStateSet {members or '-'}"
            return addr is not None and len([m for m in members.split(",") if m]) == len(self.nodes)

        return "" if await _poll(whole, timeout, 0.1) else f"not whole after {timeout:.0f}s: {why}"

    async def wait_stable(self, timeout: float) -> Stability:
        """Until every broker runs, the controller's master has the other in its SyncStateSet,
        and both commit logs end at the same offset (bounded)."""
        offsets: dict[str, int] = {}
        why = ""

        async def check() -> bool:
            nonlocal why
            for node in self.nodes.values():
                if not node.process.alive or node.process.paused:
                    why = f"{node.name} is not running"
                    return False
            master = await self.current_master()
            if master is None:
                why = "the controller names no running master"
                return False
            if note := await self.ready_for_fault(0.0):
                why = note
                return False
            for node in self.nodes.values():
                offsets[node.name] = await self.max_offset(node.name)
            target = offsets[master]
            why = f"master {master}; commit-log max offsets {offsets}"
            return target >= 0 and all(o == target for o in offsets.values())

        ok = await _poll(check, timeout, 0.2)
        return Stability(ok, why, dict(offsets))

    def _listed(self, node: Node, route: TopicRouteData) -> bool:
        """Listed under any id (0 while master, its controller id as a slave)."""
        return any(node.addr in d.broker_addrs.values() for d in route.broker_datas if d.broker_name == GROUP)

    def explain(self) -> str:
        text = super().explain()
        for c, proc in self.controllers.items():
            text += f"\n--- controller {c} ---\n{proc.tail(8)}"
        return text

    def close(self) -> None:
        super().close()
        for proc in self.controllers.values():
            proc.kill()
