"""Consumer groups: the list (online clients, consume mode, lag, TPS), one group's clients,
subscriptions and lag per topic and queue (refreshed in place), reset offset by time, and
delete."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from ledgermq.admin import operations as ops
from ledgermq.admin.model import AdminError, ConsumerConnection, ConsumeStats, OffsetWrapper
from ledgermq.clock import SYSTEM_CLOCK
from ledgermq.console.pages.forms import FormError, input_time, local_time_ms, posted, text
from ledgermq.console.render import failure_text, render
from ledgermq.console.state import Console, console_of
from ledgermq.errors import LedgerError
from ledgermq.protocol.admin_body import MessageQueue

routes = web.RouteTableDef()


@dataclass(slots=True)
class TopicLag:
    topic: str
    queues: list[tuple[MessageQueue, OffsetWrapper]] = field(default_factory=list)

    @property
    def lag(self) -> int:
        return sum(max(0, w.diff) for _, w in self.queues)


@dataclass(slots=True)
class GroupDetail:
    group: str
    connection: ConsumerConnection | None
    connection_error: str
    stats: ConsumeStats | None
    stats_error: str
    topics: list[TopicLag]

    @property
    def total_lag(self) -> int:
        return sum(t.lag for t in self.topics)


async def _detail(console: Console, group: str) -> GroupDetail:
    async def load() -> GroupDetail:
        try:
            connection, connection_error = await console.admin.examine_consumer_connection(group), ""
        except AdminError as exc:
            connection, connection_error = None, str(exc)
        try:
            stats, stats_error = await console.admin.examine_consume_stats(group), ""
        except AdminError as exc:
            stats, stats_error = None, str(exc)
        by_topic: dict[str, TopicLag] = {}
        for mq, wrapper in (stats.offset_table if stats else {}).items():
            by_topic.setdefault(mq.topic, TopicLag(mq.topic)).queues.append((mq, wrapper))
        topics = [by_topic[t] for t in sorted(by_topic)]
        return GroupDetail(group, connection, connection_error, stats, stats_error, topics)

    return await console.answers.get(("group", group), load)


@routes.get("/consumers")
async def consumers_page(request: web.Request) -> web.StreamResponse:
    console = console_of(request)
    groups = await console.answers.get("groups", console.admin.consumer_groups)
    return render(request, "consumers.html", groups=groups)


async def _group_context(console: Console, group: str) -> dict[str, Any]:
    detail = await _detail(console, group)
    topics = sorted(
        {t.topic for t in detail.topics} | set(detail.connection.subscriptions if detail.connection else ())
    )
    default_time = input_time(SYSTEM_CLOCK.wall_ms() - 3600_000)
    return {"d": detail, "group": group, "reset_topics": topics, "default_time": default_time, "reset": None}


@routes.get("/consumers/{group}")
async def group_page(request: web.Request) -> web.StreamResponse:
    group = request.match_info["group"]
    return render(request, "consumer.html", **await _group_context(console_of(request), group))


@routes.get("/live/consumers/{group}")
async def group_live(request: web.Request) -> web.StreamResponse:
    detail = await _detail(console_of(request), request.match_info["group"])
    return render(request, "consumer_live.html", d=detail)


@routes.post("/consumers/{group}/reset")
async def reset_offset(request: web.Request) -> web.StreamResponse:
    console = console_of(request)
    group = request.match_info["group"]
    form = await posted(request)
    try:
        topic = text(form, "topic", required=True)
        timestamp = local_time_ms(text(form, "time", required=True), "time")
        force = form.get("force") == "1"
        offsets = await ops.reset_offset_by_time(console.admin, group, topic, timestamp, force)
    except (FormError, LedgerError) as exc:
        context = await _group_context(console, group)
        return render(request, "consumer.html", status=400, error=f"offset not reset: {failure_text(exc)}", **context)
    console.answers.forget()
    context = await _group_context(console, group)
    context["reset"] = sorted(offsets.items())
    flash = f"{group} on {topic} reset to {len(offsets)} queue offsets"
    return render(request, "consumer.html", flash=flash, **context)


@routes.post("/consumers/{group}/delete")
async def delete_group(request: web.Request) -> web.StreamResponse:
    console = console_of(request)
    group = request.match_info["group"]
    try:
        info = await console.admin.cluster_info()
        masters = sorted({a for c in info.cluster_addr_table for a in info.master_addrs(c)})
        if not masters:
            raise AdminError("no master broker to delete the group from")
        for addr in masters:
            await ops.delete_subscription_group(console.admin, addr, group, remove_offset=True)
    except LedgerError as exc:
        context = await _group_context(console, group)
        return render(request, "consumer.html", status=400, error=f"not deleted: {failure_text(exc)}", **context)
    console.answers.forget()
    groups = await console.admin.consumer_groups()
    flash = f"group {group} deleted (its subscription and offsets) on {', '.join(masters)}"
    return render(request, "consumers.html", groups=groups, flash=flash)
