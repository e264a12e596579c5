"""``ledgermq cluster up``: a local cluster under one supervisor, data under ./data.

Starts a name server and a broker group (a master and a slave replicating from it) as
child processes (each with its own log under
<data>/logs), waits until the broker's route is visible on the name server, prints where
everything listens and how to send and receive a message, and stops everything cleanly
on Ctrl-C / SIGTERM (or if a child dies).
"""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import click

from ledgermq.util.proc import die_with_parent

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


@click.group()
def cluster() -> None:
    """Run a local cluster for development."""


@cluster.command()
@click.option("--data", type=click.Path(path_type=Path, file_okay=False), default=Path("./data"), show_default=True)
@click.option("--namesrv-port", default=9876, show_default=True)
@click.option("--broker-port", default=10911, show_default=True)
@click.option("--slave-port", default=None, type=int, help="the slave's listen port (default broker port + 10)")
@click.option("--no-slave", is_flag=True, help="run the master alone")
@click.option("--timeout", default=60.0, show_default=True, help="seconds to wait for start-up")
def up(data: Path, namesrv_port: int, broker_port: int, slave_port: int | None, no_slave: bool, timeout: float) -> None:
    """Start a name server and a broker group (master + slave) in the foreground; Ctrl-C stops them."""
    data = data.resolve()
    ns = f"127.0.0.1:{namesrv_port}"
    conf = data / "conf" / "broker-a.properties"
    conf.parent.mkdir(parents=True, exist_ok=True)
    conf.write_text(broker_properties("broker-a", broker_port, ns, data / "broker-a"))
    slave_port = slave_port or broker_port + 10
    slave_conf = data / "conf" / "broker-a-s.properties"
    slave_conf.write_text(broker_properties("broker-a", slave_port, ns, data / "broker-a-s", broker_id=1))
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
        while not stopping:
            for proc in procs:
                if proc.poll() is not None:
                    click.echo(f"a cluster process exited with {proc.returncode}; stopping the rest", err=True)
                    stopping = True
            time.sleep(0.2)
    finally:
        _stop(procs)
        click.echo("cluster stopped", err=True)
