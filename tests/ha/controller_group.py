"""A name server with the controller inside and brokers in controller mode, as real processes.

Built on ``HAGroup`` (process_group.py): the same broker processes, ports and stores, but no
brokerId or brokerRole in the files; the controller decides. Timing is scaled down for tests
(heartbeats every 100 ms, a broker gone after 600 ms of silence, metadata synced every
300 ms). Brokers' states are read with GET_BROKER_RUNTIME_INFO (``controllerRole`` etc.).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from ledgermq.net.client import RemotingClient
from ledgermq.protocol.codes import RequestCode, ResponseCode
from ledgermq.protocol.command import RemotingCommand
from tests.compat.cluster import HOST, ServerProcess, free_port, tcp_open, wait_until
from tests.ha.process_group import BrokerProc, HAGroup

CONTROLLER_KEYS = (
    "controllerDLegerHeartBeatIntervalMs=50\ncontrollerDLegerElectionTimeoutMs=500\n"
    "scanNotActiveBrokerInterval=100\nscanInactiveMasterInterval=300\nmappedFileSize=1048576\n"
    "controllerHeartBeatTimeoutMills=600\n"  # also how long a new controller leader waits for brokers
)
BROKER_KEYS: dict[str, object] = {
    "enableControllerMode": "true",
    "brokerHeartbeatInterval": 100,
    "controllerHeartBeatTimeoutMills": 600,
    "syncBrokerMetadataPeriod": 300,
    "checkSyncStateSetPeriod": 100,
    "haMaxTimeSlaveNotCatchup": 1000,
    "haSendHeartbeatInterval": 200,
    "haHousekeepingInterval": 1500,
    "syncFlushTimeout": 3000,
}


class ControllerGroup(HAGroup):
    def __init__(self, root: Path, controller_keys: str = "", **common: object) -> None:
        super().__init__(root, **{**BROKER_KEYS, **common})
        raft_port = free_port()
        conf = root / "namesrv.conf"
        conf.write_text(
            f"enableControllerInNamesrv=true\ncontrollerDLegerGroup=group1\n"
            f"controllerDLegerPeers=n0-{HOST}:{raft_port}\ncontrollerDLegerSelfId=n0\n"
            f"controllerStorePath={root / 'controller'}\nkvConfigPath={root / 'kvConfig.json'}\n"
            f"{CONTROLLER_KEYS}{controller_keys}"
        )
        self.namesrv = ServerProcess(
            "namesrv", ["namesrv", "-c", str(conf), "-p", str(self.namesrv_port), "--host", HOST], root / "namesrv.log"
        )
        self.common["controllerAddr"] = self.namesrv_addr

    def add_broker(self, name: str, **props: object) -> BrokerProc:
        b = self.add(name, -1, "CONTROLLED", **props)
        text = b.conf.read_text().splitlines()
        b.conf.write_text("".join(f"{line}\n" for line in text if not line.startswith(("brokerId=", "brokerRole="))))
        return b

    def start_broker(self, b: BrokerProc, role: str, timeout: float = 20.0) -> None:
        """Start ``b`` and wait until it serves as ``role`` (MASTER or SLAVE)."""
        b.server.start()
        wait_until(f"{b.name}'s port", lambda: b.server.check_alive() and tcp_open(b.port), timeout, 0.05)
        self.wait_role(b, role, timeout)

    def start_pair(self, master: BrokerProc, slave: BrokerProc) -> None:
        """The name server (with the controller), ``master`` then ``slave``, and both in the
        SyncStateSet: the start of most controller-mode tests."""
        self.start_namesrv()
        self.start_broker(master, "MASTER")
        self.start_broker(slave, "SLAVE")
        self.wait_sync_state_set(master, 2)

    def wait_role(self, b: BrokerProc, role: str, timeout: float = 20.0) -> dict[str, str]:
        seen: dict[str, str] = {}

        def check() -> bool:
            b.server.check_alive()
            seen.update(self.info(b))
            return seen.get("controllerRole") == role

        wait_until(f"{b.name} to serve as {role}", check, timeout, 0.05, lambda: f"{seen}{self.explain()}")
        return seen

    def wait_sync_state_set(self, master: BrokerProc, size: int, timeout: float = 20.0) -> dict[str, str]:
        seen: dict[str, str] = {}

        def check() -> bool:
            seen.update(self.info(master))
            return len([m for m in seen.get("syncStateSet", "").split(",") if m]) == size

        wait_until(f"a SyncStateSet of {size}", check, timeout, 0.05, lambda: f"{seen}{self.explain()}")
        return seen

    @staticmethod
    def info(b: BrokerProc) -> dict[str, str]:
        """GET_BROKER_RUNTIME_INFO's table ({} when the broker does not answer)."""

        async def ask() -> dict[str, str]:
            client = RemotingClient(connect_timeout=0.5)
            try:
                cmd = RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO)
                resp = await client.invoke(b.addr, cmd, timeout=1.0)
                if resp.code != ResponseCode.SUCCESS:
                    return {}
                table: dict[str, str] = json.loads(resp.body or b"{}").get("table") or {}
                return table
            finally:
                await client.close()

        try:
            return asyncio.run(ask())
        except Exception:
            return {}

    def start_all(self) -> None:
        self.start_namesrv()
