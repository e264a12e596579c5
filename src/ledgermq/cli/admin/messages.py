"""``admin queryMsgByUniqueKey`` and ``printMsg``: finding a message by the id producers
print, and dumping a topic's messages over a time range."""

from __future__ import annotations

import click

from ledgermq.admin import operations as ops
from ledgermq.admin.client import AdminClient
from ledgermq.admin.model import AdminResponseError, msg_id
from ledgermq.cli.admin.common import parse_mqadmin_time
from ledgermq.cli.admin.plumbing import namesrv_option, print_text, run_with_client
from ledgermq.cli.admin_render import message_grid
from ledgermq.protocol.codes import ResponseCode
from ledgermq.protocol.message import MessageRecord


@click.command("queryMsgByUniqueKey")
@namesrv_option
@click.option("-i", "--msgId", "unique_key", required=True, help="message id (the unique key producers print)")
@click.option("-t", "--topic", required=True, help="the topic of msg")
@click.option("-g", "--consumerGroup", "consumer_group", default=None, help="consumer group name")
@click.option("-d", "--clientId", "client_id", default=None, help="the consumer's client id")
def query_msg_by_unique_key(
    namesrv: str, unique_key: str, topic: str, consumer_group: str | None, client_id: str | None
) -> None:
    """Query Message by Unique key; with -g and -d, have that consumer consume it directly."""
    key, topic = unique_key.strip(), topic.strip()

    async def find(client: AdminClient) -> MessageRecord:
        found = await ops.query_by_unique_key(client, topic, key)
        if found is None:
            raise AdminResponseError(ResponseCode.QUERY_NOT_FOUND, f"no message with unique key {key} in {topic}")
        return found

    if consumer_group and client_id:
        group, cid = consumer_group.strip(), client_id.strip()

        async def direct(client: AdminClient) -> str:
            record = await find(client)
            return ops.direct_result_text(await ops.consume_message_directly(client, group, cid, record))

        click.echo(run_with_client(namesrv, direct))
        return
    print_text(message_grid(run_with_client(namesrv, find)))


def _message_line(rec: MessageRecord, charset: str, print_body: bool) -> str:
    """``MSGID: <id> MessageExt [...] BODY: <body>`` as mqadmin printMsg prints each message."""
    props = "{" + ", ".join(f"{k}={v}" for k, v in rec.properties.items()) + "}"
    ext = (
        f"MessageExt [brokerName={rec.broker_name}, queueId={rec.queue_id}, queueOffset={rec.queue_offset}, "
        f"sysFlag={rec.sysflag}, bornTimestamp={rec.born_timestamp}, bornHost={rec.born_host[0]}:{rec.born_host[1]}, "
        f"storeTimestamp={rec.store_timestamp}, storeHost={rec.store_host[0]}:{rec.store_host[1]}, "
        f"msgId={rec.offset_msg_id}, commitLogOffset={rec.physical_offset}, reconsumeTimes={rec.reconsume_times}, "
        f"Message=[topic={rec.topic}, properties={props}]]"
    )
    body = rec.body.decode(charset, "replace") if print_body else "NOT PRINT BODY"
    return f"MSGID: {msg_id(rec)} {ext} BODY: {body}"


@click.command("printMsg")
@namesrv_option
@click.option("-t", "--topic", required=True, help="topic name")
@click.option("-c", "--charsetName", "charset", default="UTF-8", show_default=True, help="CharsetName(eg: UTF-8,GBK)")
@click.option("-s", "--subExpression", "expression", default="*", show_default=True, help="Subscribe Expression")
@click.option("-b", "--beginTimestamp", "begin", help="epoch millis or yyyy-MM-dd#HH:mm:ss:SSS (default: start)")
@click.option("-e", "--endTimestamp", "end", help="epoch millis or yyyy-MM-dd#HH:mm:ss:SSS (default: now)")
@click.option("-d", "--printBody", "print_body", type=click.BOOL, default=True, show_default=True, help="print body")
def print_msg(
    namesrv: str, topic: str, charset: str, expression: str, begin: str | None, end: str | None, print_body: bool
) -> None:
    """Print Message Detail."""
    try:
        "".encode(charset)
    except LookupError:
        raise click.BadParameter(f"unknown charset {charset!r}", param_hint="-c") from None
    begin_ms = parse_mqadmin_time(begin) if begin else None
    end_ms = parse_mqadmin_time(end) if end else None
    slices = run_with_client(
        namesrv, lambda c: ops.print_messages(c, topic.strip(), expression.strip(), begin_ms, end_ms)
    )
    for qs in slices:
        mq = qs.mq
        click.echo(
            f"minOffset={qs.min_offset}, maxOffset={qs.max_offset}, "
            f"MessageQueue [topic={mq.topic}, brokerName={mq.broker_name}, queueId={mq.queue_id}]"
        )
        for rec in qs.messages:
            click.echo(_message_line(rec, charset, print_body))


COMMANDS: tuple[click.Command, ...] = (query_msg_by_unique_key, print_msg)
