"""Timer messages in a real Chromium against a real broker: a test message sent from the topic
page with a delivery time is a timer (the page says when it is due); until then the topic and
cluster pages count it on its broker, the topic page lists it as pending for the topic (where
the broker lets its timer queue be read), and the topic holds nothing; after its time it is
in the topic, found by its key, stored no earlier than it was due."""

from __future__ import annotations

import math
import time

from playwright.sync_api import expect

from tests.compat.cluster import wait_until
from tests.console.conftest import ConsoleCluster
from tests.console.harness import Browser
from tests.console.test_browser import _create

TOPIC = "ConsoleTimerTopic"
DELAY_S = 5


def _max_offsets(page: object) -> int:
    cells = page.locator("#queues tbody tr td:nth-child(4)").all_inner_texts()  # type: ignore[attr-defined]
    return sum(int(c) for c in cells)


def test_a_test_message_with_a_delivery_time_waits_as_a_timer(
    console_cluster: ConsoleCluster, chromium: Browser, problems: list[str]
) -> None:
    url = console_cluster.console.url
    _create(console_cluster.ns, TOPIC, queues=2)
    due_s = math.ceil(time.time()) + DELAY_S  # the form takes whole seconds
    page = chromium.page()
    page.goto(url + f"/topics/{TOPIC}")
    form = page.locator("#send-message")
    form.locator('input[name="keys"]').fill("timer-1")
    form.locator('textarea[name="body"]').fill("wake me up")
    form.locator('input[name="deliverAt"]').fill(time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(due_s)))
    form.locator('button[type="submit"]').click()
    page.locator("#sent").wait_for()
    assert "SEND_OK" in page.locator("#sent").inner_text()
    assert "a timer, due" in page.locator("#sent-due").inner_text()
    msg_id = page.locator("#sent-msg-id").inner_text().strip()

    # waiting: counted on its broker, nothing in the topic yet
    row = page.locator('#timers tr[data-broker="broker-a"]')
    assert int(row.locator(".broker-timers").inner_text()) >= 1
    assert _max_offsets(page) == 0
    # pending for the topic, with its id (the broker lets its timer queue be read: conftest.py)
    expect(row.locator(".topic-timers")).to_have_text("1")
    assert row.locator(f'.pending-timer[data-msg-id="{msg_id}"]').count() == 1
    assert time.time() < due_s, "the checks before the due time took too long to mean anything"
    chromium.shoot(page, "console-topic-timers")
    cluster = chromium.page()
    cluster.goto(url + "/cluster")
    pending = cluster.locator(f'tr[data-addr="{console_cluster.cluster.broker_addr}"] .timers-pending')
    assert int(pending.inner_text()) >= 1

    # delivered at its time: no longer pending, in the topic, found by its key
    def delivered() -> bool:
        page.goto(url + f"/topics/{TOPIC}")
        return _max_offsets(page) == 1 and row.locator(".topic-timers").inner_text() == "0"

    wait_until("the timer to be delivered", delivered, DELAY_S + 10, 0.5)
    page.goto(url + f"/messages?mode=key&run=1&topic={TOPIC}&key=timer-1")
    found = page.locator("table.messages tbody tr")
    expect(found).to_have_count(1)
    found.first.locator("a").click()
    assert page.locator("#body-text").inner_text() == "wake me up"
    stored = page.locator("#message-facts dt:text-is('Stored') + dd").inner_text()
    stored_s = time.mktime(time.strptime(stored[:19], "%Y-%m-%d %H:%M:%S"))
    assert stored_s >= due_s, (stored, due_s)  # not early
    assert problems == []
