"""Producers: the online clients of a producer group, as the brokers of a topic see them
(rocketmq-dashboard asks the same way: a producer group is only known with a topic)."""

from __future__ import annotations

from aiohttp import web

from ledgermq.admin import operations as ops
from ledgermq.console.render import failure_text, render
from ledgermq.console.state import console_of
from ledgermq.errors import LedgerError

routes = web.RouteTableDef()


@routes.get("/producers")
async def producers_page(request: web.Request) -> web.StreamResponse:
    console = console_of(request)
    topic = request.query.get("topic", "").strip()
    group = request.query.get("group", "").strip()
    topics = [t for t in await console.answers.get("topics", console.admin.topic_list)
              if not t.startswith(ops.SYSTEM_TOPIC_PREFIXES)]  # fmt: skip
    connections = None
    error = None
    if topic and group:
        try:
            connections = await ops.producer_connection(console.admin, group, topic)
        except LedgerError as exc:
            error = f"no producers found: {failure_text(exc)}"
    return render(
        request, "producers.html", topic=topic, group=group, topics=topics, connections=connections, error=error
    )
