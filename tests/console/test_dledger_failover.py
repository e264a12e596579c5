"""SIGKILL a DLedger leader and the cluster page (left open, not reloaded) shows the new
leader within 5 s, and the killed broker as down."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator

import pytest
from playwright.sync_api import expect

from tests.console.harness import Browser, ConsoleProcess
from tests.ha.dledger_group import GROUP, DLedgerGroup


@pytest.fixture(scope="module")
def group_and_console(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[DLedgerGroup, ConsoleProcess]]:
    """Module-scoped and requested before ``chromium``: the group's start-up polls use
    asyncio.run, which Playwright's sync API (a running loop) would refuse."""
    tmp_path = tmp_path_factory.mktemp("dledger-console")
    group = DLedgerGroup(tmp_path / "group")
    console = ConsoleProcess(tmp_path, group.namesrv_addr, "--refresh-ms", "1000")
    try:
        group.start()
        console.start()
        yield group, console
    finally:
        console.close()
        group.close()


def test_a_killed_leader_is_replaced_on_the_cluster_page_within_5_s(
    group_and_console: tuple[DLedgerGroup, ConsoleProcess], chromium: Browser, problems: list[str]
) -> None:
    group, console = group_and_console
    page = chromium.page()
    page.goto(console.url + "/cluster")
    section = page.locator(f'section[data-group="{GROUP}"]')
    leader_row = section.locator('tr[data-role="LEADER"]')
    expect(leader_row).to_have_count(1, timeout=15_000)
    expect(section.locator('tr[data-role="FOLLOWER"]')).to_have_count(2, timeout=15_000)
    old_addr = leader_row.get_attribute("data-addr")
    old = next(n for n in group.ids if group.addr(n) == old_addr)
    proc = group.brokers[old].proc
    assert proc is not None
    killed_at = time.monotonic()
    os.kill(proc.pid, signal.SIGKILL)
    new_leader = section.locator(f'tr[data-role="LEADER"]:not([data-addr="{old_addr}"])')
    expect(new_leader).to_have_count(1, timeout=5_000)
    took = time.monotonic() - killed_at
    expect(section.locator(f'tr[data-addr="{old_addr}"][data-role="DOWN"]')).to_have_count(1, timeout=5_000)
    assert took <= 5.0, took
    print(f"new leader {new_leader.get_attribute('data-addr')} shown {took:.2f} s after SIGKILL of {old_addr}")
    chromium.shoot(page, "console-dledger-failover")
    assert problems == []
