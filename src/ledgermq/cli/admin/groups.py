"""Consumer and producer groups: ``updateSubGroup``, ``deleteSubGroup``,
``consumerConnection``, ``producerConnection`` and ``resetOffsetByTime``."""

from __future__ import annotations

from typing import Any

import click

from ledgermq.admin import operations as ops
from ledgermq.admin.client import AdminClient
from ledgermq.admin.model import DLQ_PREFIX, RETRY_PREFIX, AdminError, mq_version_desc
from ledgermq.cli.admin.common import format_mqadmin_time, one_target, parse_mqadmin_time, target_addrs
from ledgermq.cli.admin.plumbing import namesrv_option, print_text, run_with_client
from ledgermq.cli.admin_render import _table

target_options = [
    click.option("-b", "--brokerAddr", "broker_addr", help="which broker"),
    click.option("-c", "--clusterName", "cluster_name", help="which cluster (its masters)"),
]


def _targets(fn: Any) -> Any:
    for option in reversed(target_options):
        fn = option(fn)
    return fn


@click.command("updateSubGroup")
@namesrv_option
@_targets
@click.option("-g", "--groupName", "group", required=True, help="consumer group name")
@click.option("-s", "--consumeEnable", "consume_enable", type=click.BOOL, default=True, help="consume enable")
@click.option(
    "-m", "--consumeFromMinEnable", "consume_from_min", type=click.BOOL, default=False, help="from min offset"
)
@click.option("-d", "--consumeBroadcastEnable", "broadcast", type=click.BOOL, default=False, help="broadcast")
@click.option("-q", "--retryQueueNums", "retry_queue_nums", type=click.IntRange(0), default=1, show_default=True)
@click.option("-r", "--retryMaxTimes", "retry_max_times", type=click.IntRange(-1), default=16, show_default=True)
@click.option("-i", "--brokerId", "broker_id", type=click.IntRange(0), default=0, show_default=True)
@click.option(
    "-w", "--whichBrokerWhenConsumeSlowly", "slow_broker", type=click.IntRange(0), default=1, show_default=True
)
@click.option(
    "-a", "--notifyConsumerIdsChanged", "notify", type=click.BOOL, default=True, help="notify consumerId changed"
)
def update_sub_group(
    namesrv: str,
    broker_addr: str | None,
    cluster_name: str | None,
    group: str,
    consume_enable: bool,
    consume_from_min: bool,
    broadcast: bool,
    retry_queue_nums: int,
    retry_max_times: int,
    broker_id: int,
    slow_broker: int,
    notify: bool,
) -> None:
    """Update or create subscription group (the whole config: options left out take their defaults)."""
    one_target(broker_addr, cluster_name)
    config = {
        "brokerId": broker_id,
        "consumeBroadcastEnable": broadcast,
        "consumeEnable": consume_enable,
        "consumeFromMinEnable": consume_from_min,
        "groupName": group.strip(),
        "notifyConsumerIdsChangedEnable": notify,
        "retryMaxTimes": retry_max_times,
        "retryQueueNums": retry_queue_nums,
        "whichBrokerWhenConsumeSlowly": slow_broker,
    }

    async def run(client: AdminClient) -> None:
        for addr in await target_addrs(client, broker_addr, cluster_name):
            await ops.update_subscription_group(client, addr, config)
            click.echo(f"create subscription group to {addr} success.")
        click.echo("SubscriptionGroupConfig [" + ", ".join(f"{k}={_java(v)}" for k, v in config.items()) + "]")

    run_with_client(namesrv, run)


def _java(value: object) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


