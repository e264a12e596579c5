"""``admin getBrokerConfig`` / ``updateBrokerConfig``. A broker applies only the keys it can
honour while running (``ledgermq.broker.live_config``) and refuses any other key by name;
the refusal is printed and the command exits 1."""

from __future__ import annotations

import click

from ledgermq.admin import operations as ops
from ledgermq.admin.client import AdminClient
from ledgermq.cli.admin.common import one_target, target_addrs
from ledgermq.cli.admin.plumbing import namesrv_option, run_with_client


@click.command("getBrokerConfig")
@namesrv_option
@click.option("-b", "--brokerAddr", "broker_addr", help="get which broker")
@click.option("-c", "--clusterName", "cluster_name", help="get which cluster (every broker of it)")
def get_broker_config(namesrv: str, broker_addr: str | None, cluster_name: str | None) -> None:
    """Get broker config by cluster or special broker!"""
    one_target(broker_addr, cluster_name)

    async def run(client: AdminClient) -> None:
        for addr in await target_addrs(client, broker_addr, cluster_name, slaves=True):
            props = await ops.get_broker_config(client, addr)
            click.echo(f"============{addr}============")
            for key, value in props.items():
                click.echo(f"{key:<50}=  {value}")

    run_with_client(namesrv, run)


@click.command("updateBrokerConfig")
@namesrv_option
@click.option("-b", "--brokerAddr", "broker_addr", help="update which broker")
@click.option("-c", "--clusterName", "cluster_name", help="update which cluster (every broker of it)")
@click.option("-k", "--key", required=True, help="config key (live keys only, e.g. brokerPermission)")
@click.option("-v", "--value", required=True, help="config value")
def update_broker_config(namesrv: str, broker_addr: str | None, cluster_name: str | None, key: str, value: str) -> None:
    """Update broker's config at runtime (keys the broker can change live; not written to its config file)."""
    one_target(broker_addr, cluster_name)

    async def run(client: AdminClient) -> None:
        for addr in await target_addrs(client, broker_addr, cluster_name, slaves=True):
            await ops.update_broker_config(client, addr, key.strip(), value.strip())
            click.echo(f"update broker config success, {addr}")

    run_with_client(namesrv, run)


COMMANDS: tuple[click.Command, ...] = (get_broker_config, update_broker_config)
