"""``admin statsAll``: per topic and consumer group, the accumulation, the put and get
rates of the last minute and the messages of the last 24 hours, as mqadmin prints them
(the broker counts them in broker/stats.py)."""

from __future__ import annotations

import click

from ledgermq.admin import operations as ops
from ledgermq.admin.client import AdminClient
from ledgermq.admin.model import DLQ_PREFIX, RETRY_PREFIX, AdminError
from ledgermq.cli.admin.plumbing import namesrv_option, run_with_client

_HEAD = "%-32s  %-32s %12s %11s %11s %14s %14s"
_ROW = "%-64s  %-64s %12d %11.2f %11.2f %14d %14d"
_NO_CONSUMER = "%-64s  %-32s %12d %11.2f %11s %14d %14s"


def format_row(row: ops.TopicStatsRow) -> str:
    if row.group is None:
        return _NO_CONSUMER % (row.topic, "", 0, row.in_tps, "", row.in_24h, "NO_CONSUMER")
    return _ROW % (row.topic, row.group, row.accumulation, row.in_tps, row.out_tps, row.in_24h, row.out_24h)


def shown(row: ops.TopicStatsRow, active_only: bool) -> bool:
    """``-a``: only topics that had traffic in the last 24 hours."""
    return not active_only or row.in_24h > 0 or row.out_24h > 0


@click.command("statsAll")
@namesrv_option
@click.option("-a", "--activeTopic", "active_topic", is_flag=True, help="print active topic only")
@click.option("-t", "--topic", default=None, help="print select topic only")
def stats_all(namesrv: str, active_topic: bool, topic: str | None) -> None:
    """Topic and Consumer tps stats."""

    async def run(client: AdminClient) -> None:
        click.echo(
            _HEAD % ("#Topic", "#Consumer Group", "#Accumulation", "#InTPS", "#OutTPS", "#InMsg24Hour", "#OutMsg24Hour")
        )
        for name in await client.topic_list():
            if name.startswith((RETRY_PREFIX, DLQ_PREFIX)) or (topic and name != topic.strip()):
                continue
            try:
                rows = await ops.topic_stats_rows(client, name)
            except AdminError as exc:  # a topic without a route any more: mqadmin skips it too
                click.echo(f"# {name}: {exc}", err=True)
                continue
            for row in rows:
                if shown(row, active_topic):
                    click.echo(format_row(row))

    run_with_client(namesrv, run)


COMMANDS: tuple[click.Command, ...] = (stats_all,)
