"""``ledgermq``: one command with a subcommand per process or tool."""

from __future__ import annotations

import logging

import click

from ledgermq import __version__
from ledgermq.cli.admin_cmd import admin
from ledgermq.cli.bench_cmds import bench
from ledgermq.cli.broker_cmd import broker
from ledgermq.cli.chaos_cmd import chaos
from ledgermq.cli.cluster_cmd import cluster
from ledgermq.cli.console_cmd import console
from ledgermq.cli.controller_cmd import controller
from ledgermq.cli.namesrv_cmd import namesrv
from ledgermq.cli.store_cmds import store


@click.group()
@click.version_option(__version__, prog_name="ledgermq")
@click.option("-v", "--verbose", is_flag=True, help="Log at INFO level.")
def cli(verbose: bool) -> None:
    """ledgermq: a RocketMQ 4.x compatible message broker in Python."""
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )


cli.add_command(store)
cli.add_command(bench)
cli.add_command(namesrv)
cli.add_command(controller)
cli.add_command(broker)
cli.add_command(cluster)
cli.add_command(admin)
cli.add_command(chaos)
cli.add_command(console)


def main() -> None:
    cli()


if __name__ == "__main__":
    main()
