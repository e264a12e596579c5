"""The broker's gate: where the file is, start-up refusals, reloads that keep the last good file."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from ledgermq.acl.signing import Credentials, sign_fields
from ledgermq.broker.acl_gate import AclGate, acl_file_path
from ledgermq.broker.config import BrokerConfig
from ledgermq.errors import ConfigError, StartupError
from ledgermq.net.connection import Connection
from ledgermq.protocol.codes import RequestCode, ResponseCode
from ledgermq.protocol.command import RemotingCommand

GOOD = "accounts:\n  - {accessKey: writerAK1, secretKey: writerSK1, topicPerms: [orders=PUB]}\n"
OTHER = "accounts:\n  - {accessKey: writerAK1, secretKey: writerSK1, topicPerms: [orders=DENY]}\n"


def test_file_location() -> None:
    assert acl_file_path(BrokerConfig(acl_file="/etc/acl.yml"), {}) == Path("/etc/acl.yml")
    assert acl_file_path(BrokerConfig(rocketmq_home="/opt/rmq"), {}) == Path("/opt/rmq/conf/plain_acl.yml")
    assert acl_file_path(BrokerConfig(), {"ROCKETMQ_HOME": "/h"}) == Path("/h/conf/plain_acl.yml")
    assert acl_file_path(BrokerConfig(acl_file="x.yml", rocketmq_home="/opt/rmq"), {}) == Path("/opt/rmq/x.yml")
    with pytest.raises(ConfigError, match="aclFile"):
        acl_file_path(BrokerConfig(), {})


def test_credentials_keys_go_together() -> None:
    with pytest.raises(ConfigError, match="aclSecretKey"):
        BrokerConfig(acl_access_key="brokerAK1")


class FakeConn:
    peer = "127.0.0.1:50000"


def send(gate: AclGate, topic: str) -> RemotingCommand | None:
    cmd = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, {"a": "P", "b": topic}, b"body")
    sign_fields(cmd.ext_fields, cmd.body, Credentials("writerAK1", "writerSK1"))
    conn: Connection = FakeConn()  # type: ignore[assignment]
    return gate.check(conn, cmd)


def rewrite(path: Path, text: str) -> None:
    """A new version: another size or at least another mtime, as an editor's save gives."""
    st = path.stat()
    path.write_text(text)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))


def test_start_refuses_missing_or_broken_file(tmp_path: Path) -> None:
    with pytest.raises(StartupError, match="does not exist"):
        asyncio.run(AclGate(tmp_path / "none.yml").start())
    bad = tmp_path / "bad.yml"
    bad.write_text("accounts:\n  - {accessKey: short, secretKey: x}\n")
    with pytest.raises(StartupError, match="longer than 6"):
        asyncio.run(AclGate(bad).start())


def test_reload_applies_changes_and_keeps_last_good(tmp_path: Path) -> None:
    path = tmp_path / "plain_acl.yml"
    path.write_text(GOOD)

    async def main() -> None:
        gate = AclGate(path, poll_interval=3600)  # polled by hand below
        await gate.start()
        try:
            assert send(gate, "orders") is None
            refusal = send(gate, "other")
            assert refusal is not None and refusal.code == ResponseCode.NO_PERMISSION
            assert refusal.remark == "No PUB permission for topic:other (accessKey=writerAK1)"
            assert not await gate.poll_once()  # unchanged

            rewrite(path, OTHER)
            assert await gate.poll_once()
            assert send(gate, "orders") is not None  # the new file took effect

            rewrite(path, "accounts: [\n")  # broken: the previous configuration stays
            assert not await gate.poll_once()
            assert send(gate, "orders") is not None
            assert not await gate.poll_once()  # the same broken version is not retried

            path.unlink()  # gone: still the last good one
            assert not await gate.poll_once()
            assert send(gate, "orders") is not None

            path.write_text(GOOD)  # back
            assert await gate.poll_once()
            assert send(gate, "orders") is None
            assert gate.reloads == 2
        finally:
            await gate.stop()

    asyncio.run(main())


def test_watch_task_reloads_by_itself(tmp_path: Path) -> None:
    path = tmp_path / "plain_acl.yml"
    path.write_text(GOOD)

    async def main() -> None:
        gate = AclGate(path, poll_interval=0.02)
        await gate.start()
        try:
            rewrite(path, OTHER)
            async with asyncio.timeout(5):
                while gate.reloads == 0:
                    await asyncio.sleep(0.01)
            assert send(gate, "orders") is not None
        finally:
            await gate.stop()

    asyncio.run(main())


def test_a_check_that_fails_refuses(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "plain_acl.yml"
    path.write_text(GOOD)

    def broken(*_args: object) -> None:
        raise RuntimeError("boom")

    async def main() -> None:
        gate = AclGate(path, poll_interval=3600)
        await gate.start()
        try:
            monkeypatch.setattr("ledgermq.broker.acl_gate.decide", broken)
            refusal = send(gate, "orders")
            assert refusal is not None and refusal.code == ResponseCode.NO_PERMISSION
            assert refusal.remark == "ACL check failed: RuntimeError: boom"
        finally:
            await gate.stop()

    asyncio.run(main())
