"""The 2m-2s layouts (conf/2m-2s-async, conf/2m-2s-sync) as real processes, and C++ client children against them.

``LayoutGroup`` is an ``HAGroup`` (one name server) with two broker groups, broker-a and broker-b, each a master
(brokerId 0, ASYNC_MASTER or SYNC_MASTER) and a slave (brokerId 1). ``Clients`` runs ``tests/compat/cpp_client.py``
children against its name server (the ``Cluster`` client machinery, pointed at this group). ``StreamProducer`` is a
long-running C++ producer child (this module run with ``-m``): it sends one message after another, catching each
failure, until a line arrives on stdin; every send is printed as ``SEND <json>`` and the whole as ``RESULT <json>``.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

from ledgermq.admin.client import AdminClient
from tests.compat.cluster import ClientChild, Cluster, route, wait_until
from tests.ha.process_group import BrokerProc, HAGroup

REPO = Path(__file__).resolve().parents[2]
GROUPS = ("broker-a", "broker-b")


class LayoutGroup(HAGroup):
    """``LayoutGroup(root, "sync")``: masters ``a-m``, ``b-m`` and slaves ``a-s``, ``b-s`` (not started)."""

    def __init__(self, root: Path, layout: str, **common: object) -> None:
        super().__init__(root, **common)
        role = {"async": "ASYNC_MASTER", "sync": "SYNC_MASTER"}[layout]
        for g in GROUPS:
            short = g[-1]
            self.add(f"{short}-m", 0, role, brokerName=g)
            self.add(f"{short}-s", 1, "SLAVE", brokerName=g)

    def start_all(self, timeout: float = 30.0) -> None:
        """The name server, then both masters at once, then both slaves at once (a slave learns its master's HA
        address from its registration answer; one registering before its master waits for the next round, >= 10 s)."""
        self.start_namesrv()
        for role in (0, 1):
            batch = [b for b in self.brokers.values() if b.broker_id == role]
            for b in batch:
                b.server.start()
            for b in batch:
                registered = lambda b=b: b.server.check_alive() and self.registered(b)  # noqa: E731
                wait_until(f"{b.name}'s registration", registered, timeout, 0.1, self.explain)

    def restart(self, b: BrokerProc, timeout: float = 30.0) -> None:
        self.start(b, timeout)

    def wait_replicated(self, master: BrokerProc, slave: BrokerProc, timeout: float) -> int:
        """Until the slave reports at least the master's max offset of now (sends may go on); that offset."""
        target = self.max_offset(master)
        assert target > 0, f"{master.name} does not answer{self.explain()}"
        seen = [-1]

        def check() -> bool:
            slave.server.check_alive()
            seen[0] = self.max_offset(slave)
            return seen[0] >= target

        wait_until(f"{slave.name} to reach {target}", check, timeout, 0.05, lambda: f"at {seen[0]}{self.explain()}")
        return target

    def wait_ha_connected(self, master: BrokerProc, timeout: float) -> None:
        """Until the master lists a connected slave (a SYNC_MASTER answers SLAVE_NOT_AVAILABLE before)."""
        seen: list[Any] = [None]

        def check() -> bool:
            master.server.check_alive()
            try:
                seen[0] = self.admin(lambda a: a.ha_status(master.addr))
            except Exception as exc:
                seen[0] = exc
                return False
            return any(c.connected for c in seen[0].connections)

        wait_until(f"a slave connected to {master.name}", check, timeout, 0.1, lambda: f"{seen[0]}{self.explain()}")

    def wait_topic(self, b: BrokerProc, topic: str, timeout: float) -> None:
        """Until the broker knows the topic (a slave: after its metadata sync); GET_TOPIC_STATS_INFO answers."""
        wait_until(f"{b.name} to know {topic}", lambda: self.queue_ends(b, topic) >= 0, timeout, 0.1, self.explain)

    def master_gone(self, b: BrokerProc) -> bool:
        data = route(self.namesrv_addr, "TBW102")
        return data is not None and all(d.broker_addrs.get(b.broker_id) != b.addr for d in data.broker_datas)

    def route_groups(self, topic: str) -> dict[str, dict[int, str]]:
        """brokerName -> {brokerId: addr} of the topic's route (only groups with queue data); {} when unrouted."""
        data = route(self.namesrv_addr, topic)
        if data is None:
            return {}
        queued = {q.broker_name for q in data.queue_datas}
        return {d.broker_name: dict(d.broker_addrs) for d in data.broker_datas if d.broker_name in queued}

    def admin(self, call: Any) -> Any:
        """Run ``await call(admin)`` with a fresh AdminClient on this name server."""

        async def go() -> Any:
            async with AdminClient(self.namesrv_addr, timeout=5.0, connect_timeout=2.0) as admin:
                return await call(admin)

        return asyncio.run(go())

    def queue_ends(self, b: BrokerProc, topic: str) -> int:
        """Sum of the topic's queue max offsets on one broker (-1 when it does not answer)."""
        try:
            stats = self.admin(lambda a: a.topic_stats(b.addr, topic))
        except Exception:
            return -1
        return sum(o.max_offset for o in stats.values())


