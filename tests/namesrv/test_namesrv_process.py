"""``ledgermq namesrv`` as a real process: start, serve a broker and a route lookup, stop on SIGTERM.

The process runs on uvloop (cli.runtime), unlike the in-process tests; every process started
here is killed in ``finally`` and every wait has a deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from ledgermq.net.client import RemotingClient
from ledgermq.net.server import RemotingServer, RequestContext
from ledgermq.protocol.codes import RequestCode
from ledgermq.protocol.command import RemotingCommand
from ledgermq.protocol.route import DataVersion, RegisterBrokerBody, TopicConfig, TopicRouteData
from ledgermq.testing.ports import free_port

HOST = "127.0.0.1"
REPO = Path(__file__).resolve().parents[2]


def wait_for_port(proc: subprocess.Popen[bytes], port: int, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"namesrv exited early with {proc.returncode}: {read_stderr(proc)}")
        with contextlib.suppress(OSError), socket.create_connection((HOST, port), timeout=0.2):
            return
        time.sleep(0.05)
    raise AssertionError(f"namesrv did not accept connections on {port} within {timeout}s")


def read_stderr(proc: subprocess.Popen[bytes]) -> str:
    if proc.stderr is None:
        return ""
    try:
        return proc.stderr.read().decode(errors="replace")
    except Exception:  # pragma: no cover - diagnostics only
        return ""


@contextlib.contextmanager
def namesrv_process(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], int, Path]]:
    port = free_port()
    kv = tmp_path / "kv" / "kvConfig.json"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    cmd = [sys.executable, "-m", "ledgermq.cli.main", "namesrv", "-p", str(port), "--host", HOST,
           "--kv-config", str(kv)]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=REPO, env=env)
    try:
        wait_for_port(proc, port)
        yield proc, port, kv
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)
        if proc.stderr is not None:
            proc.stderr.close()


def register_request(addr: str, tcs: dict[str, TopicConfig] | None = None) -> RemotingCommand:
    if tcs is None:
        tcs = {"T": TopicConfig("T", 4, 4, 6), "TBW102": TopicConfig("TBW102", 8, 8, 7)}
    body = RegisterBrokerBody(DataVersion(1_700_000_000_000, 1), tcs).encode()
    return RemotingCommand.request(
        RequestCode.REGISTER_BROKER,
        {
            "brokerName": "broker-a",
            "brokerAddr": addr,
            "clusterName": "DefaultCluster",
            "haServerAddr": "10.0.0.1:10912",
            "brokerId": 0,
            "bodyCrc32": zlib.crc32(body) & 0x7FFFFFFF,
        },
        body,
    )


def stop_with_sigterm(proc: subprocess.Popen[bytes], timeout: float = 10.0) -> tuple[int, str]:
    proc.send_signal(signal.SIGTERM)
    try:
        code = proc.wait(timeout)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"namesrv did not stop within {timeout}s of SIGTERM") from None
    return code, read_stderr(proc)


def test_namesrv_process_serves_routes_and_stops_on_sigterm(tmp_path: Path) -> None:
    with namesrv_process(tmp_path) as (proc, port, kv):
        addr = f"{HOST}:{port}"

        async def talk() -> None:
            broker, producer = RemotingClient(), RemotingClient()
            try:
                missing = await producer.invoke(
                    addr, RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T"}), 5
                )
                assert missing.code == 17
                registered = await broker.invoke(addr, register_request("10.0.0.1:10911"), 5)
                assert registered.code == 0, registered.remark
                answer = await producer.invoke(
                    addr, RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T"}), 5
                )
                assert answer.code == 0, answer.remark
                route = TopicRouteData.decode(answer.body)
                assert [(b.broker_name, b.broker_addrs) for b in route.broker_datas] == [
                    ("broker-a", {0: "10.0.0.1:10911"})
                ]
                assert [(q.read_queue_nums, q.write_queue_nums, q.perm) for q in route.queue_datas] == [(4, 4, 6)]
                put = await producer.invoke(
                    addr,
                    RemotingCommand.request(RequestCode.PUT_KV_CONFIG, {"namespace": "ns", "key": "k", "value": "v"}),
                    5,
                )
                assert put.code == 0
            finally:
                await broker.close()
                await producer.close()

        asyncio.run(asyncio.wait_for(talk(), 20))
        code, stderr = stop_with_sigterm(proc)
        assert code == 0, stderr
        assert f"listening on {HOST}:{port}" in stderr
        assert "Traceback" not in stderr
        assert json.loads(kv.read_text()) == {"configTable": {"ns": {"k": "v"}}}


def test_namesrv_process_stops_on_sigterm_with_clients_connected(tmp_path: Path) -> None:
    with namesrv_process(tmp_path) as (proc, port, _kv):
        idle = [socket.create_connection((HOST, port), timeout=2) for _ in range(5)]
        try:
            partial = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T"}).encode()
            idle[0].sendall(partial[:7])  # a half-sent frame must not hold up shutdown
            code, stderr = stop_with_sigterm(proc)
            assert code == 0, stderr
        finally:
            for s in idle:
                s.close()


def test_namesrv_script_entry_point_is_installed() -> None:
    script = Path(sys.executable).with_name("ledgermq")
    if not script.exists():
        pytest.skip(f"no console script next to {sys.executable}")
    out = subprocess.run([str(script), "namesrv", "--help"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert "--kv-config" in out.stdout and "--port" in out.stdout


CPP_PRODUCER = textwrap.dedent(
    """
    import sys
    from rocketmq.client import Message, Producer

    producer = Producer("PID-ledgermq-test")
    producer.set_namesrv_addr(sys.argv[1])
    producer.start()
    try:
        for topic in sys.argv[2:]:
            msg = Message(topic)
            msg.set_body("hello")
            try:
                producer.send_sync(msg)
            except Exception as exc:  # the wheel raises its own ProducerSendSyncFailed
                print(topic, "ERROR:", type(exc).__name__, exc, flush=True)
            else:
                print(topic, "SENT", flush=True)
    finally:
        producer.shutdown()
    """
)


@pytest.mark.skipif(
    importlib.util.find_spec("rocketmq") is None,
    reason="the `rocketmq` PyPI wheel (Apache RocketMQ C++ client) is not installed in this environment",
)
def test_cpp_producer_gets_no_route_info_for_an_unregistered_topic(tmp_path: Path) -> None:
    """The C++ client says "No route info of this topic" both when the name server has no route
    and when every send attempt failed, and also when it cannot reach the name server at all.
    So the same producer also sends to a registered topic, served by a stub broker: that send
    succeeding proves the name server answered it, and the unregistered one failing with no
    send reaching the broker proves the failure came from the missing route."""
    sends: list[RemotingCommand] = []

    async def store(ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
        sends.append(cmd)
        return cmd.response(
            0, ext_fields={"msgId": "7F00000100002A9F0000000000000000", "queueId": "0", "queueOffset": "0"}
        )

    async def ok(ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response(0)

    async def main(port: int) -> tuple[str, str]:
        broker = RemotingServer(HOST, 0, name="stub-broker")
        # The wheel bundles C++ client 1.0.1, which sends SEND_MESSAGE (10); 2.x sends 310.
        for code in (RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2):
            broker.register(code, store)
        for code in (RequestCode.HEART_BEAT, RequestCode.UNREGISTER_CLIENT):
            broker.register(code, ok)
        await broker.start()
        registrar = RemotingClient()
        try:
            tcs = {"RegisteredTopic": TopicConfig("RegisteredTopic", 4, 4, 6)}
            request = register_request(f"{HOST}:{broker.port}", tcs)
            assert (await registrar.invoke(f"{HOST}:{port}", request, 5)).code == 0
            # The C++ client runs in its own process so a native crash cannot take pytest with it.
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-c", CPP_PRODUCER, f"{HOST}:{port}", "NoSuchTopicForLedgermq", "RegisteredTopic",
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            )  # fmt: skip
            try:
                out, err = await asyncio.wait_for(proc.communicate(), 60)
            finally:
                if proc.returncode is None:
                    proc.kill()
                    await proc.wait()
            return out.decode(), err.decode()
        finally:
            await registrar.close()
            await broker.stop()

    with namesrv_process(tmp_path) as (proc, port, _kv):
        out, err = asyncio.run(main(port))
        lines = dict(line.split(" ", 1) for line in out.splitlines() if " " in line)
        assert lines.get("RegisteredTopic") == "SENT", (out, err)
        assert "No route info" in lines.get("NoSuchTopicForLedgermq", ""), (out, err)
        topics = {cmd.ext_fields.get("topic") or cmd.ext_fields.get("b") for cmd in sends}
        assert topics == {"RegisteredTopic"}, sends
        assert proc.poll() is None, "the name server died while serving the C++ client"
        code, stderr = stop_with_sigterm(proc)
        assert code == 0, stderr
