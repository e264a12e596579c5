"""The console's rules without a cluster: users file, settings, CSRF, Origin and Host checks,
read-only refusal before any handler runs, body previews, shared answers and trend rates."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from ledgermq.console.app import build_app
from ledgermq.console.body_preview import preview
from ledgermq.console.cache import SharedAnswers
from ledgermq.console.settings import ConsoleSettings, ConsoleSettingsError
from ledgermq.console.trends import _rate
from ledgermq.console.users import check_password, parse_users

NS = "127.0.0.1:1"  # nothing listens: these tests never reach a cluster


def test_users_file_roles_and_mistakes() -> None:
    users = parse_users("# comment\nadmin=pw1,1\nviewer = pw2\n")
    assert users["admin"].admin and not users["viewer"].admin
    assert check_password(users, "viewer", "pw2") is users["viewer"]
    assert check_password(users, "viewer", "pw1") is None and check_password(users, "nobody", "pw2") is None
    assert "pw1" not in repr(users["admin"])
    for bad, why in [("admin", "line 1"), ("a=,1", "empty password"), ("a=b,2", "role"), ("# only", "no user"),
                     ("a=b\na=c", "twice")]:  # fmt: skip
        with pytest.raises(ConsoleSettingsError, match=why):
            parse_users(bad)


def test_settings_refuse_an_open_console_on_a_public_address(tmp_path: Path) -> None:
    with pytest.raises(ConsoleSettingsError, match="--users-file"):
        ConsoleSettings(NS, host="0.0.0.0")
    ConsoleSettings(NS, host="0.0.0.0", users_file=tmp_path / "users")
    ConsoleSettings(NS, host="0.0.0.0", open_without_login=True)
    ConsoleSettings(NS, host="::1")
    with pytest.raises(ConsoleSettingsError, match="refresh_ms"):
        ConsoleSettings(NS, refresh_ms=0)


def _with_client(settings: ConsoleSettings, body: Callable[[TestClient[Any, Any]], Awaitable[None]]) -> None:
    async def run() -> None:
        client = TestClient(TestServer(build_app(settings, sample_trends=False), host="127.0.0.1"))
        await client.start_server()
        try:
            await body(client)
        finally:
            await client.close()

    asyncio.run(run())


def _csrf(html: str) -> str:
    marker = '<meta name="csrf-token" content="'
    start = html.index(marker) + len(marker)
    return html[start : html.index('"', start)]


def test_posts_need_the_session_csrf_token_and_a_same_origin() -> None:
    async def body(client: TestClient[Any, Any]) -> None:
        page = await client.get("/producers")  # no cluster answers (502), but the page sets the session
        assert page.status == 502
        assert page.headers["Content-Security-Policy"].startswith("default-src 'self'")
        token = _csrf(await page.text())
        no_token = await client.post("/topics", data={"topic": "T", "cluster": "C"})
        assert no_token.status == 403 and "CSRF" in await no_token.text()
        wrong = await client.post("/topics", data={"_csrf": token + "x", "topic": "T", "cluster": "C"})
        assert wrong.status == 403
        cross = await client.post(
            "/topics", data={"_csrf": token, "topic": "T", "cluster": "C"}, headers={"Origin": "http://evil.example"}
        )
        assert cross.status == 403 and "evil.example" in await cross.text()
        rebound = await client.get("/producers", headers={"Host": "attacker.example:8080"})
        assert rebound.status == 403  # DNS rebinding: a loopback console answers loopback names only
        ok = await client.post("/logout", data={"_csrf": token})  # a token that matches passes
        assert (ok.status == 200 and str(ok.url).endswith("/cluster")) or ok.history

    _with_client(ConsoleSettings(NS, request_timeout_s=0.5), body)


def test_a_read_only_user_is_refused_before_any_handler(tmp_path: Path) -> None:
    users = tmp_path / "users.properties"
    users.write_text("boss=b,1\nviewer=v\n")

    async def body(client: TestClient[Any, Any]) -> None:
        first = await client.get("/topics", allow_redirects=False)
        assert first.status == 303 and first.headers["Location"].startswith("/login?next=")
        login = await client.get("/login")
        token = _csrf(await login.text())
        bad = await client.post("/login", data={"_csrf": token, "username": "viewer", "password": "x"})
        assert bad.status == 401 and "wrong user name or password" in await bad.text()
        token = _csrf(await bad.text())
        good = await client.post(
            "/login", data={"_csrf": token, "username": "viewer", "password": "v", "next": "//evil.example/"}
        )
        assert str(good.url).endswith("/cluster") or good.status in (200, 502)  # no open redirect
        page = await client.get("/producers")
        token = _csrf(await page.text())
        refused = await client.post("/topics", data={"_csrf": token, "topic": "T", "cluster": "C"})
        assert refused.status == 403 and "viewer is read-only" in await refused.text()

    _with_client(ConsoleSettings(NS, users_file=users, request_timeout_s=0.5), body)


def test_a_cluster_that_cannot_be_reached_is_a_sentence_not_a_traceback() -> None:
    async def body(client: TestClient[Any, Any]) -> None:
        page = await client.get("/topics")
        text = await page.text()
        assert page.status == 502 and "Traceback" not in text and "127.0.0.1:1" in text

    _with_client(ConsoleSettings(NS, request_timeout_s=0.5), body)


def test_body_preview_text_hex_and_json() -> None:
    p = preview(b'{"a": [1, 2]}')
    assert p.text == '{"a": [1, 2]}' and p.json is not None and '"a": [' in p.json and not p.binary
    assert p.hex.startswith("00000000  7b 22 61 22")
    raw = preview(bytes(range(256)) * 300, limit=1024)
    assert raw.binary and raw.json is None and raw.truncated and raw.shown == 1024 and raw.size == 76800


def test_shared_answers_ask_once_and_never_keep_a_failure() -> None:
    async def run() -> None:
        now = [0.0]
        answers = SharedAnswers(1.0, clock=lambda: now[0])
        calls = 0

        async def make() -> int:
            nonlocal calls
            calls += 1
            await asyncio.sleep(0.01)
            return calls

        assert await asyncio.gather(*(answers.get("k", make) for _ in range(5))) == [1] * 5
        assert await answers.get("k", make) == 1
        now[0] = 2.0
        assert await answers.get("k", make) == 2

        async def fail() -> int:
            raise RuntimeError("down")

        with pytest.raises(RuntimeError):
            await answers.get("f", fail)
        assert await answers.get("f", make) == 3

    asyncio.run(run())


def test_trend_rates_are_differences_and_never_negative() -> None:
    assert _rate(100, 150, 10.0, 15.0) == 10.0
    assert _rate(None, 150, 10.0, 15.0) is None  # first sample: no rate yet
    assert _rate(150, 100, 10.0, 15.0) is None  # a restart or reset: a new baseline, not a negative rate
    assert _rate(100, None, 10.0, 15.0) is None  # not asked this round: a gap