class Clients(Cluster):
    """The ``Cluster`` C++ client machinery (``run_client``, ``start_client``) against a ``LayoutGroup``."""

    def __init__(self, group: LayoutGroup) -> None:  # no super().__init__: no name server or broker of its own
        self.group = group
        self.root = group.root / "clients"
        self.root.mkdir(parents=True, exist_ok=True)
        self.namesrv_addr = group.namesrv_addr
        self.cluster_name = "HaProcCluster"
        self.client_home = self.root / "cpp-home"
        self.client_home.mkdir(exist_ok=True)
        self._specs = 0
        self.children: list[ClientChild] = []

    def explain(self) -> str:
        return f"{self.group.explain()}\n--- C++ client errors ---\n{self.client_errors()}"

    def close(self) -> None:
        for child in self.children:
            child.kill()

    def start_stream(self, group: str, topic: str, prefix: str, uid_prop: str, interval: float) -> StreamProducer:
        self._specs += 1
        spec = self.root / f"stream-spec-{self._specs}.json"
        doc = {"namesrv": self.namesrv_addr, "group": group, "topic": topic, "prefix": prefix, "uid_prop": uid_prop,
               "interval": interval}  # fmt: skip
        spec.write_text(json.dumps(doc))
        return StreamProducer(self, spec)


class StreamProducer(ClientChild):
    """The long-running producer child; ``sends()`` so far (parsed SEND lines); ``release`` stops it."""

    def __init__(self, cluster: Clients, spec: Path) -> None:  # ClientChild's, with this module as the child
        import queue

        self.cluster = cluster
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.ha.layout_group", str(spec)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={**cluster._client_env(), "PYTHONPATH": str(REPO)},
            cwd=REPO,
        )
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.stdout: list[str] = []
        self.stderr: list[bytes] = []
        self._readers = [
            threading.Thread(target=self._read_stdout, daemon=True),
            threading.Thread(target=self._read_stderr, daemon=True),
        ]
        for t in self._readers:
            t.start()
        cluster.children.append(self)

    def sends(self) -> list[dict[str, Any]]:
        return [json.loads(line[5:]) for line in list(self.stdout) if line.startswith("SEND ")]

    def retries_logged(self) -> list[str]:
        """The C++ client's "send failed of times:N,brokerName:X" lines (a failed attempt the client then retried)."""
        logs = self.cluster.client_home / "logs" / "rocketmq-cpp"
        found: list[str] = []
        for path in sorted(logs.glob(f"{self.proc.pid}_rocketmq-cpp.log*")):
            found += [ln for ln in path.read_text(errors="replace").splitlines() if "send failed of times" in ln]
        return found

    def wait_sends(self, what: str, pred: Any, timeout: float) -> list[dict[str, Any]]:
        def check() -> list[dict[str, Any]] | None:
            if self.proc.poll() is not None:
                raise AssertionError(f"stream producer exited {self.proc.returncode}: {self.stdout[-5:]}")
            s = self.sends()
            return s if pred(s) else None

        found: list[dict[str, Any]] = wait_until(what, check, timeout, 0.05, lambda: tail_sends(self.sends()))
        return found


def tail_sends(sends: list[dict[str, Any]]) -> str:
    return f"{len(sends)} sends, last {sends[-3:]}"


# -- the child ------------------------------------------------------------------------------------
def _stream(spec: dict[str, Any]) -> list[dict[str, Any]]:
    from rocketmq.client import Message, Producer  # only in the child: loads librocketmq.so

    stop = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.readline(), stop.set()), daemon=True).start()
    producer = Producer(spec["group"])
    producer.set_namesrv_addr(spec["namesrv"])
    producer.start()
    out: list[dict[str, Any]] = []
    try:
        i = 0
        while not stop.is_set():
            uid = f"{spec['prefix']}-{i:05d}"
            msg = Message(spec["topic"])
            msg.set_body(f"stream body {i}")
            msg.set_property(spec["uid_prop"], uid)
            started = time.monotonic()
            entry: dict[str, Any] = {"uid": uid, "t": time.time()}
            try:
                entry["status"] = producer.send_sync(msg).status.name
            except Exception as exc:  # a failed send (after the client's own retries) is counted, not fatal
                entry["status"] = None
                entry["error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
            entry["took"] = round(time.monotonic() - started, 3)
            out.append(entry)
            print("SEND " + json.dumps(entry), flush=True)
            i += 1
            stop.wait(spec["interval"])
    finally:
        producer.shutdown()
    return out


def main() -> None:
    with open(sys.argv[1], encoding="utf-8") as f:
        spec = json.load(f)
    try:
        results = _stream(spec)
    except Exception:
        print("RESULT " + json.dumps({"error": traceback.format_exc(), "steps": []}), flush=True)
        os._exit(1)
    print("RESULT " + json.dumps({"steps": [{"op": "stream", "results": results}]}), flush=True)
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()

__all__ = ["Clients", "LayoutGroup", "StreamProducer"]
