"""Admin operations of controller mode that go to brokers (the rest go to the controller
through ``ledgermq.controller.client.ControllerClient``)."""

from __future__ import annotations

from ledgermq.admin.client import AdminClient
from ledgermq.admin.model import AdminError, AdminResponseError
from ledgermq.controller.client import ControllerClient
from ledgermq.net.client import RemotingClient
from ledgermq.protocol.codes import RequestCode, ResponseCode
from ledgermq.protocol.controller_body import BrokerReplicasInfo, EpochEntryCache

__all__ = ["broker_epoch_cache", "group_addrs", "sync_state_sets"]


async def broker_epoch_cache(client: AdminClient, broker_addr: str) -> EpochEntryCache:
    """GET_BROKER_EPOCH_CACHE from one broker (a broker in controller mode answers it)."""
    resp = await client.invoke(broker_addr, RequestCode.GET_BROKER_EPOCH_CACHE)
    if resp.code != ResponseCode.SUCCESS:
        raise AdminResponseError(resp.code, f"{broker_addr}: {resp.remark or ''}")
    return EpochEntryCache.decode(resp.body)


async def group_addrs(client: AdminClient, broker_name: str | None, cluster_name: str | None) -> list[str]:
    """Every broker address of ``broker_name``'s group, or of every group of ``cluster_name``."""
    info = await client.cluster_info()
    if broker_name is not None:
        data = info.broker_addr_table.get(broker_name)
        if data is None:
            raise AdminError(f"broker {broker_name!r} is not known to the name server")
        return [addr for _, addr in sorted(data.broker_addrs.items())]
    assert cluster_name is not None
    return info.all_addrs(cluster_name)


async def sync_state_sets(
    controller_addrs: str, broker_names: list[str], timeout: float = 3.0, *, client: RemotingClient | None = None
) -> BrokerReplicasInfo:
    """GET_SYNC_STATE_DATA from the controller leader (found from any of ``controller_addrs``,
    ``host:port[;host:port]``): each broker group's master, master epoch and SyncStateSet.
    ``client``: the connections to use (an admin client's, with its TLS and signing); by
    default one of its own, which follows the process's TLS profile (plain where none is installed)."""
    async with ControllerClient(controller_addrs, client=client, request_timeout=timeout) as ctl:
        return await ctl.get_sync_state_data(broker_names)
