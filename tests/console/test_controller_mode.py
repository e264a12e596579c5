"""Controller mode on the cluster page, real processes: a name server with the controller
inside and two brokers in controller mode, and a console given only the name server (no
``--controller``). The page shows the controller's master, master epoch and SyncStateSet
(found through the name server, which answers controller requests itself); after SIGKILL of the master, the page
left open shows the new master and a higher master epoch within 5 s, and the killed broker
as down."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator

import pytest
from playwright.sync_api import expect

from tests.console.harness import Browser, ConsoleProcess
from tests.ha.controller_group import ControllerGroup
from tests.ha.process_group import GROUP, BrokerProc


@pytest.fixture(scope="module")
def controlled(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[ControllerGroup, BrokerProc, BrokerProc, ConsoleProcess]]:
    """Requested before ``chromium``: the group's start-up polls use asyncio.run, which
    Playwright's sync API (a running loop) would refuse."""
    root = tmp_path_factory.mktemp("controller-console")
    group = ControllerGroup(root / "group")
    a = group.add_broker("a")
    b = group.add_broker("b")
    console = ConsoleProcess(root, group.namesrv_addr, "--refresh-ms", "1000")
    try:
        group.start_pair(a, b)
        console.start()
        yield group, a, b, console
    finally:
        console.close()
        group.close()


def test_sync_state_set_without_a_flag_and_a_killed_master_replaced_within_5_s(
    controlled: tuple[ControllerGroup, BrokerProc, BrokerProc, ConsoleProcess], chromium: Browser, problems: list[str]
) -> None:
    _group, a, b, console = controlled
    page = chromium.page()
    page.goto(console.url + "/cluster")
    section = page.locator(f'section[data-group="{GROUP}"]')
    expect(section.locator(".badge.mode")).to_have_text("controller")
    facts = section.locator("p.controller")
    expect(facts).to_have_attribute("data-sync-state-set", "1,2", timeout=10_000)
    # No --controller needed: found in the brokers' controllerAddr (GET_BROKER_CONFIG) or on
    # the name servers (the controller inside answers there).
    assert (facts.get_attribute("title") or "").startswith("found through "), facts.get_attribute("title")
    epoch = int(facts.get_attribute("data-master-epoch") or "0")
    assert epoch >= 1
    expect(section.locator(f'tr[data-addr="{a.addr}"]')).to_have_attribute("data-role", "MASTER")
    expect(section.locator(f'tr[data-addr="{b.addr}"]')).to_have_attribute("data-role", "SLAVE")
    chromium.shoot(page, "console-controller")

    proc = a.server.proc
    assert proc is not None
    killed_at = time.monotonic()
    os.kill(proc.pid, signal.SIGKILL)
    expect(section.locator(f'tr[data-addr="{b.addr}"]')).to_have_attribute("data-role", "MASTER", timeout=5_000)
    expect(facts).to_have_attribute("data-master-epoch", str(epoch + 1), timeout=5_000)
    took = time.monotonic() - killed_at
    expect(section.locator(f'tr[data-addr="{a.addr}"]')).to_have_attribute("data-role", "DOWN", timeout=5_000)
    assert took <= 5.0, took
    print(f"new master {b.addr} (epoch {epoch + 1}) shown {took:.2f} s after SIGKILL of {a.addr}")
    chromium.shoot(page, "console-controller-failover")
    assert problems == []
