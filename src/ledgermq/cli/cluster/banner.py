"""What ``cluster up`` prints once the cluster serves: where each process listens (the
address it really binds), its metrics URL, pid file and store, and how to use it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

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


@dataclass(frozen=True)
class BrokerLine:
    label: str  # "broker-a master", "broker-a n0"
    listen: str  # host:port it binds
    second_port: str  # "HA port 10912", "raft port 10912", "replicating"
    metrics_url: str | None
    store: Path
    pid_file: Path
    role: str = ""


def print_banner(
    echo: Callable[[str], None],
    ns_listen: str,
    ns_addr: str,
    log_dir: Path,
    brokers: list[BrokerLine],
    extra: list[str],
) -> None:
    echo(f"name server      {ns_listen}   logs {log_dir}")
    for b in brokers:
        role = f"   {b.role}" if b.role else ""
        echo(f"{b.label:<16} {b.listen}   {b.second_port}{role}   store {b.store}")
        metrics = f"metrics {b.metrics_url}   " if b.metrics_url else ""
        echo(f"{'':<16} {metrics}pid file {b.pid_file}")
    for line in extra:
        echo(line)
    echo("")
    echo(SNIPPET.format(ns=ns_addr))
    echo("A process that dies is restarted (1 s back-off doubling to 30 s).")
    echo("Ctrl-C stops the cluster.")
