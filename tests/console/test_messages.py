"""Messages in a real Chromium against a real name server and broker: the time-range query
finds what was stored in the range and nothing outside it; a message that a group fails twice
shows its retry and dead-letter copies on its page; the DLQ page lists it and, once the
consumer is fixed, resends it to the group's online client, which consumes it; a resend to
the group from a message's page is consumed again, and one the client refuses says why."""

from __future__ import annotations

import threading
import time
from typing import Any

from playwright.sync_api import expect

from ledgermq.client import ConsumeConcurrentlyStatus, ConsumeFromWhere, Message
from ledgermq.client.sync import SyncProducer, SyncPushConsumer
from tests.compat.cluster import wait_until
from tests.console.conftest import ConsoleCluster
from tests.console.harness import Browser
from tests.console.test_browser import _create

TOPIC = "ConsoleRetryTopic"
GROUP = "console-retry-group"


class Listener:
    """Records every body it is handed; fails the bodies starting with ``fail`` while ``failing``."""

    def __init__(self) -> None:
        self.failing = True
        self.bodies: list[bytes] = []
        self._lock = threading.Lock()

    def __call__(self, msgs: list[Any], _ctx: Any) -> ConsumeConcurrentlyStatus:
        with self._lock:
            self.bodies.extend(m.body for m in msgs)
        if self.failing and any(m.body.startswith(b"fail") for m in msgs):
            return ConsumeConcurrentlyStatus.RECONSUME_LATER
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    def times(self, body: bytes) -> int:
        with self._lock:
            return self.bodies.count(body)


def _local(ms: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(ms / 1000))


def test_time_range_retry_history_dlq_and_resend(
    console_cluster: ConsoleCluster, chromium: Browser, problems: list[str]
) -> None:
    ns, url = console_cluster.ns, console_cluster.console.url
    _create(ns, TOPIC, queues=2)
    listener = Listener()
    consumer = SyncPushConsumer(
        GROUP,
        ns,
        client_ip="127.0.0.1",
        consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
        max_reconsume_times=1,  # the first retry fails too: then the dead-letter queue
        persist_consumer_offset_interval=1.0,
    )
    consumer.subscribe(TOPIC)
    consumer.register_listener(listener)
    consumer.start()
    try:
        begin = time.time() * 1000 - 1000
        with SyncProducer("console-retry-producer", ns) as producer:
            ok = producer.send(Message(TOPIC, b"ok-1", keys="k-ok"))
            fail = producer.send(Message(TOPIC, b"fail-1", keys="k-fail"))
        end = time.time() * 1000 + 1000
        wait_until("the failing message to be tried twice", lambda: listener.times(b"fail-1") >= 2, 20)

        page = chromium.page()
        # -- the time-range query: both in the range, none after it
        page.goto(url + "/messages?mode=time")
        query = page.locator("#message-query")
        query.locator('input[name="topic"]').fill(TOPIC)
        query.locator('input[name="begin"]').fill(_local(begin))
        query.locator('input[name="end"]').fill(_local(end + 1000))
        query.locator('button[type="submit"]').click()
        rows = page.locator("table.messages tbody tr")
        expect(rows).to_have_count(2)
        assert {ok.msg_id, fail.msg_id} == {rows.nth(i).locator("td").first.inner_text() for i in range(2)}
        assert rows.first.locator("td").first.inner_text() == fail.msg_id  # newest first
        query = page.locator("#message-query")
        query.locator('input[name="begin"]').fill(_local(end + 2000))
        query.locator('input[name="end"]').fill(_local(end + 60_000))
        query.locator('button[type="submit"]').click()
        expect(page.locator("table.messages tbody tr td.empty")).to_have_text("no message found")

        # -- the failed message's history: one retry copy, then the dead-letter copy
        def history() -> list[str]:
            page.goto(url + f"/messages/view?id={fail.offset_msg_id}&topic={TOPIC}")
            return [r.inner_text() for r in page.locator("#copies tbody tr").all()]

        kinds = wait_until(
            "a retry and a DLQ copy on the message's page",
            lambda: (h := history()) and any("\tDLQ\t" in r for r in h) and h,
            20,
            0.5,
        )
        assert [r.split("\t")[1] for r in kinds] == ["retry", "DLQ"], kinds
        assert f"%RETRY%{GROUP}" in kinds[0] and f"%DLQ%{GROUP}" in kinds[1]
        track = page.locator("#track tbody tr").filter(has_text=GROUP)
        assert "CONSUMED" in track.inner_text()  # its offset passed it: it went to the DLQ, not stuck
        chromium.shoot(page, "console-message-history")

        # -- a resend the client refuses says why (the consumer still fails it)
        page.locator('#resend select[name="group"]').select_option(GROUP)
        page.locator('#resend button[type="submit"]').click()
        error = page.locator(".flash.error").inner_text()
        assert "not resent" in error and "CR_LATER" in error, error

        # -- a resend to the group from a message's page: its online client consumes it again
        before = listener.times(b"ok-1")
        page.goto(url + f"/messages/view?id={ok.offset_msg_id}&topic={TOPIC}")
        page.locator('#resend select[name="group"]').select_option(GROUP)
        page.locator('#resend button[type="submit"]').click()
        flash = page.locator(".flash.ok").inner_text()
        assert "consumed again by" in flash and "CR_SUCCESS" in flash, flash
        assert listener.times(b"ok-1") == before + 1

        # -- the DLQ page lists the dead letter; fixed, the consumer takes it from a resend
        page.goto(url + f"/dlq?group={GROUP}")
        dead = page.locator("#dlq tbody tr")
        expect(dead).to_have_count(1)
        assert TOPIC in dead.first.inner_text() and fail.msg_id in dead.first.inner_text()
        chromium.shoot(page, "console-dlq")
        listener.failing = False
        tries = listener.times(b"fail-1")
        dead.first.locator('button[type="submit"]').click()
        flash = page.locator(".flash.ok").inner_text()
        assert "consumed again by" in flash and GROUP in flash, flash
        assert listener.times(b"fail-1") == tries + 1
    finally:
        consumer.shutdown()
    assert all("400" in p for p in problems), problems  # only the refused resend's own answer
