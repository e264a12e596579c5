"""``ledgermq cluster up``: a local cluster under one supervisor, data under ./data.

Starts a name server and a broker group as child processes (each with its own log under
<data>/logs), prints where everything listens and how to send and receive a message, and
stops everything cleanly on Ctrl-C / SIGTERM (or if a child dies). The group is either

* ``--mode master-slave`` (the default): a master and a slave replicating from it; or
* ``--mode dledger``: three brokers n0, n1, n2 of one DLedger (Raft) group ``broker-a``;
  they elect a leader, which registers as the group's master. Broker n<k> listens on
  ``--broker-port`` + 10 k (or the k-th of ``--dledger-ports``) and talks Raft on that
  port + 1 (the HA port, unused in DLedger mode). The banner names the leader once the
  name server lists it as master.
"""

from __future__ import annotations

import asyncio
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import click

from ledgermq.admin.client import AdminClient
from ledgermq.errors import LedgerError
from ledgermq.util.proc import die_with_parent

DLEDGER_IDS = ("n0", "n1", "n2")
GROUP = "broker-a"

SNIPPET = """\
Send and receive with our client (.venv/bin/python):

  from ledgermq.client import ConsumeFromWhere, Message
  from ledgermq.client.sync import SyncLitePullConsumer, SyncProducer
  with SyncProducer("demo-producer", "{ns}") as p: print(p.send(Message("DemoTopic", b"hi", tags="hello")))
  first = ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
  with SyncLitePullConsumer("demo-consumer", "{ns}", consume_from_where=first) as c:
      c.subscribe("DemoTopic"); print([m.body for m in c.poll(timeout=3)])

or with the Apache C++ client (pip install rocketmq):

  from rocketmq.client import Producer, PushConsumer, Message
  p = Producer("demo-producer"); p.set_namesrv_addr("{ns}"); p.start()
  m = Message("DemoTopic"); m.set_tags("hello"); m.set_body("hi from ledgermq"); print(p.send_sync(m))
  c = PushConsumer("demo-consumer"); c.set_namesrv_addr("{ns}")
  c.subscribe("DemoTopic", lambda msg: print(msg.body)); c.start()

or any RocketMQ 4.x client with namesrvAddr={ns}.
"""


def _wait_port(port: int, proc: subprocess.Popen[bytes], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise click.ClickException(f"process exited with {proc.returncode} during start-up; see its log")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise click.ClickException(f"nothing listens on port {port} after {timeout:.0f}s")


def _spawn(args: list[str], log_path: Path) -> subprocess.Popen[bytes]:
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log = open(log_path, "ab")  # noqa: SIM115 - the child owns it for its whole life
    return subprocess.Popen(
        [sys.executable, "-m", "ledgermq.cli.main", "-v", *args],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        preexec_fn=die_with_parent,
    )


def _stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for proc in reversed(procs):  # brokers first, so they can unregister
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)


def broker_properties(name: str, port: int, namesrv: str, store: Path, broker_id: int = 0) -> str:
    return "\n".join(
        [
            "brokerClusterName=DefaultCluster",
            f"brokerName={name}",
            f"brokerId={broker_id}",
            f"brokerRole={'ASYNC_MASTER' if broker_id == 0 else 'SLAVE'}",
            "brokerIP1=127.0.0.1",
            f"listenPort={port}",
            f"namesrvAddr={namesrv}",
            f"storePathRootDir={store}",
            "mappedFileSizeCommitLog=104857600",
            "",
        ]
    )


def dledger_properties(self_id: str, port: int, namesrv: str, store: Path, peers: str) -> str:
    """A broker of the DLedger group ``broker-a``; it starts as a slave until it leads."""
    return "\n".join(
        [
            "brokerClusterName=DefaultCluster",
            f"brokerName={GROUP}",
            "brokerIP1=127.0.0.1",
            f"listenPort={port}",
            f"namesrvAddr={namesrv}",
            f"storePathRootDir={store}",
            "mappedFileSizeCommitLog=104857600",
            "enableDLegerCommitLog=true",
            f"dLegerGroup={GROUP}",
            f"dLegerPeers={peers}",
            f"dLegerSelfId={self_id}",
            "",
        ]
    )


