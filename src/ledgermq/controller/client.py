"""``ControllerClient``: requests to a controller group, following its leader.

Brokers (controller mode) and the admin commands use it. It is given one or more controller
addresses (``controllerAddr``, ``;``-separated: Raft addresses, or name servers that embed
the controller). A request goes to the leader it last knew, else to each address in turn.
A CONTROLLER_NOT_LEADER answer names the leader (in ``controllerLeaderAddress``), which the
client then tries; an address that cannot be reached is skipped. Tries continue until one
node answers as leader or ``timeout`` passes, with a short pause after a round in which no
node led (an election takes one election timeout or two).

Answers other than CONTROLLER_NOT_LEADER are returned as they are: the caller reads their
code (``ControllerResponseError`` from the typed helpers when it is not SUCCESS).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from types import TracebackType

from ledgermq.clock import SYSTEM_CLOCK, Clock
from ledgermq.errors import LedgerError
from ledgermq.net.client import RemotingClient
from ledgermq.net.tls.profile import PROCESS_TLS, ClientTls, ProcessDefault
from ledgermq.protocol.codes import RequestCode, ResponseCode
from ledgermq.protocol.command import RemotingCommand
from ledgermq.protocol.controller_body import (
    BrokerReplicasInfo,
    ElectMasterResponseBody,
    SyncStateSet,
    encode_broker_names,
)
from ledgermq.protocol.headers_controller import (
    BrokerHeartbeatRequestHeader,
    CleanControllerBrokerDataRequestHeader,
    ElectMasterRequestHeader,
    ElectMasterResponseHeader,
    GetMetaDataResponseHeader,
    GetReplicaInfoRequestHeader,
    GetReplicaInfoResponseHeader,
)

__all__ = ["ControllerClient", "ControllerResponseError", "ControllerUnavailableError", "parse_controller_addrs"]

log = logging.getLogger(__name__)

RETRY_PAUSE_S = 0.1


class ControllerUnavailableError(LedgerError):
    """No controller node answered as leader within the timeout."""


class ControllerResponseError(LedgerError):
    def __init__(self, code: int, remark: str | None) -> None:
        try:
            name = ResponseCode(code).name
        except ValueError:
            name = str(code)
        super().__init__(f"{name}: {remark or ''}".rstrip(": "))
        self.code = code
        self.remark = remark


def parse_controller_addrs(text: str) -> list[str]:
    addrs = [a.strip() for a in text.split(";") if a.strip()]
    if not addrs:
        raise ValueError("no controller address given")
    return addrs


class ControllerClient:
    def __init__(
        self,
        addrs: Sequence[str] | str,
        *,
        client: RemotingClient | None = None,
        request_timeout: float = 3.0,
        tls: ClientTls | ProcessDefault | None = PROCESS_TLS,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.clock = clock
        self.addrs = parse_controller_addrs(addrs) if isinstance(addrs, str) else list(addrs)
        if not self.addrs:
            raise ValueError("no controller address given")
        if client is not None and tls is not PROCESS_TLS:
            raise ValueError("give the TLS of a given client to that client, not to ControllerClient")
        self._own_client = client is None
        self.client = client if client is not None else RemotingClient(connect_timeout=1.0, tls=tls)
        self.request_timeout = request_timeout
        self.leader_addr: str | None = None

    async def __aenter__(self) -> ControllerClient:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def close(self) -> None:
        if self._own_client:
            await self.client.close()

    # -- the core: send to the leader ----------------------------------------------------
    async def invoke(self, cmd: RemotingCommand, timeout: float = 10.0) -> RemotingCommand:
        """Send ``cmd`` to the leader, following CONTROLLER_NOT_LEADER answers; the leader's answer."""
        clock = self.clock
        deadline = clock.monotonic() + timeout
        last_problem = "no controller tried"
        while True:
            order = ([self.leader_addr] if self.leader_addr else []) + [a for a in self.addrs if a != self.leader_addr]
            tried: set[str] = set()
            while order:
                addr = order.pop(0)
                if addr in tried:
                    continue
                tried.add(addr)
                left = deadline - clock.monotonic()
                if left <= 0:
                    break
                try:
                    resp = await self.client.invoke(addr, cmd, min(self.request_timeout, left))
                except (LedgerError, OSError, TimeoutError) as exc:
                    last_problem = f"{addr}: {type(exc).__name__}: {exc}"
                    if addr == self.leader_addr:
                        self.leader_addr = None
                    continue
                if resp.code != ResponseCode.CONTROLLER_NOT_LEADER:
                    self.leader_addr = addr
                    return resp
                last_problem = f"{addr}: {resp.remark}"
                hint = resp.ext_fields.get("controllerLeaderAddress")
                if hint and hint not in tried:
                    order.insert(0, hint)
            if clock.monotonic() + RETRY_PAUSE_S >= deadline:
                raise ControllerUnavailableError(
                    f"no controller answered as leader within {timeout:.1f}s (last: {last_problem})"
                )
            await asyncio.sleep(RETRY_PAUSE_S)

    async def _ok(self, cmd: RemotingCommand, timeout: float = 10.0) -> RemotingCommand:
        resp = await self.invoke(cmd, timeout)
        if resp.code != ResponseCode.SUCCESS:
            raise ControllerResponseError(resp.code, resp.remark)
        return resp

    # -- typed requests (what admin commands and brokers ask) ---------------------------
    async def get_metadata(self, addr: str | None = None) -> GetMetaDataResponseHeader:
        """GET_METADATA_INFO from ``addr`` (any node answers; default: the first that does)."""
        cmd = RemotingCommand.request(RequestCode.CONTROLLER_GET_METADATA_INFO)
        problems: list[str] = []
        for a in [addr] if addr else self.addrs:
            try:
                resp = await self.client.invoke(a, cmd, self.request_timeout)
            except (LedgerError, OSError, TimeoutError) as exc:
                problems.append(f"{a}: {exc}")
                continue
            if resp.code != ResponseCode.SUCCESS:
                raise ControllerResponseError(resp.code, resp.remark)
            return GetMetaDataResponseHeader.from_ext(resp.ext_fields)
        raise ControllerUnavailableError("no controller node answered: " + "; ".join(problems))

    async def get_sync_state_data(self, broker_names: Sequence[str]) -> BrokerReplicasInfo:
        cmd = RemotingCommand.request(
            RequestCode.CONTROLLER_GET_SYNC_STATE_DATA, body=encode_broker_names(broker_names)
        )
        return BrokerReplicasInfo.decode((await self._ok(cmd)).body)

    async def get_replica_info(self, broker_name: str) -> tuple[GetReplicaInfoResponseHeader, SyncStateSet]:
        cmd = RemotingCommand.request(
            RequestCode.CONTROLLER_GET_REPLICA_INFO, GetReplicaInfoRequestHeader(broker_name).ext()
        )
        resp = await self._ok(cmd)
        return GetReplicaInfoResponseHeader.from_ext(resp.ext_fields), SyncStateSet.decode(resp.body)

    async def elect_master(
        self, cluster_name: str, broker_name: str, broker_id: int, *, designate: bool = True
    ) -> tuple[RemotingCommand, ElectMasterResponseHeader, ElectMasterResponseBody | None]:
        """ELECT_MASTER; returns the raw answer too (CONTROLLER_MASTER_STILL_EXIST is not an error
        for a caller that wanted that master)."""
        hdr = ElectMasterRequestHeader(cluster_name, broker_name, broker_id, designate)
        resp = await self.invoke(RemotingCommand.request(RequestCode.CONTROLLER_ELECT_MASTER, hdr.ext()))
        body = ElectMasterResponseBody.decode(resp.body) if resp.body else None
        return resp, ElectMasterResponseHeader.from_ext(resp.ext_fields), body

    async def clean_broker_data(
        self, cluster_name: str | None, broker_name: str, broker_ids: str | None, clean_living: bool
    ) -> None:
        hdr = CleanControllerBrokerDataRequestHeader(cluster_name, broker_name, broker_ids, clean_living)
        await self._ok(RemotingCommand.request(RequestCode.CLEAN_BROKER_DATA, hdr.ext()))

    async def heartbeat(self, addr: str, header: BrokerHeartbeatRequestHeader) -> RemotingCommand:
        """One BROKER_HEARTBEAT to one node (brokers heartbeat every node, not just the leader)."""
        return await self.client.invoke(
            addr, RemotingCommand.request(RequestCode.BROKER_HEARTBEAT, header.ext()), self.request_timeout
        )
