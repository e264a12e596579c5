"""``ledgermq admin <command>``: the everyday ``mqadmin`` commands, same names and letters.

Every command takes ``-n/--namesrvAddr`` (default ``$NAMESRV_ADDR``, else
127.0.0.1:9876; several separated by ``;``). The protocol work is in
``ledgermq.admin.client.AdminClient``; this module parses options and prints. A failure
(name server unreachable, unknown topic, ...) prints one line on stderr and exits 1.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from typing import Any

import click
import orjson

from ledgermq.acl.signing import Credentials
from ledgermq.admin.client import AdminClient
from ledgermq.admin.model import (
    DLQ_PREFIX,
    RETRY_PREFIX,
    AdminError,
    AdminResponseError,
    DLedgerStatus,
    mq_version_desc,
    msg_id,
)
from ledgermq.admin.operations import view_message_any_id
from ledgermq.cli.admin import brokers, controller, groups, messages, stats, topics
from ledgermq.cli.admin.plumbing import TLS_META, namesrv_option, print_text, run_repeating, run_with_client
from ledgermq.cli.admin_render import (
    _brokers_by_cluster,
    _table,
    cluster_base_table,
    cluster_more_table,
    dledger_group_table,
    ha_status_text,
    human_ms,
    message_grid,
    route_table,
    topic_config_string,
)
from ledgermq.cli.tls_client_options import tls_client_options, tls_options_from_flags
from ledgermq.clock import SYSTEM_CLOCK
from ledgermq.protocol.message import MessageRecord
from ledgermq.protocol.route import PERM_READ, PERM_WRITE, TopicConfig


@click.group()
@click.option("--access-key", envvar="LEDGERMQ_ACCESS_KEY", help="ACL access key (env LEDGERMQ_ACCESS_KEY)")
@click.option("--secret-key", envvar="LEDGERMQ_SECRET_KEY", help="ACL secret key (env LEDGERMQ_SECRET_KEY)")
@tls_client_options
@click.pass_context
def admin(
    ctx: click.Context,
    access_key: str | None,
    secret_key: str | None,
    use_tls: bool,
    tls_trust_cert: str | None,
    tls_cert: str | None,
    tls_key: str | None,
    tls_key_password: str | None,
    tls_insecure: bool,
) -> None:
    """RocketMQ mqadmin commands (updateTopic, deleteTopic, topicList, topicRoute, topicStatus,
    clusterList, brokerStatus, haStatus, getBrokerConfig, updateBrokerConfig, wipeWritePerm,
    addWritePerm, updateSubGroup, deleteSubGroup, consumerProgress, consumerConnection,
    producerConnection, resetOffsetByTime, queryMsgById, queryMsgByKey, queryMsgByUniqueKey,
    printMsg; DLedger mode: dledgerStatus, transferLeader; controller mode: getControllerMetaData,
    getSyncStateSet, getBrokerEpoch, electMaster, cleanBrokerMetadata).

    With --access-key and --secret-key every request is signed for a broker with aclEnable=true
    (docs/acl.md); they go before the command: ``ledgermq admin --access-key K --secret-key S topicList``.
    So do the TLS options (docs/tls.md): ``ledgermq admin --tls --tls-trust-cert ca.pem clusterList``."""
    if bool(access_key) != bool(secret_key):
        raise click.UsageError("give both --access-key and --secret-key, or neither")
    if access_key and secret_key:
        ctx.obj = Credentials(access_key, secret_key)
    tls = tls_options_from_flags(use_tls, tls_trust_cert, tls_cert, tls_key, tls_key_password, tls_insecure)
    if tls is not None:
        ctx.meta[TLS_META] = tls


# -- topics ------------------------------------------------------------------------------
@admin.command("updateTopic")
@namesrv_option
@click.option("-b", "--brokerAddr", "broker_addr", help="create topic to which broker")
@click.option("-c", "--clusterName", "cluster_name", help="create topic to which cluster")
@click.option("-t", "--topic", required=True, help="topic name")
@click.option(
    "-r",
    "--readQueueNums",
    "read_queue_nums",
    type=click.IntRange(0),
    default=8,
    show_default=True,
    help="read queue nums",
)
@click.option(
    "-w",
    "--writeQueueNums",
    "write_queue_nums",
    type=click.IntRange(0),
    default=8,
    show_default=True,
    help="write queue nums",
)
@click.option(
    "-p",
    "--perm",
    type=click.IntRange(0, 15),
    default=PERM_READ | PERM_WRITE,
    show_default=True,
    help="topic's permission (2|4|6): 2 W, 4 R, 6 RW",
)
@click.option("-o", "--order", type=click.BOOL, default=False, help="order topic (true|false)")
@click.option("-u", "--unit", type=click.BOOL, default=False, help="is unit topic (true|false)")
@click.option("-s", "--hasUnitSub", "has_unit_sub", type=click.BOOL, default=False, help="has unit sub (true|false)")
def update_topic(
    namesrv: str,
    broker_addr: str | None,
    cluster_name: str | None,
    topic: str,
    read_queue_nums: int,
    write_queue_nums: int,
    perm: int,
    order: bool,
    unit: bool,
    has_unit_sub: bool,
) -> None:
    """Update or create topic."""
    if (broker_addr is None) == (cluster_name is None):
        raise click.UsageError("give exactly one of -b brokerAddr or -c clusterName")
    topic = topic.strip()
    options: dict[str, Any] = dict(
        read_queue_nums=read_queue_nums,
        write_queue_nums=write_queue_nums,
        perm=perm,
        order=order,
        topic_sys_flag=(1 if unit else 0) | (2 if has_unit_sub else 0),
    )

    async def run(client: AdminClient) -> None:
        if broker_addr is not None:
            addr = broker_addr.strip()
            tc = await client.create_topic(addr, topic, **options)
            if order:
                name = (await client.cluster_info()).broker_name_of(addr)
                if name is None:
                    raise AdminError(f"broker {addr} is not registered on the name server; order conf not set")
                conf = f"{name}:{write_queue_nums}"
                await client.put_order_conf(topic, conf)
                click.echo(f"set broker orderConf. isOrder=true, orderConf=[{conf}]")
            click.echo(f"create topic to {addr} success.")
        else:
            assert cluster_name is not None
            cluster = cluster_name.strip()
            info = await client.cluster_info()
            masters = info.master_addrs(cluster)
            if not masters:
                raise AdminError(f"cluster {cluster!r} has no master broker")
            tc = TopicConfig(topic)
            for addr in masters:
                tc = await client.create_topic(addr, topic, **options)
                click.echo(f"create topic to {addr} success.")
            if order:
                conf = ";".join(f"{name}:{write_queue_nums}" for name in info.broker_names(cluster))
                await client.put_order_conf(topic, conf)
                click.echo(f"set cluster orderConf. isOrder=true, orderConf=[{conf}]")
        click.echo(topic_config_string(tc))

    run_with_client(namesrv, run)


@admin.command("topicList")
@namesrv_option
@click.option("-c", "--clusterModel", "cluster_model", is_flag=True, help="show the cluster of each topic")
def topic_list(namesrv: str, cluster_model: bool) -> None:
    """Fetch all topic list from name server."""

    async def run(client: AdminClient) -> None:
        if not cluster_model:
            for topic in await client.topic_list():
                click.echo(topic)
            return
        info = await client.cluster_info()
        table = _table("#Cluster Name", "#Topic")
        for cluster in sorted(info.cluster_addr_table):
            for topic in await client.topics_by_cluster(cluster):
                if not topic.startswith((RETRY_PREFIX, DLQ_PREFIX)):
                    table.add_row(cluster, topic)
        print_text(table)

    run_with_client(namesrv, run)


@admin.command("topicRoute")
@namesrv_option
@click.option("-t", "--topic", required=True, help="topic name")
@click.option("-l", "--list", "as_list", is_flag=True, help="use list format to print data")
def topic_route(namesrv: str, topic: str, as_list: bool) -> None:
    """Examine topic route info."""
    route = run_with_client(namesrv, lambda c: c.route(topic.strip()))
    if as_list:
        print_text(route_table(route))
    else:
        click.echo(orjson.dumps(route.to_json(), option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS).decode())


@admin.command("topicStatus")
@namesrv_option
@click.option("-t", "--topic", required=True, help="topic name")
def topic_status(namesrv: str, topic: str) -> None:
    """Examine topic Status info."""
    stats = run_with_client(namesrv, lambda c: c.examine_topic_stats(topic.strip()))
    table = _table("#Broker Name", "#QID", "#Min Offset", "#Max Offset", "#Last Updated")
    for mq, off in stats.items():
        last = human_ms(off.last_update_timestamp) if off.last_update_timestamp > 0 else ""
        table.add_row(mq.broker_name, str(mq.queue_id), str(off.min_offset), str(off.max_offset), last)
    print_text(table)


# -- cluster and brokers -----------------------------------------------------------------
async def _runtime_infos(client: AdminClient, addrs: list[str]) -> dict[str, dict[str, str] | None]:
    answers = await asyncio.gather(*(client.broker_runtime_info(a) for a in addrs), return_exceptions=True)
    out: dict[str, dict[str, str] | None] = {}
    for addr, answer in zip(addrs, answers, strict=True):
        if isinstance(answer, AdminError):
            click.echo(f"warning: {addr}: {answer}", err=True)
            out[addr] = None
        elif isinstance(answer, BaseException):
            raise answer
        else:
            out[addr] = answer
    return out


@admin.command("clusterList")
@namesrv_option
@click.option("-m", "--moreStats", "more_stats", is_flag=True, help="print more stats")
@click.option("-i", "--interval", type=click.IntRange(1), default=None, help="print again every N seconds")
def cluster_list(namesrv: str, more_stats: bool, interval: int | None) -> None:
    """List all of clusters."""

    async def once(client: AdminClient) -> None:
        info = await client.cluster_info()
        runtime = await _runtime_infos(client, [row[3] for row in _brokers_by_cluster(info)])
        if more_stats:
            print_text(cluster_more_table(info, runtime))
        else:
            print_text(cluster_base_table(info, runtime, SYSTEM_CLOCK.wall_ms()))

    run_repeating(namesrv, once, interval)


@admin.command("brokerStatus")
@namesrv_option
@click.option("-b", "--brokerAddr", "broker_addr", help="broker address")
@click.option("-c", "--clusterName", "cluster_name", help="which cluster")
def broker_status(namesrv: str, broker_addr: str | None, cluster_name: str | None) -> None:
    """Fetch broker runtime status data."""
    if (broker_addr is None) == (cluster_name is None):
        raise click.UsageError("give exactly one of -b brokerAddr or -c clusterName")

    async def run(client: AdminClient) -> None:
        if broker_addr is not None:
            kv = await client.broker_runtime_info(broker_addr.strip())
            table = _table("#Key", "#Value")
            for k, v in kv.items():
                table.add_row(k, v)
        else:
            assert cluster_name is not None
            addrs = (await client.cluster_info()).all_addrs(cluster_name.strip())
            runtime = await _runtime_infos(client, addrs)
            table = _table("#Broker Addr", "#Key", "#Value")
            for addr in addrs:
                for k, v in (runtime[addr] or {}).items():
                    table.add_row(addr, k, v)
        print_text(table)

    run_with_client(namesrv, run)


@admin.command("haStatus")
@namesrv_option
@click.option("-b", "--brokerAddr", "broker_addr", help="which broker to fetch")
@click.option("-c", "--clusterName", "cluster_name", help="which cluster (its masters)")
@click.option("-i", "--interval", type=click.IntRange(1), default=None, help="print again every N seconds")
def ha_status(namesrv: str, broker_addr: str | None, cluster_name: str | None, interval: int | None) -> None:
    """Fetch ha runtime status data: per slave its acknowledged offset, lag and state."""
    if (broker_addr is None) == (cluster_name is None):
        raise click.UsageError("give exactly one of -b brokerAddr or -c clusterName")

    async def once(client: AdminClient) -> None:
        if broker_addr is not None:
            addrs = [broker_addr.strip()]
        else:
            assert cluster_name is not None
            addrs = (await client.cluster_info()).master_addrs(cluster_name.strip())
            if not addrs:
                raise AdminError(f"cluster {cluster_name.strip()!r} has no master broker")
        for addr in addrs:
            info = await client.ha_status(addr)
            head, table = ha_status_text(addr, info, SYSTEM_CLOCK.wall_ms())
            click.echo(head)
            if table is not None:
                print_text(table)

    run_repeating(namesrv, once, interval)


# -- DLedger groups ----------------------------------------------------------------------
async def _status_or_reason(client: AdminClient, addr: str) -> DLedgerStatus | str:
    try:
        return await client.dledger_status(addr)
    except AdminResponseError:
        raise  # not in DLedger mode (or not our broker): refused by the caller, loudly
    except AdminError as exc:
        return str(exc)


async def _dledger_groups(
    client: AdminClient, broker_addr: str | None, cluster_name: str | None
) -> dict[str, list[tuple[str, DLedgerStatus | str]]]:
    """Every member of every DLedger group asked (``-b``: that broker's group; ``-c``: the
    cluster's groups; neither: every group the name server knows), by group name."""
    info = await client.cluster_info()
    if broker_addr is not None:
        first = await client.dledger_status(broker_addr)
        data = info.broker_addr_table.get(first.broker_name)
        addrs = sorted(set(data.broker_addrs.values()) | {broker_addr}) if data is not None else [broker_addr]
        names = [first.broker_name]
        by_name = {first.broker_name: addrs}
    else:
        names = info.broker_names(cluster_name) if cluster_name else sorted(info.broker_addr_table)
        by_name = {
            n: [a for _, a in sorted(info.broker_addr_table[n].broker_addrs.items())]
            for n in names
            if n in info.broker_addr_table
        }
    groups: dict[str, list[tuple[str, DLedgerStatus | str]]] = {}
    refused: list[str] = []
    for name in names:
        for addr in by_name.get(name, []):
            try:
                st = await _status_or_reason(client, addr)
            except AdminResponseError as exc:
                refused.append(f"{name} {addr}: {exc}")
                continue
            group = st.group if isinstance(st, DLedgerStatus) else name
            groups.setdefault(group, []).append((addr, st))
    if not groups:
        raise AdminError("no DLedger-mode broker answered" + (f" ({'; '.join(refused)})" if refused else ""))
    return groups


@admin.command("dledgerStatus")
@namesrv_option
@click.option("-b", "--brokerAddr", "broker_addr", help="a broker of the group to show")
@click.option("-c", "--clusterName", "cluster_name", help="every DLedger group of this cluster")
@click.option("-i", "--interval", type=click.IntRange(1), default=None, help="print again every N seconds")
def dledger_status(namesrv: str, broker_addr: str | None, cluster_name: str | None, interval: int | None) -> None:
    """DLedger groups: per member its role, term, leader, log end, commit index and lag behind the leader."""
    if broker_addr is not None and cluster_name is not None:
        raise click.UsageError("give at most one of -b brokerAddr or -c clusterName")

    async def once(client: AdminClient) -> None:
        groups = await _dledger_groups(
            client, broker_addr.strip() if broker_addr else None, cluster_name.strip() if cluster_name else None
        )
        tables = [dledger_group_table(g, members) for g, members in sorted(groups.items())]
        print_text(*tables)

    run_repeating(namesrv, once, interval)


@admin.command("transferLeader")
@namesrv_option
@click.option("-g", "--group", "group", required=True, help="the DLedger group (its brokerName)")
@click.option("-t", "--target", required=True, help="the member to lead next (n0, n1, ...)")
@click.option("--timeout", type=click.FloatRange(0.5, 120), default=15.0, show_default=True, help="seconds to wait")
def transfer_leader(namesrv: str, group: str, target: str, timeout: float) -> None:
    """Hand a DLedger group's leadership (its master) to another member, e.g. before an upgrade;
    waits until the name server lists the target as the group's master."""
    group, target = group.strip(), target.strip()

    async def run(client: AdminClient) -> str:
        deadline = SYSTEM_CLOCK.monotonic() + timeout
        data = (await client.cluster_info()).broker_addr_table.get(group)
        if data is None:
            raise AdminError(f"broker group {group!r} is not known to the name server")
        members: dict[str, DLedgerStatus] = {}
        for addr in sorted(set(data.broker_addrs.values())):
            st = await _status_or_reason(client, addr)
            if isinstance(st, DLedgerStatus):
                members[addr] = st
        target_addr = next((a for a, st in members.items() if st.self_id == target), None)
        if target_addr is None:
            known = ", ".join(sorted(st.self_id for st in members.values())) or "none"
            raise AdminError(f"{target!r} is not a live member of {group} (members answering: {known})")
        leaders = [(a, st) for a, st in members.items() if st.is_leader]
        if not leaders:
            raise AdminError(f"{group} has no leader right now; try again once one is elected")
        leader_addr, leader = max(leaders, key=lambda x: x[1].term)
        if leader.self_id != target:
            remaining = max(0.5, deadline - SYSTEM_CLOCK.monotonic())
            await client.dledger_transfer_leader(leader_addr, target, timeout=min(remaining, 10.0))
        while True:  # the new leader registers as master (brokerId 0) with the name server
            current = (await client.cluster_info()).broker_addr_table.get(group)
            if current is not None and current.master_addr() == target_addr:
                return f"{group}: {leader.self_id} -> {target}; master is now {target_addr}"
            if SYSTEM_CLOCK.monotonic() > deadline:
                now = current.master_addr() if current is not None else None
                raise AdminError(
                    f"{target} leads {group} but the name server still lists {now or 'no'} master after {timeout:.0f}s"
                )
            await asyncio.sleep(0.1)

    click.echo(run_with_client(namesrv, run))


# -- consumers ---------------------------------------------------------------------------
@admin.command("consumerProgress")
@namesrv_option
@click.option("-g", "--groupName", "group", help="consumer group name (all groups when left out)")
@click.option("-t", "--topic", help="only this topic of the group")
def consumer_progress(namesrv: str, group: str | None, topic: str | None) -> None:
    """Query consumers's progress, speed."""
    if group is None:
        if topic is not None:
            raise click.UsageError("-t needs -g")
        infos = run_with_client(namesrv, lambda c: c.consumer_groups())
        table = _table("#Group", "#Count", "#Version", "#Type", "#Model", "#TPS", "#Diff Total")
        for gi in infos:
            online = gi.count > 0
            kind = ("PULL" if gi.consume_type == "CONSUME_ACTIVELY" else "PUSH") if online else ""
            model = gi.message_model if online and gi.consume_type == "CONSUME_PASSIVELY" else ""
            version = mq_version_desc(gi.version) if online else "OFFLINE"
            table.add_row(gi.group, str(gi.count), version, kind, model, str(int(gi.consume_tps)), str(gi.diff_total))
        print_text(table)
        return
    stats = run_with_client(namesrv, lambda c: c.examine_consume_stats(group.strip(), topic.strip() if topic else None))
    table = _table("#Topic", "#Broker Name", "#QID", "#Broker Offset", "#Consumer Offset", "#Diff", "#LastTime")
    for mq, w in stats.offset_table.items():
        last = dt.datetime.fromtimestamp(w.last_timestamp / 1000).strftime("%Y-%m-%d %H:%M:%S")
        table.add_row(
            mq.topic,
            mq.broker_name,
            str(mq.queue_id),
            str(w.broker_offset),
            str(w.consumer_offset),
            str(w.diff),
            last if w.last_timestamp else "N/A",
        )
    print_text(table, "", f"Consume TPS: {stats.consume_tps:.2f}", f"Diff Total: {stats.total_diff}")


# -- messages ----------------------------------------------------------------------------
@admin.command("queryMsgById")
@namesrv_option
@click.option(
    "-i", "--msgId", "msg_ids", required=True, help="message id(s), comma separated: offset ids or unique keys"
)
@click.option("-t", "--topic", help="look unique keys up in this topic only (default: every user topic)")
def query_msg_by_id(namesrv: str, msg_ids: str, topic: str | None) -> None:
    """Query Message by Id: an offset msgId, else (as mqadmin) the unique key producers print."""
    ids = [i.strip() for i in msg_ids.split(",") if i.strip()]
    if not ids:
        raise click.UsageError("-i needs a message id")

    async def run(client: AdminClient) -> list[MessageRecord]:
        return [await view_message_any_id(client, i, topic.strip() if topic else None) for i in ids]

    records = run_with_client(namesrv, run)
    for n, rec in enumerate(records):
        if n:
            click.echo("")
        print_text(message_grid(rec))


@admin.command("queryMsgByKey")
@namesrv_option
@click.option("-t", "--topic", required=True, help="topic name")
@click.option("-k", "--msgKey", "key", required=True, help="message key")
def query_msg_by_key(namesrv: str, topic: str, key: str) -> None:
    """Query Message by Key."""
    topic, key = topic.strip(), key.strip()
    result = run_with_client(namesrv, lambda c: c.query_by_key(topic, key))
    if not result.messages:
        raise click.ClickException(f"no message with key {key!r} in topic {topic}")
    table = _table("#Message ID", "#QID", "#Offset", "#Offset Msg ID")
    for rec in result.messages:
        table.add_row(msg_id(rec), str(rec.queue_id), str(rec.queue_offset), rec.offset_msg_id)
    print_text(table)


# The operator commands that live by concept in ledgermq.cli.admin.*.
for _module in (brokers, controller, groups, messages, stats, topics):
    for _command in _module.COMMANDS:
        admin.add_command(_command)
