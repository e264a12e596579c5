"""Topics: the list with search and create; one topic's route, queues (min/max offset, last
store time), consumer groups, its timers still waiting on each broker, update, delete, and a
test message (at once or at a delivery time) whose landing place (broker, queue, offset, id)
the page shows."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from ledgermq.admin import operations as ops
from ledgermq.admin import timer_ops
from ledgermq.admin.model import AdminError, AdminResponseError, select_broker_addr
from ledgermq.client.message import Message
from ledgermq.clock import SYSTEM_CLOCK
from ledgermq.console.cluster_view import TimerFacts
from ledgermq.console.pages.forms import FormError, integer, local_time_ms, posted, properties, text
from ledgermq.console.render import failure_text, render
from ledgermq.console.state import Console, console_of
from ledgermq.errors import LedgerError
from ledgermq.protocol.codes import ResponseCode
from ledgermq.protocol.route import PERM_READ, PERM_WRITE

routes = web.RouteTableDef()
PERMS = {"6": "read + write", "4": "read only", "2": "write only", "0": "none"}


# Topics every RocketMQ broker creates for itself (besides the prefixed ones), as the
# dashboard's "system topic" filter knows them; a broker also makes one named after its
# cluster and one after its broker name.
SYSTEM_TOPICS = frozenset({"SELF_TEST_TOPIC", "OFFSET_MOVED_EVENT", "BenchmarkTest", "TBW102"})


def topic_kind(name: str, own_names: frozenset[str] = frozenset()) -> str:
    if name.startswith("%RETRY%"):
        return "retry"
    if name.startswith("%DLQ%"):
        return "DLQ"
    if name.startswith(ops.SYSTEM_TOPIC_PREFIXES) or name in SYSTEM_TOPICS or name in own_names:
        return "system"
    return "normal"


async def _list_context(console: Console, request: web.Request) -> dict[str, Any]:
    query = request.query.get("q", "").strip()
    show_system = request.query.get("system") == "1"
    topics, info = await asyncio.gather(
        console.answers.get("topics", console.admin.topic_list),
        console.answers.get("cluster_info", console.admin.cluster_info),
    )
    own = frozenset(info.cluster_addr_table) | frozenset(info.broker_addr_table)
    kinds = [(t, topic_kind(t, own)) for t in topics]
    rows = [
        (t, kind)
        for t, kind in kinds
        if (show_system or kind == "normal") and (not query or query.lower() in t.lower())
    ]
    return {"rows": rows, "q": query, "show_system": show_system, "clusters": sorted(info.cluster_addr_table)}


@routes.get("/topics")
async def topics_page(request: web.Request) -> web.StreamResponse:
    return render(request, "topics.html", **await _list_context(console_of(request), request))


@routes.post("/topics")
async def create_topic(request: web.Request) -> web.StreamResponse:
    console = console_of(request)
    form = await posted(request)
    try:
        topic = text(form, "topic", required=True)
        cluster = text(form, "cluster", required=True)
        read = integer(form, "readQueueNums", low=1, high=1024, default=8)
        write = integer(form, "writeQueueNums", low=1, high=1024, default=8)
        perm = integer(form, "perm", low=0, high=7, default=PERM_READ | PERM_WRITE)
        masters = await console.admin.create_topic_in_cluster(
            cluster, topic, read_queue_nums=read, write_queue_nums=write, perm=perm
        )
    except (FormError, LedgerError) as exc:
        console.answers.forget()
        context = await _list_context(console, request)
        return render(request, "topics.html", status=400, error=f"topic not created: {failure_text(exc)}", **context)
    console.answers.forget()
    context = await _list_context(console, request)
    flash = f"topic {topic} created on {', '.join(masters)}"
    return render(request, "topics.html", flash=flash, **context)


async def _detail_context(console: Console, topic: str) -> dict[str, Any]:
    try:
        route = await console.admin.route(topic)
    except AdminResponseError as exc:
        if exc.code == ResponseCode.TOPIC_NOT_EXIST:
            raise web.HTTPNotFound(text=f"topic {topic} does not exist (the name server has no route for it)") from None
        raise
    queues: list[tuple[str, int, int, int, int]] = []
    groups: set[str] = set()
    problems: list[str] = []
    for data in sorted(route.broker_datas, key=lambda d: d.broker_name):
        addr = select_broker_addr(data)
        if addr is None:
            continue
        try:
            stats = await console.admin.topic_stats(addr, topic)
            queues.extend((mq.broker_name, mq.queue_id, o.min_offset, o.max_offset, o.last_update_timestamp)
                          for mq, o in sorted(stats.items()))  # fmt: skip
            groups.update(await ops.query_topic_consume_by_who(console.admin, addr, topic))
        except AdminError as exc:
            problems.append(f"{data.broker_name} ({addr}): {exc}")
    queue_conf = route.queue_datas[0] if route.queue_datas else None
    timers = await asyncio.gather(
        *(_broker_timers(console, d.broker_name, a, topic) for d in route.broker_datas if (a := d.master_addr()))
    )
    return {
        "topic": topic,
        "route": route,
        "queues": queues,
        "groups": sorted(groups),
        "problems": problems,
        "queue_conf": queue_conf,
        "perms": PERMS,
        "sent": None,
        "sent_at": None,
        "timer_topic": timer_ops.TIMER_TOPIC,
        "timers": sorted(timers, key=lambda t: t.broker_name),
    }


@dataclass(frozen=True, slots=True)
class BrokerTimers:
    """One master's timers: its totals (all topics) and this topic's still waiting."""

    broker_name: str
    addr: str
    facts: TimerFacts | None  # None: the broker has no timers (an older broker), or error
    pending: timer_ops.PendingTimers | None  # None: the broker does not let its timer queue be read
    error: str = ""


async def _broker_timers(console: Console, broker_name: str, addr: str, topic: str) -> BrokerTimers:
    try:
        facts = TimerFacts.from_table(await console.admin.broker_runtime_info(addr))
        if facts is None:
            return BrokerTimers(broker_name, addr, None, None)
        # delivered: every step up to where the broker's delivery stands (now - how far behind)
        delivered_to = SYSTEM_CLOCK.wall_ms() - facts.read_behind_s * 1000
        try:
            pending = await timer_ops.pending_timers(console.admin, addr, broker_name, topic, delivered_to)
        except AdminResponseError as exc:
            if exc.code != ResponseCode.TOPIC_NOT_EXIST:
                raise
            # a broker without a topic config for its timer queue (RocketMQ 5 brokers have one)
            # refuses to have it read: its total is all there is to show
            return BrokerTimers(broker_name, addr, facts, None)
    except LedgerError as exc:
        return BrokerTimers(broker_name, addr, None, None, failure_text(exc))
    return BrokerTimers(broker_name, addr, facts, pending)


@routes.get("/topics/{topic}")
async def topic_page(request: web.Request) -> web.StreamResponse:
    topic = request.match_info["topic"]
    return render(request, "topic.html", **await _detail_context(console_of(request), topic))


@routes.post("/topics/{topic}/update")
async def update_topic(request: web.Request) -> web.StreamResponse:
    console = console_of(request)
    topic = request.match_info["topic"]
    form = await posted(request)
    try:
        read = integer(form, "readQueueNums", low=1, high=1024)
        write = integer(form, "writeQueueNums", low=1, high=1024)
        perm = integer(form, "perm", low=0, high=7)
        route = await console.admin.route(topic)
        done = []
        for data in route.broker_datas:
            master = data.master_addr()
            if master:
                await console.admin.create_topic(master, topic, read_queue_nums=read, write_queue_nums=write, perm=perm)
                done.append(master)
        if not done:
            raise AdminError(f"no broker group of {topic} has a master to update it on")
    except (FormError, LedgerError) as exc:
        context = await _detail_context(console, topic)
        return render(request, "topic.html", status=400, error=f"not updated: {failure_text(exc)}", **context)
    console.answers.forget()
    context = await _detail_context(console, topic)
    return render(request, "topic.html", flash=f"{topic} updated on {', '.join(done)}", **context)


@routes.post("/topics/{topic}/delete")
async def delete_topic(request: web.Request) -> web.StreamResponse:
    console = console_of(request)
    topic = request.match_info["topic"]
    try:
        info = await console.admin.cluster_info()
        route = await console.admin.route(topic)
        clusters = sorted({c for d in route.broker_datas if (c := info.cluster_of(d.broker_name))})
        done: list[str] = []
        for cluster in clusters:
            done += await ops.delete_topic_in_cluster(console.admin, cluster, topic)
    except LedgerError as exc:
        context = await _detail_context(console, topic)
        return render(request, "topic.html", status=400, error=f"not deleted: {failure_text(exc)}", **context)
    console.answers.forget()
    context = await _list_context(console, request)
    return render(request, "topics.html", flash=f"topic {topic} deleted from {', '.join(done)}", **context)


@routes.post("/topics/{topic}/send")
async def send_test_message(request: web.Request) -> web.StreamResponse:
    console = console_of(request)
    topic = request.match_info["topic"]
    form = await posted(request)
    try:
        deliver_text = text(form, "deliverAt")
        deliver_ms = local_time_ms(deliver_text, "deliverAt") if deliver_text else None
        msg = Message(
            topic,
            text(form, "body").encode(),
            tags=text(form, "tags") or None,
            keys=text(form, "keys") or None,
            properties=properties(text(form, "properties")),
            deliver_at=deliver_ms / 1000 if deliver_ms is not None else None,
        )
        producer = await console.producer()
        result = await producer.send(msg)
    except (FormError, LedgerError, ValueError) as exc:
        context = await _detail_context(console, topic)
        return render(request, "topic.html", status=400, error=f"not sent: {failure_text(exc)}", **context)
    console.answers.forget()
    context = await _detail_context(console, topic)
    context["sent"] = result
    context["sent_at"] = deliver_ms
    return render(request, "topic.html", flash=f"sent: {result.status.name}", **context)
