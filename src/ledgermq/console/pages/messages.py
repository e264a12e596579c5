"""Messages: query by topic and time range, by key, or by id; a message's properties, body
(text, hex, JSON), which groups have consumed it, its retry and DLQ copies; resend it to a
group (handed to an online client of the group, as rocketmq-dashboard does); the DLQ of a
group with resend."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from ledgermq.admin import message_ops
from ledgermq.admin import operations as ops
from ledgermq.admin.model import DLQ_PREFIX, AdminError
from ledgermq.clock import SYSTEM_CLOCK
from ledgermq.console.body_preview import preview
from ledgermq.console.pages.forms import FormError, input_time, local_time_ms, posted, text
from ledgermq.console.render import failure_text, render
from ledgermq.console.state import Console, console_of
from ledgermq.errors import LedgerError
from ledgermq.protocol.message import MessageRecord

routes = web.RouteTableDef()
LIMIT = 200


def _topics(topics: list[str]) -> list[str]:
    return [t for t in topics if not t.startswith(ops.SYSTEM_TOPIC_PREFIXES)]


@routes.get("/messages")
async def messages_page(request: web.Request) -> web.StreamResponse:
    console = console_of(request)
    q = request.query
    mode = q.get("mode", "time")
    now = SYSTEM_CLOCK.wall_ms()
    context: dict[str, Any] = {
        "mode": mode,
        "topic": q.get("topic", "").strip(),
        "key": q.get("key", "").strip(),
        "msg_id": q.get("id", "").strip(),
        "begin": q.get("begin") or input_time(now - 3600_000),
        "end": q.get("end") or input_time(now + 60_000),
        "topics": _topics(await console.answers.get("topics", console.admin.topic_list)),
        "results": None,
        "more": False,
    }
    if "run" not in q:
        return render(request, "messages.html", **context)
    try:
        topic = str(context["topic"])
        if mode == "time":
            if not topic:
                raise FormError("topic: required")
            begin = local_time_ms(str(context["begin"]), "begin")
            end = local_time_ms(str(context["end"]), "end")
            context["results"], context["more"] = await message_ops.messages_by_time(
                console.admin, topic, begin, end, LIMIT
            )
        elif mode == "key":
            if not topic or not context["key"]:
                raise FormError("topic and key: both required")
            found = await console.admin.query_by_key(topic, str(context["key"]))
            context["results"] = sorted(found.messages, key=lambda r: r.store_timestamp, reverse=True)
        elif mode == "id":
            if not context["msg_id"]:
                raise FormError("message id: required")
            record = await ops.view_message_any_id(console.admin, str(context["msg_id"]), topic or None)
            context["results"] = [record]
        else:
            raise FormError(f"mode {mode!r}: expected time, key or id")
    except (FormError, LedgerError) as exc:
        return render(request, "messages.html", status=400, error=f"query failed: {failure_text(exc)}", **context)
    return render(request, "messages.html", **context)


async def _message_context(console: Console, msg_id: str, topic: str | None) -> dict[str, Any]:
    record = await ops.view_message_any_id(console.admin, msg_id, topic)
    context: dict[str, Any] = {
        "m": record,
        "store_addr": message_ops.store_addr(record),
        "body": preview(record.body),
        "track": [],
        "track_error": "",
        "copies": [],
        "copies_error": "",
        "groups": [],
    }
    real_topic = record.topic
    if real_topic.startswith(DLQ_PREFIX):
        context["groups"] = [real_topic[len(DLQ_PREFIX) :]]
        return context
    try:
        track = await message_ops.message_track(console.admin, record)
        context["track"] = track
        context["groups"] = [t.group for t in track]
    except AdminError as exc:
        context["track_error"] = str(exc)
    try:
        context["copies"] = await message_ops.message_copies(console.admin, record, list(context["groups"]))
    except AdminError as exc:
        context["copies_error"] = str(exc)
    return context


@routes.get("/messages/view")
async def message_page(request: web.Request) -> web.StreamResponse:
    msg_id = request.query.get("id", "").strip()
    if not msg_id:
        raise web.HTTPBadRequest(text="which message? (id=...)")
    topic = request.query.get("topic", "").strip() or None
    return render(request, "message.html", **await _message_context(console_of(request), msg_id, topic))


async def _resend(console: Console, group: str, client_id: str, record: MessageRecord) -> str:
    """Hand ``record`` to a client of ``group`` (the one named, else the first online)."""
    if not client_id:
        connection = await console.admin.examine_consumer_connection(group)
        if not connection.connections:
            raise AdminError(f"group {group} has no online consumer: a resend hands the message to a connected client")
        client_id = connection.connections[0].client_id
    result = await ops.consume_message_directly(console.admin, group, client_id, record)
    outcome = str(result.get("consumeResult") or "")
    if outcome not in ("CR_SUCCESS", "SUCCESS"):
        raise AdminError(f"client {client_id} of {group} did not consume it: {ops.direct_result_text(result)}")
    return f"consumed again by {client_id} of {group} ({outcome})"


@routes.post("/messages/resend")
async def resend(request: web.Request) -> web.StreamResponse:
    console = console_of(request)
    form = await posted(request)
    msg_id = text(form, "id")
    topic = text(form, "topic") or None
    try:
        group = text(form, "group", required=True)
        record = await ops.view_message_any_id(console.admin, msg_id, topic)
        flash = await _resend(console, group, text(form, "clientId"), record)
    except (FormError, LedgerError) as exc:
        context = await _message_context(console, msg_id, topic)
        return render(request, "message.html", status=400, error=f"not resent: {failure_text(exc)}", **context)
    return render(request, "message.html", flash=flash, **await _message_context(console, msg_id, topic))


async def _dlq_context(console: Console, group: str) -> dict[str, Any]:
    groups = await console.answers.get("groups", console.admin.consumer_groups)
    context: dict[str, Any] = {"group": group, "groups": [g.group for g in groups], "results": None, "more": False}
    if group:
        records, more = await message_ops.messages_by_time(
            console.admin, DLQ_PREFIX + group, 0, SYSTEM_CLOCK.wall_ms() + 60_000, LIMIT
        )
        context["results"], context["more"] = records, more
    return context


@routes.get("/dlq")
async def dlq_page(request: web.Request) -> web.StreamResponse:
    console = console_of(request)
    group = request.query.get("group", "").strip()
    try:
        context = await _dlq_context(console, group)
    except LedgerError as exc:
        context = await _dlq_context(console, "")
        context["group"] = group
        return render(request, "dlq.html", status=400, error=f"no DLQ for {group}: {failure_text(exc)}", **context)
    return render(request, "dlq.html", **context)


@routes.post("/dlq/resend")
async def dlq_resend(request: web.Request) -> web.StreamResponse:
    console = console_of(request)
    form = await posted(request)
    group = text(form, "group")
    try:
        record = await ops.view_message_any_id(console.admin, text(form, "id", required=True), DLQ_PREFIX + group)
        flash = await _resend(console, group, "", record)
    except (FormError, LedgerError) as exc:
        context = await _dlq_context(console, group)
        return render(request, "dlq.html", status=400, error=f"not resent: {failure_text(exc)}", **context)
    return render(request, "dlq.html", flash=flash, **await _dlq_context(console, group))
