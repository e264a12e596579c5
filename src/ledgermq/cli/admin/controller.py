"""Controller-mode commands, as RocketMQ 5's mqadmin spells them: ``getControllerMetaData``,
``getSyncStateSet``, ``electMaster``, ``cleanBrokerMetadata`` (to the controller, ``-a``;
several addresses separated by ``;``, the leader is found from any of them) and
``getBrokerEpoch`` (to the brokers found through the name server). ``ledgermq admin --tls``'s
options reach the controller too."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

import click

from ledgermq.admin import controller_ops
from ledgermq.admin.client import AdminClient
from ledgermq.cli.admin.plumbing import TLS_META, namesrv_option, run_repeating
from ledgermq.client.instance.tls import client_tls
from ledgermq.controller.client import ControllerClient
from ledgermq.errors import LedgerError
from ledgermq.protocol.codes import ResponseCode

T = TypeVar("T")

controller_option = click.option(
    "-a", "--controllerAddress", "controller_addr", required=True, help="controller address(es), host:port[;host:port]"
)


def _controller_client(addrs: str) -> ControllerClient:
    """A client of the controller at ``addrs``, over TLS when ``ledgermq admin --tls`` was given."""
    ctx = click.get_current_context(silent=True)
    tls = ctx.meta.get(TLS_META) if ctx is not None else None
    return ControllerClient(addrs, tls=client_tls(tls is not None, tls))


def _run_controller(addrs: str, fn: Callable[[ControllerClient], Awaitable[T]]) -> T:
    async def main() -> T:
        async with _controller_client(addrs) as client:
            return await fn(client)

    try:
        return asyncio.run(main())
    except (LedgerError, ValueError) as exc:
        raise click.ClickException(str(exc)) from None


@click.command("getControllerMetaData")
@controller_option
def get_controller_metadata(controller_addr: str) -> None:
    """Get controller cluster's metadata."""
    addr = controller_addr.split(";")[0].strip()
    meta = _run_controller(addr, lambda c: c.get_metadata(addr))
    click.echo(f"\n#ControllerGroup\t{meta.group}", nl=False)
    click.echo(f"\n#ControllerLeaderId\t{meta.controller_leader_id}", nl=False)
    click.echo(f"\n#ControllerLeaderAddress\t{meta.controller_leader_address}", nl=False)
    for peer in filter(None, (meta.peers or "").split(";")):
        click.echo(f"\n#Peer:\t{peer}", nl=False)
    click.echo("")


@click.command("getSyncStateSet")
@controller_option
@namesrv_option
@click.option("-b", "--brokerName", "broker_name", help="which broker to fetch")
@click.option("-c", "--clusterName", "cluster_name", help="which cluster (its broker names from the name server)")
@click.option("-i", "--interval", type=click.IntRange(1), default=None, help="repeat every N seconds")
def get_sync_state_set(
    controller_addr: str, namesrv: str, broker_name: str | None, cluster_name: str | None, interval: int | None
) -> None:
    """Fetch syncStateSet for target brokers."""
    if (broker_name is None) == (cluster_name is None):
        raise click.UsageError("give exactly one of -b brokerName or -c clusterName")

    async def show(names: list[str]) -> None:
        async with _controller_client(controller_addr) as ctl:
            info = await ctl.get_sync_state_data(names)
        for name, r in info.replicas_info_table.items():
            click.echo(
                f"\n#brokerName\t{name}\n#MasterBrokerId\t{r.master_broker_id}\n#MasterAddr\t{r.master_address}\n"
                f"#MasterEpoch\t{r.master_epoch}\n#SyncStateSetEpoch\t{r.sync_state_set_epoch}\n"
                f"#SyncStateSetNums\t{len(r.in_sync_replicas)}"
            )
            for member in r.in_sync_replicas:
                click.echo(f"\nInSyncReplica:\t{member}")
            for member in r.not_in_sync_replicas:
                click.echo(f"\nNotInSyncReplica:\t{member}")

    if broker_name is not None:  # no name server needed

        async def repeat() -> None:
            await show([broker_name.strip()])
            while interval is not None:
                await asyncio.sleep(interval)
                await show([broker_name.strip()])

        try:
            asyncio.run(repeat())
        except (LedgerError, ValueError) as exc:
            raise click.ClickException(str(exc)) from None
        except KeyboardInterrupt:
            pass
        return

    async def once(admin_client: AdminClient) -> None:
        assert cluster_name is not None
        await show((await admin_client.cluster_info()).broker_names(cluster_name.strip()))

    run_repeating(namesrv, once, interval)


