"""The console against a TLS cluster, real processes: a name server and a broker in enforcing
mode with mutual TLS (plain connections refused). A console given ``--tls`` and the client
certificate (as ``ledgermq admin`` takes them) shows the broker and sends a test message
from the page; one without says in the page that it cannot reach the name server, with no
traceback."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from playwright.sync_api import expect

from tests.console.harness import Browser, ConsoleProcess
from tests.tls.tls_group import CLUSTER, GROUP, Member, TlsCluster, client_options

ENFORCING = "tls.server.mode=enforcing\ntls.enable=true\ntls.config.file=TLS_FILE\n"


@pytest.fixture(scope="module")
def tls_consoles(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[TlsCluster, Member, ConsoleProcess, ConsoleProcess]]:
    """Requested before ``chromium``: the cluster's start-up polls use asyncio.run, which
    Playwright's sync API (a running loop) would refuse."""
    root = tmp_path_factory.mktemp("tls-console")
    c = TlsCluster(root / "cluster", ENFORCING)
    pki = c.pki
    certs = ("--tls-trust-cert", str(pki.ca.cert_path), "--tls-cert", str(pki.client.cert_path))
    consoles: list[ConsoleProcess] = []
    try:
        broker = c.broker("master", 0, "ASYNC_MASTER", autoCreateTopicEnable="true")
        c.start(c.namesrv)
        c.start(broker)
        c.wait_registered([broker], client_options(pki))
        # their ports are picked once the cluster's are bound
        key = ("--tls-key", str(pki.client.key_path))
        secured = ConsoleProcess(root, c.namesrv.addr, "--tls", *certs, *key, name="tls-console")
        plain = ConsoleProcess(root, c.namesrv.addr, name="plain-console")
        for console in (secured, plain):
            consoles.append(console)
            console.start()
        yield c, broker, secured, plain
    finally:
        for console in consoles:
            console.close()
        c.close()


def test_a_console_with_tls_options_reaches_an_enforcing_cluster(
    tls_consoles: tuple[TlsCluster, Member, ConsoleProcess, ConsoleProcess], chromium: Browser, problems: list[str]
) -> None:
    _cluster, broker, secured, plain = tls_consoles
    page = chromium.page()
    page.goto(secured.url + "/cluster")
    row = page.locator(f'section[data-group="{GROUP}"] tr[data-addr="{broker.addr}"]')
    expect(row).to_have_attribute("data-role", "MASTER")
    chromium.shoot(page, "console-tls")
    # a topic made and a test message sent, through the page, over TLS
    page.goto(secured.url + "/topics")
    form = page.locator("#create-topic")
    form.locator('input[name="topic"]').fill("TlsConsoleTopic")
    form.locator('select[name="cluster"]').select_option(CLUSTER)
    form.locator('button[type="submit"]').click()
    assert "TlsConsoleTopic created" in page.locator(".flash.ok").inner_text()
    page.goto(secured.url + "/topics/TlsConsoleTopic")
    send = page.locator("#send-message")
    send.locator('textarea[name="body"]').fill("over TLS")
    send.locator('button[type="submit"]').click()
    assert "SEND_OK" in page.locator("#sent").inner_text()
    assert problems == []

    # without the options, the enforcing name server refuses the console: the page says so
    response = page.goto(plain.url + "/cluster")
    assert response is not None and response.status == 502
    text = page.locator("main").inner_text()
    assert "The cluster did not do it" in text and _cluster.namesrv.addr in text, text
    assert "Traceback" not in page.content()