def _master_addr(ns: str) -> str | None:
    """The address the name server lists as broker-a's master (brokerId 0), if any."""

    async def ask() -> str | None:
        async with AdminClient(ns, timeout=2.0, connect_timeout=1.0) as admin:
            data = (await admin.cluster_info()).broker_addr_table.get(GROUP)
            return data.master_addr() if data is not None else None

    try:
        return asyncio.run(ask())
    except LedgerError:
        return None


def _wait_master(ns: str, procs: list[subprocess.Popen[bytes]], timeout: float) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for proc in procs:
            if proc.poll() is not None:
                raise click.ClickException(f"a broker exited with {proc.returncode} during start-up; see its log")
        addr = _master_addr(ns)
        if addr:
            return addr
        time.sleep(0.2)
    raise click.ClickException(f"no DLedger leader registered as master after {timeout:.0f}s; see the brokers' logs")


def _dledger_ports(broker_port: int, dledger_ports: str | None) -> list[int]:
    if dledger_ports is None:
        return [broker_port + 10 * k for k in range(len(DLEDGER_IDS))]
    try:
        ports = [int(p) for p in dledger_ports.split(",")]
    except ValueError:
        raise click.BadParameter(f"{dledger_ports!r}: expected three ports, comma separated") from None
    if len(ports) != len(DLEDGER_IDS):
        raise click.BadParameter(f"{dledger_ports!r}: expected three ports, comma separated")
    return ports


@click.group()
def cluster() -> None:
    """Run a local cluster for development."""


@cluster.command()
@click.option("--data", type=click.Path(path_type=Path, file_okay=False), default=Path("./data"), show_default=True)
@click.option("--namesrv-port", default=9876, show_default=True)
@click.option("--broker-port", default=10911, show_default=True)
@click.option("--slave-port", default=None, type=int, help="the slave's listen port (default broker port + 10)")
@click.option("--no-slave", is_flag=True, help="run the master alone (master-slave mode)")
@click.option(
    "--mode",
    type=click.Choice(["master-slave", "dledger"]),
    default="master-slave",
    show_default=True,
    help="master + slave, or a 3-broker DLedger (Raft) group that elects its master",
)
@click.option("--dledger-ports", default=None, help="dledger mode: the three brokers' listen ports, p0,p1,p2")
@click.option("--timeout", default=60.0, show_default=True, help="seconds to wait for start-up")
def up(
    data: Path,
    namesrv_port: int,
    broker_port: int,
    slave_port: int | None,
    no_slave: bool,
    mode: str,
    dledger_ports: str | None,
    timeout: float,
) -> None:
    """Start a name server and a broker group (master + slave, or a DLedger group) in the foreground;
    Ctrl-C stops them."""
    data = data.resolve()
    ns = f"127.0.0.1:{namesrv_port}"
    if mode == "dledger":
        _up_dledger(data, namesrv_port, _dledger_ports(broker_port, dledger_ports), timeout)
        return
    conf = data / "conf" / "broker-a.properties"
    conf.parent.mkdir(parents=True, exist_ok=True)
    conf.write_text(broker_properties("broker-a", broker_port, ns, data / "broker-a"))
    slave_port = slave_port or broker_port + 10
    slave_conf = data / "conf" / "broker-a-s.properties"
    slave_conf.write_text(broker_properties("broker-a", slave_port, ns, data / "broker-a-s", broker_id=1))
    with _running_cluster(data, namesrv_port, timeout) as (procs, stopping):
        procs.append(_spawn(["broker", "-c", str(conf)], data / "logs" / "broker-a.log"))
        _wait_port(broker_port, procs[-1], timeout)
        if not no_slave:
            procs.append(_spawn(["broker", "-c", str(slave_conf)], data / "logs" / "broker-a-s.log"))
            _wait_port(slave_port, procs[-1], timeout)
        click.echo(f"name server      {ns}            log {data / 'logs' / 'namesrv.log'}")
        click.echo(f"broker-a master  127.0.0.1:{broker_port}   HA port {broker_port + 1}   store {data / 'broker-a'}")
        if not no_slave:
            click.echo(f"broker-a slave   127.0.0.1:{slave_port}   replicating   store {data / 'broker-a-s'}")
        click.echo("")
        click.echo(SNIPPET.format(ns=ns))
        click.echo("Ctrl-C stops the cluster.")
        _supervise(procs, stopping)


