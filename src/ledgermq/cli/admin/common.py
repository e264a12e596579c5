"""Option parsing shared by the operator commands (broker/cluster targets, mqadmin's times)."""

from __future__ import annotations

import datetime as dt

import click

from ledgermq.admin.client import AdminClient
from ledgermq.admin.model import AdminError
from ledgermq.clock import SYSTEM_CLOCK

MQADMIN_TIME_FORMAT = "%Y-%m-%d#%H:%M:%S:%f"  # yyyy-MM-dd#HH:mm:ss:SSS (milliseconds)


def one_target(broker_addr: str | None, cluster_name: str | None) -> None:
    if (broker_addr is None) == (cluster_name is None):
        raise click.UsageError("give exactly one of -b brokerAddr or -c clusterName")


async def target_addrs(
    client: AdminClient, broker_addr: str | None, cluster_name: str | None, *, slaves: bool = False
) -> list[str]:
    """``-b`` as given, or the masters (with ``slaves`` every broker) of ``-c``'s cluster."""
    if broker_addr is not None:
        return [broker_addr.strip()]
    assert cluster_name is not None
    info = await client.cluster_info()
    addrs = info.all_addrs(cluster_name.strip()) if slaves else info.master_addrs(cluster_name.strip())
    if not addrs:
        raise AdminError(f"cluster {cluster_name.strip()!r} has no {'broker' if slaves else 'master broker'}")
    return addrs


def parse_mqadmin_time(text: str) -> int:
    """Milliseconds from mqadmin's forms: epoch millis, ``yyyy-MM-dd#HH:mm:ss:SSS`` (local
    time) or ``now``."""
    text = text.strip()
    if text == "now":
        return SYSTEM_CLOCK.wall_ms()
    if text.lstrip("-").isdigit():
        return int(text)
    try:
        # %f reads the 3-digit milliseconds as a fraction: "123" -> 123000 us.
        return int(dt.datetime.strptime(text, MQADMIN_TIME_FORMAT).timestamp() * 1000)
    except ValueError:
        raise click.BadParameter(f"{text!r}: give epoch millis, yyyy-MM-dd#HH:mm:ss:SSS or now") from None


def format_mqadmin_time(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000).strftime(MQADMIN_TIME_FORMAT)[:-3]
