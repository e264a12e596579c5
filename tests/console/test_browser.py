"""The console in a real headless Chromium against a real name server and broker: every page
loads without a console error, a topic created in the page is what ``ledgermq admin
topicList`` lists, a test message is found by key, a group's lag rises and falls in place,
an offset reset makes the consumer read again, a failed action says why, and a read-only
user's change is refused."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from typing import Any

from playwright.sync_api import expect

from ledgermq.admin.sync import SyncAdmin
from ledgermq.client import ConsumeConcurrentlyStatus, ConsumeFromWhere, Message
from ledgermq.client.sync import SyncProducer, SyncPushConsumer
from tests.compat.cluster import wait_until
from tests.console.conftest import ConsoleCluster
from tests.console.harness import Browser

PAGES = ["/cluster", "/topics", "/consumers", "/producers", "/messages", "/dlq", "/trends"]


def _topic_list(ns: str) -> list[str]:
    out = subprocess.run(
        [sys.executable, "-m", "ledgermq.cli.main", "admin", "topicList", "-n", ns],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    return out.stdout.split()


def _create(ns: str, topic: str, queues: int = 4) -> None:
    with SyncAdmin(ns) as admin:
        admin.create_topic_in_cluster("CompatCluster", topic, read_queue_nums=queues, write_queue_nums=queues)


def test_every_page_loads_without_console_errors(
    console_cluster: ConsoleCluster, chromium: Browser, problems: list[str]
) -> None:
    page = chromium.page()
    for path in PAGES:
        response = page.goto(console_cluster.console.url + path)
        assert response is not None and response.status == 200, path
        assert "Traceback" not in page.content()
    page.goto(console_cluster.console.url + "/cluster")
    row = page.locator(f'tr[data-addr="{console_cluster.cluster.broker_addr}"]')
    assert row.get_attribute("data-role") == "MASTER"
    page.wait_for_timeout(2500)  # two live refreshes of the cluster page happen without an error
    chromium.shoot(page, "console-cluster")
    page.goto(console_cluster.console.url + "/trends")
    page.locator("#broker-charts .chart canvas").first.wait_for()  # uPlot (shipped in the package) drew
    assert problems == []


def test_create_topic_in_the_page_and_admin_topic_list_has_it(
    console_cluster: ConsoleCluster, chromium: Browser, problems: list[str]
) -> None:
    page = chromium.page()
    page.goto(console_cluster.console.url + "/topics")
    form = page.locator("#create-topic")
    form.locator('input[name="topic"]').fill("ConsoleMadeTopic")
    form.locator('input[name="readQueueNums"]').fill("4")
    form.locator('input[name="writeQueueNums"]').fill("4")
    form.locator('button[type="submit"]').click()
    page.locator(".flash.ok").wait_for()
    assert "ConsoleMadeTopic created" in page.locator(".flash.ok").inner_text()
    wait_until("topicList to list ConsoleMadeTopic", lambda: "ConsoleMadeTopic" in _topic_list(console_cluster.ns), 10)
    page.locator('#topic-list tr[data-topic="ConsoleMadeTopic"] a').click()
    assert page.locator("#queues tbody tr").count() == 4
    chromium.shoot(page, "console-topic")
    # a failed action says why, in the page, without a traceback
    page.goto(console_cluster.console.url + "/topics")
    page.evaluate("document.querySelector('#create-topic input[name=topic]').removeAttribute('pattern')")
    page.locator('#create-topic input[name="topic"]').fill("bad topic!")
    page.locator('#create-topic button[type="submit"]').click()
    error = page.locator(".flash.error").inner_text()
    assert "topic not created" in error and "bad topic!" in error, error
    assert "Traceback" not in page.content()
    assert problems == [] or all("400" in p for p in problems), problems  # the 400 answer itself is logged


def test_send_a_test_message_and_find_it_by_key(
    console_cluster: ConsoleCluster, chromium: Browser, problems: list[str]
) -> None:
    _create(console_cluster.ns, "ConsoleSendTopic")
    page = chromium.page()
    page.goto(console_cluster.console.url + "/topics/ConsoleSendTopic")
    form = page.locator("#send-message")
    form.locator('input[name="tags"]').fill("TagA")
    form.locator('input[name="keys"]').fill("order-4711")
    form.locator('textarea[name="properties"]').fill("color=blue")
    form.locator('textarea[name="body"]').fill('{"order": 4711, "item": "tea"}')
    form.locator('button[type="submit"]').click()
    landed = page.locator("#sent")
    landed.wait_for()
    msg_id = page.locator("#sent-msg-id").inner_text().strip()
    assert "SEND_OK" in landed.inner_text() and "broker-a" in landed.inner_text()
    page.goto(console_cluster.console.url + "/messages?mode=key")
    page.locator('#message-query input[name="topic"]').fill("ConsoleSendTopic")
    page.locator('#message-query input[name="key"]').fill("order-4711")
    page.locator('#message-query button[type="submit"]').click()
    rows = page.locator("table.messages tbody tr")
    assert rows.count() == 1 and msg_id in rows.first.inner_text()
    rows.first.locator("a").click()
    assert page.locator("#body-text").inner_text().startswith('{"order": 4711')
    page.locator('[data-tab="json"]').click()
    assert '"item": "tea"' in page.locator('[data-panel="json"]').inner_text()
    assert "blue" in page.locator("#properties").inner_text()
    chromium.shoot(page, "console-message")
    assert problems == []


def test_lag_rises_and_falls_live_and_a_reset_makes_the_consumer_read_again(
    console_cluster: ConsoleCluster, chromium: Browser, problems: list[str]
) -> None:
    ns, topic, group = console_cluster.ns, "ConsoleLagTopic", "console-lag-group"
    _create(ns, topic)
    received: list[bytes] = []
    lock = threading.Lock()

    def listener(msgs: list[Any], _ctx: Any) -> ConsumeConcurrentlyStatus:
        with lock:
            received.extend(m.body for m in msgs)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    def count() -> int:
        with lock:
            return len(received)

    def consumer() -> SyncPushConsumer:
        c = SyncPushConsumer(
            group,
            ns,
            client_ip="127.0.0.1",
            consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
            persist_consumer_offset_interval=1.0,
        )
        c.subscribe(topic)
        c.register_listener(listener)
        c.start()
        return c

    before_any = int(time.time() * 1000) - 2000
    with SyncProducer("console-lag-producer", ns) as producer:
        first = consumer()
        try:
            for i in range(10):
                producer.send(Message(topic, f"first-{i}".encode()))
            wait_until("the consumer to read the first 10", lambda: count() >= 10, 20)
            page = chromium.page()
            page.goto(console_cluster.console.url + f"/consumers/{group}")
            lag = page.locator("#total-lag")
            expect(lag).to_have_text("0", timeout=15_000)
            assert page.locator("#clients tbody tr").count() == 1
        finally:
            first.shutdown()  # commits its offsets
        for i in range(30):
            producer.send(Message(topic, f"second-{i}".encode()))
        # the page refreshes itself, no reload: the lag rises, and nobody is online
        expect(lag).to_have_text("30", timeout=15_000)
        page.locator("#no-clients").wait_for()
        chromium.shoot(page, "console-consumer-lag")
        second = consumer()
        try:
            expect(lag).to_have_text("0", timeout=20_000)  # ... and falls
            wait_until("the consumer to read all 40", lambda: count() >= 40, 20)
            # reset to before the first message: the consumer reads everything again
            form = page.locator("#reset-offset")
            form.locator('select[name="topic"]').select_option(topic)
            at = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(before_any / 1000))
            form.locator('input[name="time"]').fill(at)
            form.locator('button[type="submit"]').click()
            assert "reset to 4 queue offsets" in page.locator(".flash.ok").inner_text()
            assert page.locator("#reset-result tbody tr").count() == 4
            wait_until("the consumer to read the 40 again", lambda: count() >= 80, 30)
            with lock:
                assert sorted(received[40:80]) == sorted(received[:40])
        finally:
            second.shutdown()
    assert problems == []


def test_a_read_only_user_changes_nothing(
    console_cluster: ConsoleCluster, chromium: Browser, problems: list[str]
) -> None:
    url = console_cluster.guarded.url
    page = chromium.page()
    page.goto(url + "/topics")
    assert page.url.startswith(url + "/login")  # a login is required
    page.fill('input[name="username"]', "viewer")
    page.fill('input[name="password"]', "wrong")
    page.click('button[type="submit"]')
    assert "wrong user name or password" in page.locator(".flash.error").inner_text()
    page.fill('input[name="username"]', "viewer")
    page.fill('input[name="password"]', "viewer-pw")
    page.click('button[type="submit"]')
    page.wait_for_url(url + "/topics")
    assert page.locator("#create-topic").count() == 0  # no form to change anything
    assert "read-only" in page.locator("header .who").inner_text()
    # ... and a change sent anyway (a hand-made form with the session's own CSRF token) is refused
    page.evaluate(
        """() => {
        const f = document.createElement('form'); f.method = 'post'; f.action = '/topics';
        for (const [k, v] of [['_csrf', document.querySelector('input[name=_csrf]').value],
                              ['topic', 'ViewerTopic'], ['cluster', 'CompatCluster']]) {
            const i = document.createElement('input'); i.name = k; i.value = v; f.appendChild(i);
        }
        document.body.appendChild(f); f.submit(); }"""
    )
    page.wait_for_load_state()
    assert "viewer is read-only" in page.locator(".flash.error").inner_text()
    chromium.shoot(page, "console-read-only")
    assert "ViewerTopic" not in _topic_list(console_cluster.ns)
    page.click("header button.link")  # log out
    page.wait_for_url(url + "/login")
    # an admin may change
    page.goto(url + "/login?next=/topics")
    page.fill('input[name="username"]', "admin")
    page.fill('input[name="password"]', "admin-pw")
    page.click('button[type="submit"]')
    page.wait_for_url(url + "/topics")
    assert page.locator("#create-topic").count() == 1
    assert all("401" in p or "403" in p for p in problems), problems  # only the refusals themselves