@click.command("deleteSubGroup")
@namesrv_option
@_targets
@click.option("-g", "--groupName", "group", required=True, help="subscription group name")
@click.option(
    "-r", "--removeOffset", "remove_offset", type=click.BOOL, default=False, help="remove the group's offsets"
)
def delete_sub_group(
    namesrv: str, broker_addr: str | None, cluster_name: str | None, group: str, remove_offset: bool
) -> None:
    """Delete subscription group from broker (with -c also its retry and DLQ topics)."""
    one_target(broker_addr, cluster_name)
    group = group.strip()

    async def run(client: AdminClient) -> None:
        for addr in await target_addrs(client, broker_addr, cluster_name):
            await ops.delete_subscription_group(client, addr, group, remove_offset)
            if broker_addr is not None:
                click.echo(f"delete subscription group [{group}] from broker [{addr}] success.")
        if cluster_name is None:
            return
        cluster = cluster_name.strip()
        click.echo(f"delete subscription group [{group}] from cluster [{cluster}] success.")
        for topic in (RETRY_PREFIX + group, DLQ_PREFIX + group):
            try:
                await ops.delete_topic_in_cluster(client, cluster, topic)
            except AdminError as exc:
                click.echo(f"warning: {topic}: {exc}", err=True)
                continue
            click.echo(f"delete topic [{topic}] from cluster [{cluster}] success.")

    run_with_client(namesrv, run)


@click.command("consumerConnection")
@namesrv_option
@click.option("-g", "--consumerGroup", "group", required=True, help="consumer group name")
def consumer_connection(namesrv: str, group: str) -> None:
    """Query consumer's socket connection, client version and subscription."""
    conn = run_with_client(namesrv, lambda c: c.examine_consumer_connection(group.strip()))
    for i, cc in enumerate(conn.connections, 1):
        click.echo(f"{i:03d}  {cc.client_id:<32} {cc.client_addr:<22} {cc.language:<8} {mq_version_desc(cc.version)}")
    click.echo("\nBelow is subscription:")
    for i, (topic, sub) in enumerate(sorted(conn.subscriptions.items()), 1):
        click.echo(f"{i:03d}  Topic: {topic:<40} SubExpression: {sub.get('subString', '')}")
    click.echo("")
    click.echo(f"ConsumeType: {conn.consume_type}")
    click.echo(f"MessageModel: {conn.message_model}")
    click.echo(f"ConsumeFromWhere: {conn.consume_from_where}")


@click.command("producerConnection")
@namesrv_option
@click.option("-g", "--producerGroup", "group", required=True, help="producer group name")
@click.option("-t", "--topic", required=True, help="topic name")
def producer_connection(namesrv: str, group: str, topic: str) -> None:
    """Query producer's socket connection and client version."""
    conns = run_with_client(namesrv, lambda c: ops.producer_connection(c, group.strip(), topic.strip()))
    for i, cc in enumerate(conns, 1):
        click.echo(f"{i:04d}  {cc.client_id:<32} {cc.client_addr:<22} {cc.language:<8} {mq_version_desc(cc.version)}")


@click.command("resetOffsetByTime")
@namesrv_option
@click.option("-g", "--group", required=True, help="set the consumer group")
@click.option("-t", "--topic", required=True, help="set the topic")
@click.option("-s", "--timestamp", "when", required=True, help="epoch millis, yyyy-MM-dd#HH:mm:ss:SSS, or now")
@click.option("-f", "--force", type=click.BOOL, default=True, show_default=True, help="also move offsets forward")
def reset_offset_by_time(namesrv: str, group: str, topic: str, when: str, force: bool) -> None:
    """Reset consumer offset by timestamp (live consumers are told; offline groups are reset in the broker)."""
    group, topic = group.strip(), topic.strip()
    timestamp = parse_mqadmin_time(when)
    table = run_with_client(namesrv, lambda c: ops.reset_offset_by_time(c, group, topic, timestamp, force))
    click.echo(
        f"rollback consumer offset by specified consumerGroup[{group}], topic[{topic}], force[{_java(force)}], "
        f"timestamp(string)[{format_mqadmin_time(timestamp)}], timestamp(long)[{timestamp}]"
    )
    out = _table("#brokerName", "#queueId", "#offset")
    for mq, offset in table.items():
        out.add_row(mq.broker_name, str(mq.queue_id), str(offset))
    print_text(out)


COMMANDS: tuple[click.Command, ...] = (
    update_sub_group,
    delete_sub_group,
    consumer_connection,
    producer_connection,
    reset_offset_by_time,
)
