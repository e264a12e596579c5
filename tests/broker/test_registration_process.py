"""Registration between real processes: ``ledgermq namesrv`` and ``ledgermq broker`` on
loopback, topics created through the admin client with many creates in flight.

UPDATE_AND_CREATE_TOPIC is answered only after its increment reached the name server, so
each route must be there as soon as its create returns; after a name-server restart the
broker's next registration over the new connection carries the whole table again.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import time
from pathlib import Path

from ledgermq.admin.client import AdminClient
from tests.admin.servers import HOST, ProcessCluster, ns_route

IN_FLIGHT = 16
TOPICS = 64


async def create_all(cluster: ProcessCluster, names: list[str]) -> list[str]:
    """Create ``names`` with IN_FLIGHT creates at once; return those without a route right
    after their create was answered."""
    unrouted: list[str] = []
    queue = iter(names)
    async with AdminClient(cluster.ns_addr) as admin:

        async def worker() -> None:
            for name in queue:
                await admin.create_topic(cluster.broker_addr, name, read_queue_nums=2, write_queue_nums=2)
                if await ns_route(cluster.ns_addr, name) is None:
                    unrouted.append(name)

        await asyncio.gather(*(worker() for _ in range(IN_FLIGHT)))
    return unrouted


def restart_namesrv(cluster: ProcessCluster) -> None:
    """Stop the name server by pid and start it again on the same port (empty tables)."""
    proc = cluster.procs[0]
    proc.send_signal(signal.SIGTERM)
    proc.wait(15)
    with open(cluster.root / "namesrv.log", "ab") as log:
        cluster.procs[0] = subprocess.Popen(
            list(proc.args),  # the same command line: the same port
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    cluster._wait_port(cluster.ns_port, cluster.procs[0], time.monotonic() + 30)


def test_created_topics_are_routed_when_answered_and_survive_a_namesrv_restart(tmp_path: Path) -> None:
    cluster = ProcessCluster(tmp_path / "cluster")
    try:
        cluster.start()
        names = [f"Scale-{i:03d}" for i in range(TOPICS)]
        assert asyncio.run(create_all(cluster, names)) == []

        restart_namesrv(cluster)
        assert asyncio.run(ns_route(cluster.ns_addr, names[0])) is None  # a new name server knows nothing
        # The next change goes over a new connection, so it carries the whole table.
        assert asyncio.run(create_all(cluster, ["AfterRestart"])) == []
        missing = [n for n in names if asyncio.run(ns_route(cluster.ns_addr, n)) is None]
        assert missing == []
        route = asyncio.run(ns_route(cluster.ns_addr, names[-1]))
        assert route is not None and route.broker_datas[0].broker_addrs == {0: f"{HOST}:{cluster.broker_port}"}
    finally:
        cluster.stop()
