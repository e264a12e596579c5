"""Registration cost at scale: body bytes and name-server time per registration, and topic
creation through the admin client against real processes on loopback.

Run: ``python -m ledgermq.bench.registration_bench [--topics 5000] [--creates 2000] [--inflight 16]``;
``--in-process-no-persist`` runs name server, broker and admin client on one loop with the
broker's topics.json writes stubbed out, to see registration's share of a create alone.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import zlib
from collections.abc import Callable
from pathlib import Path

from ledgermq.admin.client import AdminClient
from ledgermq.clock import SYSTEM_CLOCK
from ledgermq.namesrv.kvconfig import KVConfig
from ledgermq.namesrv.processors import NamesrvState, register_broker
from ledgermq.namesrv.routeinfo import RouteInfo
from ledgermq.net.client import RemotingClient
from ledgermq.protocol.codes import RequestCode, ResponseCode
from ledgermq.protocol.command import RemotingCommand
from ledgermq.protocol.register_body import encode_compressed
from ledgermq.protocol.route import DataVersion, RegisterBrokerBody, TopicConfig
from ledgermq.testing.ports import free_port

HOST = "127.0.0.1"


class _Ctx:
    connection: object = object()
    peer = "bench"


def _request(body: bytes, compressed: bool) -> RemotingCommand:
    return RemotingCommand.request(
        RequestCode.REGISTER_BROKER,
        {
            "brokerAddr": "10.0.0.1:10911",
            "brokerId": 0,
            "brokerName": "broker-a",
            "clusterName": "DefaultCluster",
            "haServerAddr": "10.0.0.1:10912",
            "compressed": compressed,
            "bodyCrc32": zlib.crc32(body) & 0x7FFFFFFF,
        },
        body,
    )


def _encoders() -> dict[str, tuple[Callable[[RegisterBrokerBody], bytes], bool]]:
    """The body forms: plain JSON (what a broker sent before 4.9's compression) and compressed."""
    return {"plain": (RegisterBrokerBody.encode, False), "compressed": (encode_compressed, True)}


def measure_namesrv(topics: int, rounds: int = 5) -> None:
    """Bytes and name-server handling time of a full registration of ``topics`` topics,
    and of a one-topic increment; every round carries a new data version so it is applied."""
    table = {f"BenchTopic-{i:06d}": TopicConfig(f"BenchTopic-{i:06d}", 8, 8) for i in range(topics)}
    state = NamesrvState(RouteInfo(), KVConfig(None), SYSTEM_CLOCK)
    cases = [(f"full {name}", table, enc) for name, enc in _encoders().items()]
    cases.append(("increment (1 topic)", {"BenchTopic-000000": table["BenchTopic-000000"]}, _encoders()["plain"]))
    for label, tcs, (encode, compressed) in cases:
        times: list[float] = []
        enc_times: list[float] = []
        size = 0
        for r in range(rounds):
            t0 = time.perf_counter()
            body = encode(RegisterBrokerBody(DataVersion(int(time.time() * 1000), r + 1000 * len(times)), tcs))
            enc_times.append(time.perf_counter() - t0)
            size = len(body)
            cmd = _request(body, compressed)
            t0 = time.perf_counter()
            resp = asyncio.run(register_broker(state, _Ctx(), cmd))
            times.append(time.perf_counter() - t0)
            assert resp.code == ResponseCode.SUCCESS, resp.remark
        times.sort()
        enc_times.sort()
        print(
            f"{topics} topics, {label}: body {size:,} bytes; name server {times[len(times) // 2] * 1000:.2f} ms "
            f"(median of {rounds}); broker encode {enc_times[len(enc_times) // 2] * 1000:.2f} ms"
        )


def _spawn(root: Path, args: list[str], log_name: str) -> subprocess.Popen[bytes]:
    with open(root / log_name, "ab") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "ledgermq.cli.main", *args],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def _wait_port(port: int, deadline: float) -> None:
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((HOST, port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"nothing listens on {port}")


async def _creates(ns: str, broker: str, count: int, inflight: int) -> tuple[float, list[float]]:
    async with AdminClient(ns) as admin:
        names = iter(range(count))
        marks: list[float] = []
        start = time.perf_counter()

        async def worker() -> None:
            for i in names:
                await admin.create_topic(broker, f"Created-{i:06d}")
                marks.append(time.perf_counter() - start)

        await asyncio.gather(*(worker() for _ in range(inflight)))
        elapsed = time.perf_counter() - start
        # Routes must be there by the time the creates are answered.
        client = RemotingClient()
        try:
            missing = 0
            for i in (0, count // 2, count - 1):
                cmd = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": f"Created-{i:06d}"})
                if (await client.invoke(ns, cmd, 5.0)).code != ResponseCode.SUCCESS:
                    missing += 1
            print(f"  routes missing among 3 sampled: {missing}")
        finally:
            await client.close()
        return elapsed, sorted(marks)


def measure_creates(count: int, inflight: int) -> None:
    root = Path(tempfile.mkdtemp(prefix="regbench-"))
    ns_port, broker_port = free_port(), free_port(span=2)
    procs = [
        _spawn(root, ["namesrv", "-p", str(ns_port), "--host", HOST, "--kv-config", str(root / "kv.json")], "ns.log")
    ]
    try:
        deadline = time.monotonic() + 30
        _wait_port(ns_port, deadline)
        conf = root / "broker.properties"
        conf.write_text(
            "\n".join(
                [
                    "brokerClusterName=DefaultCluster",
                    "brokerName=broker-a",
                    "brokerId=0",
                    "brokerIP1=127.0.0.1",
                    "listenHost=127.0.0.1",
                    f"listenPort={broker_port}",
                    f"namesrvAddr={HOST}:{ns_port}",
                    f"storePathRootDir={root / 'store'}",
                    "mappedFileSizeCommitLog=1048576",
                    "",
                ]
            )
        )
        procs.append(_spawn(root, ["broker", "-c", str(conf)], "broker.log"))
        _wait_port(broker_port, deadline)
        elapsed, marks = asyncio.run(_creates(f"{HOST}:{ns_port}", f"{HOST}:{broker_port}", count, inflight))
        q = len(marks) // 4
        rates = [q / (marks[(k + 1) * q - 1] - (marks[k * q - 1] if k else 0.0)) for k in range(4)]
        print(
            f"created {count} topics, {inflight} in flight: {elapsed:.2f} s ({count / elapsed:.0f}/s); "
            f"per quarter: {', '.join(f'{r:.0f}/s' for r in rates)}"
        )
    finally:
        for proc in reversed(procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(15)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait(5)


async def _in_process_creates(count: int, inflight: int, root: Path) -> tuple[float, list[float]]:
    from ledgermq.broker.app import BrokerApp
    from ledgermq.broker.config import BrokerConfig
    from ledgermq.config import StoreConfig
    from ledgermq.namesrv.app import NamesrvApp, NamesrvConfig

    ns = NamesrvApp(NamesrvConfig(listen_host=HOST, listen_port=0, kv_config_path=str(root / "kv.json")))
    await ns.start()
    cfg = BrokerConfig(
        broker_name="broker-a", broker_ip1=HOST, listen_host=HOST, listen_port=free_port(span=2),
        namesrv_addr=f"{HOST}:{ns.port}",
    )  # fmt: skip
    broker = BrokerApp(cfg, StoreConfig(root_dir=str(root / "store"), mapped_file_size_commitlog=1024 * 1024))
    await broker.start()
    try:
        return await _creates(f"{HOST}:{ns.port}", cfg.broker_addr, count, inflight)
    finally:
        await broker.stop()
        await ns.stop()


def measure_in_process(count: int, inflight: int, persist: bool) -> None:
    """Name server, broker and admin client on one event loop; with ``persist=False`` the
    broker does not rewrite topics.json on each create, which isolates registration."""
    from ledgermq.broker.topics import TopicConfigManager

    if not persist:
        TopicConfigManager.persist = lambda self: None  # type: ignore[method-assign]
    root = Path(tempfile.mkdtemp(prefix="regbench-inproc-"))
    elapsed, marks = asyncio.run(_in_process_creates(count, inflight, root))
    q = len(marks) // 4
    rates = [q / (marks[(k + 1) * q - 1] - (marks[k * q - 1] if k else 0.0)) for k in range(4)]
    print(
        f"in-process{'' if persist else ', topics.json not written'}: created {count} topics, {inflight} in flight: "
        f"{elapsed:.2f} s ({count / elapsed:.0f}/s); per quarter: {', '.join(f'{r:.0f}/s' for r in rates)}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--topics", type=int, default=5000)
    parser.add_argument("--creates", type=int, default=2000)
    parser.add_argument("--inflight", type=int, default=16)
    parser.add_argument("--skip-processes", action="store_true")
    parser.add_argument("--in-process-no-persist", action="store_true")
    args = parser.parse_args()
    if args.in_process_no_persist:
        measure_in_process(args.creates, args.inflight, persist=False)
        return
    measure_namesrv(args.topics)
    if not args.skip_processes:
        measure_creates(args.creates, args.inflight)


if __name__ == "__main__":
    main()