@contextmanager
def _running_cluster(
    data: Path, namesrv_port: int, timeout: float
) -> Iterator[tuple[list[subprocess.Popen[bytes]], Callable[[], bool]]]:
    """A running name server, the list the caller adds its brokers to, and whether a signal
    asked to stop; every process in the list is stopped on the way out."""
    procs: list[subprocess.Popen[bytes]] = []
    stopping = False

    def on_signal(signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        procs.append(
            _spawn(["namesrv", "-p", str(namesrv_port), "--kv-config", str(data / "namesrv" / "kvConfig.json")],
                   data / "logs" / "namesrv.log")
        )  # fmt: skip
        _wait_port(namesrv_port, procs[-1], timeout)
        yield procs, lambda: stopping
    finally:
        _stop(procs)
        click.echo("cluster stopped", err=True)


def _supervise(procs: list[subprocess.Popen[bytes]], stopping: Callable[[], bool]) -> None:
    """Until a signal asks to stop or a child dies."""
    while not stopping():
        for proc in procs:
            if proc.poll() is not None:
                click.echo(f"a cluster process exited with {proc.returncode}; stopping the rest", err=True)
                return
        time.sleep(0.2)


def _up_dledger(data: Path, namesrv_port: int, ports: list[int], timeout: float) -> None:
    ns = f"127.0.0.1:{namesrv_port}"
    peers = ";".join(f"{n}-127.0.0.1:{port + 1}" for n, port in zip(DLEDGER_IDS, ports, strict=True))
    confs: dict[str, Path] = {}
    for n, port in zip(DLEDGER_IDS, ports, strict=True):
        confs[n] = data / "conf" / f"{GROUP}-{n}.properties"
        confs[n].parent.mkdir(parents=True, exist_ok=True)
        confs[n].write_text(dledger_properties(n, port, ns, data / f"{GROUP}-{n}", peers))
    with _running_cluster(data, namesrv_port, timeout) as (procs, stopping):
        for n in DLEDGER_IDS:
            procs.append(_spawn(["broker", "-c", str(confs[n])], data / "logs" / f"{GROUP}-{n}.log"))
        for proc, port in zip(procs[1:], ports, strict=True):
            _wait_port(port, proc, timeout)
        master = _wait_master(ns, procs, timeout)
        click.echo(f"name server      {ns}            log {data / 'logs' / 'namesrv.log'}")
        for n, port in zip(DLEDGER_IDS, ports, strict=True):
            role = "leader (master)" if master == f"127.0.0.1:{port}" else "follower (slave)"
            click.echo(
                f"{GROUP} {n}      127.0.0.1:{port}   raft port {port + 1}   {role:<16}   store {data / f'{GROUP}-{n}'}"
            )
        click.echo(f"DLedger group {GROUP} leader: {master}")
        click.echo(f"  status:   ledgermq admin dledgerStatus -n {ns}")
        click.echo(f"  handover: ledgermq admin transferLeader -n {ns} -g {GROUP} -t n1")
        click.echo("")
        click.echo(SNIPPET.format(ns=ns))
        click.echo("Ctrl-C stops the cluster.")
        _supervise(procs, stopping)