@click.command("getBrokerEpoch")
@namesrv_option
@click.option("-b", "--brokerName", "broker_name", help="which broker group to fetch")
@click.option("-c", "--clusterName", "cluster_name", help="which cluster")
@click.option("-i", "--interval", type=click.IntRange(1), default=None, help="repeat every N seconds")
def get_broker_epoch(namesrv: str, broker_name: str | None, cluster_name: str | None, interval: int | None) -> None:
    """Fetch broker epoch entries (from brokers in controller mode)."""
    if (broker_name is None) == (cluster_name is None):
        raise click.UsageError("give exactly one of -b brokerName or -c clusterName")

    async def once(client: AdminClient) -> None:
        name = broker_name.strip() if broker_name else None
        cluster = cluster_name.strip() if cluster_name else None
        for addr in await controller_ops.group_addrs(client, name, cluster):
            cache = await controller_ops.broker_epoch_cache(client, addr)
            click.echo(
                f"\n#clusterName\t{cache.cluster_name}\n#brokerName\t{cache.broker_name}\n#brokerAddr\t{addr}\n"
                f"#brokerId\t{cache.broker_id}",
                nl=False,
            )
            for n, entry in enumerate(cache.epoch_list):
                if n == len(cache.epoch_list) - 1:
                    entry = type(entry)(entry.epoch, entry.start_offset, cache.max_offset)
                click.echo(f"\n#Epoch: {entry}", nl=False)
            click.echo("")

    run_repeating(namesrv, once, interval)


@click.command("electMaster")
@controller_option
@click.option("-b", "--brokerId", "broker_id", type=int, required=True, help="the id of the broker to become master")
@click.option("-bn", "--brokerName", "broker_name", required=True, help="the broker name of the replicas")
@click.option("-c", "--clusterName", "cluster_name", required=True, help="the clusterName of broker")
def elect_master(controller_addr: str, broker_id: int, broker_name: str, cluster_name: str) -> None:
    """Re-elect the specified broker as master."""
    resp, hdr, body = _run_controller(
        controller_addr, lambda c: c.elect_master(cluster_name.strip(), broker_name.strip(), broker_id)
    )
    if resp.code != ResponseCode.SUCCESS:
        try:
            name = ResponseCode(resp.code).name
        except ValueError:
            name = str(resp.code)
        raise click.ClickException(f"electMaster failed: {name}: {resp.remark}")
    click.echo(f"\n#ClusterName\t{cluster_name}", nl=False)
    click.echo(f"\n#BrokerName\t{broker_name}", nl=False)
    click.echo(f"\n#BrokerMasterAddr\t{hdr.master_address}", nl=False)
    click.echo(f"\n#MasterEpoch\t{hdr.master_epoch}", nl=False)
    click.echo(f"\n#SyncStateSetEpoch\t{hdr.sync_state_set_epoch}")
    if body is not None and body.broker_member_group is not None:
        for member_id, addr in sorted(body.broker_member_group.broker_addrs.items()):
            click.echo(f"\t#Broker\t{member_id}\t{addr}")


@click.command("cleanBrokerMetadata")
@controller_option
@click.option("-b", "--brokerControllerIdsToClean", "broker_ids", help="broker ids to clean, e.g. 1;2;3")
@click.option("-bn", "--brokerName", "broker_name", required=True, help="the broker name of the replicas")
@click.option("-c", "--clusterName", "cluster_name", help="the clusterName of broker")
@click.option("-l", "--cleanLivingBroker", "clean_living", is_flag=True, help="also clean living brokers")
def clean_broker_metadata(
    controller_addr: str, broker_ids: str | None, broker_name: str, cluster_name: str | None, clean_living: bool
) -> None:
    """Clean metadata of broker on controller."""
    if broker_ids is not None:
        try:
            [int(part) for part in broker_ids.split(";") if part.strip()]
        except ValueError:
            raise click.BadParameter(f"{broker_ids!r} is not a ';'-separated list of broker ids") from None
    if not clean_living and not (cluster_name or "").strip():
        raise click.UsageError("without -l (cleanLivingBroker), -c clusterName is required")
    _run_controller(
        controller_addr,
        lambda c: c.clean_broker_data(
            cluster_name.strip() if cluster_name else None, broker_name.strip(), broker_ids, clean_living
        ),
    )
    click.echo(f"clear broker {broker_name} metadata from controller success! ")


COMMANDS: tuple[click.Command, ...] = (
    get_controller_metadata,
    get_sync_state_set,
    get_broker_epoch,
    elect_master,
    clean_broker_metadata,
)
