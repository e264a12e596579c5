"""``admin deleteTopic`` and the name-server write-permission switches (``wipeWritePerm`` /
``addWritePerm``), which take a broker group's queues out of (or back into) producers'
routes, e.g. to drain a broker before maintenance."""

from __future__ import annotations

import click

from ledgermq.admin import operations as ops
from ledgermq.admin.client import AdminClient
from ledgermq.admin.model import AdminError
from ledgermq.cli.admin.plumbing import namesrv_option, run_with_client


@click.command("deleteTopic")
@namesrv_option
@click.option("-t", "--topic", required=True, help="topic name")
@click.option("-c", "--clusterName", "cluster_name", required=True, help="delete topic from which cluster")
def delete_topic(namesrv: str, topic: str, cluster_name: str) -> None:
    """Delete topic from broker and NameServer."""
    topic, cluster = topic.strip(), cluster_name.strip()

    async def run(client: AdminClient) -> None:
        await ops.delete_topic_in_cluster(client, cluster, topic)
        click.echo(f"delete topic [{topic}] from cluster [{cluster}] success.")
        click.echo(f"delete topic [{topic}] from NameServer success.")

    run_with_client(namesrv, run)


def _write_perm(namesrv: str, broker_name: str, writable: bool) -> None:
    verb = "add" if writable else "wipe"
    name = broker_name.strip()

    async def run(client: AdminClient) -> int:
        failed = 0
        for addr in client.namesrv_addrs:
            try:
                count = await ops.set_write_perm(client, addr, name, writable)
            except AdminError as exc:
                failed += 1
                click.echo(f"{verb} write perm of broker[{name}] in name server[{addr}] Failed: {exc}", err=True)
                continue
            click.echo(f"{verb} write perm of broker[{name}] in name server[{addr}] OK, {count}")
        return failed

    if run_with_client(namesrv, run):
        raise click.ClickException(f"{verb} write perm of broker[{name}] failed on some name server")


@click.command("wipeWritePerm")
@namesrv_option
@click.option("-b", "--brokerName", "broker_name", required=True, help="broker name")
def wipe_write_perm(namesrv: str, broker_name: str) -> None:
    """Wipe write perm of broker in all name server you defined in the -n param."""
    _write_perm(namesrv, broker_name, writable=False)


@click.command("addWritePerm")
@namesrv_option
@click.option("-b", "--brokerName", "broker_name", required=True, help="broker name")
def add_write_perm(namesrv: str, broker_name: str) -> None:
    """Add write perm of broker in all name server you defined in the -n param."""
    _write_perm(namesrv, broker_name, writable=True)


COMMANDS: tuple[click.Command, ...] = (delete_topic, wipe_write_perm, add_write_perm)
