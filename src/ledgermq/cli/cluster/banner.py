"""What ``cluster up`` prints once the cluster serves: where each process listens (the
address it really binds), its metrics URL, pid file and store, and how to use it: examples
that work as shown, over TLS with the dev CA's client certificate when the cluster runs TLS."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ledgermq.client.tls import TlsOptions

OUR_CLIENT = """\
Send and receive with our client (.venv/bin/python):

  from ledgermq.client import ConsumeFromWhere, Message
  from ledgermq.client.sync import SyncLitePullConsumer, SyncProducer
  with SyncProducer("demo-producer", "{ns}") as p: print(p.send(Message("DemoTopic", b"hi", tags="hello")))
  first = ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
  with SyncLitePullConsumer("demo-consumer", "{ns}", consume_from_where=first) as c:
      c.subscribe("DemoTopic"); print([m.body for m in c.poll(timeout=3)])
"""

OUR_CLIENT_TLS = """\
Send and receive with our client (.venv/bin/python), over TLS with the client certificate:

  from ledgermq.client import ConsumeFromWhere, Message
  from ledgermq.client.sync import SyncLitePullConsumer, SyncProducer
  from ledgermq.client.tls import TlsOptions
  tls = TlsOptions(trust_cert_path="{ca}", cert_path="{cert}", key_path="{key}")
  with SyncProducer("demo-producer", "{ns}", use_tls=True, tls=tls) as p:
      print(p.send(Message("DemoTopic", b"hi", tags="hello")))
  first = ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
  with SyncLitePullConsumer("demo-consumer", "{ns}", consume_from_where=first, use_tls=True, tls=tls) as c:
      c.subscribe("DemoTopic"); print([m.body for m in c.poll(timeout=3)])
"""

CPP_CLIENT = """\
or with the Apache C++ client (pip install rocketmq):

  from rocketmq.client import Producer, PushConsumer, Message
  p = Producer("demo-producer"); p.set_namesrv_addr("{ns}"); p.start()
  m = Message("DemoTopic"); m.set_tags("hello"); m.set_body("hi from ledgermq"); print(p.send_sync(m))
  c = PushConsumer("demo-consumer"); c.set_namesrv_addr("{ns}")
  c.subscribe("DemoTopic", lambda msg: print(msg.body)); c.start()

or any RocketMQ 4.x client with namesrvAddr={ns}.
"""

CPP_CLIENT_TLS = """\
The Apache C++ client (pip install rocketmq, 0.4.4) has no TLS: this cluster refuses it on
every port; start the cluster without --tls for it. RocketMQ's Java client takes TLS with
useTLS=true and -Dtls.test.mode.enable=false -Dtls.client.authServer=true
-Dtls.client.trustCertPath={ca} -Dtls.client.certPath={cert}
-Dtls.client.keyPath={key} (namesrvAddr={ns}).
"""


def client_examples(ns: str, tls: TlsOptions | None) -> str:
    """How to send and receive, as it works against this cluster: with ``tls``, our client
    over TLS with the dev CA's client certificate, and no C++ snippet (its wheel has no TLS)."""
    if tls is None:
        return OUR_CLIENT.format(ns=ns) + "\n" + CPP_CLIENT.format(ns=ns)
    paths = {"ca": tls.trust_cert_path, "cert": tls.cert_path, "key": tls.key_path}
    return OUR_CLIENT_TLS.format(ns=ns, **paths) + "\n" + CPP_CLIENT_TLS.format(ns=ns, **paths)


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
    tls: TlsOptions | None = None,
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
    echo(client_examples(ns_addr, tls))
    echo("A process that dies is restarted (1 s back-off doubling to 30 s).")
    echo("Ctrl-C stops the cluster.")
