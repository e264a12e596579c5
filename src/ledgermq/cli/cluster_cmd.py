"""``ledgermq cluster up``: a local cluster under one supervisor, data under ./data.

Starts a name server and a broker group as child processes (each with its own log under
<data>/logs and pid file under <data>/run). Before starting anything it checks that every
port it will listen on is free, and stops with one line naming a taken one. It prints the
banner only once the cluster really serves (the brokers are registered in the name
server), restarts a process that dies (with back-off), and stops everything cleanly on
Ctrl-C / SIGTERM: brokers first, then the name server. The group is either

* ``--mode master-slave`` (the default): a master and a slave replicating from it; or
* ``--mode controller`` (what ``make run`` starts): a name server with a controller inside
  and two brokers in controller mode, broker-a-1 on ``--broker-port`` and broker-a-2 on
  ``--slave-port``; the controller makes one master and the other its slave, and when the
  master dies elects the slave (``cli/cluster/controller_mode.py`` says what is chosen). The
  restarted process rejoins as a slave; the supervisor prints each role change; or
* ``--mode dledger``: three brokers n0, n1, n2 of one DLedger (Raft) group ``broker-a``;
  they elect a leader, which registers as the group's master. Broker n<k> listens on
  ``--broker-port`` + 10 k (or the k-th of ``--dledger-ports``) and talks Raft on that
  port + 1 (the HA port, unused in DLedger mode). The banner names the leader once the
  name server lists it as master.

Every broker serves Prometheus metrics on its listen port + 2 (``--no-metrics`` turns
them off). ``--tls`` makes a throw-away CA under <data>/tls and runs every server in
enforcing mode with mutual TLS: client ports, HA and Raft links, registration, the
controller (brokers' requests and heartbeats, its Raft port) (docs/tls.md).
Everything listens on ``--host``, metrics included (127.0.0.1: a development cluster
is not reachable from other machines unless asked). The web console (``ledgermq console``)
runs as one more supervised process on ``--console-port``, always on 127.0.0.1 (it has no
users file here); ``--no-console`` leaves it out. Its URL is in the banner.
"""

from __future__ import annotations

import dataclasses
import signal
import time
from collections.abc import Callable
from pathlib import Path

import click

from ledgermq.cli.cluster import controller_mode
from ledgermq.cli.cluster.banner import BrokerLine, print_banner
from ledgermq.cli.cluster.console import CONSOLE_HOST, console_args, wait_console
from ledgermq.cli.cluster.ports import PlannedPort, PortProblem, check_ports
from ledgermq.cli.cluster.supervisor import MemberSpec, StartupFailed, Supervisor
from ledgermq.cli.cluster.tls import ClusterTls, make_cluster_tls
from ledgermq.clock import SYSTEM_CLOCK

DLEDGER_IDS = ("n0", "n1", "n2")
GROUP = "broker-a"
METRICS_OFFSET = 2  # a broker's metrics port: its listen port + 2 (+1 is its HA / Raft port)


def _echo(line: str) -> None:
    click.echo(line)


def advertised(host: str) -> str:
    """The address clients and peers dial: the bind address, or loopback for a wildcard."""
    return "127.0.0.1" if host in ("0.0.0.0", "::", "") else host


def broker_properties(
    name: str,
    port: int,
    namesrv: str,
    store: Path,
    broker_id: int = 0,
    host: str = "127.0.0.1",
    metrics_port: int = 0,
) -> str:
    return "\n".join(
        [
            "brokerClusterName=DefaultCluster",
            f"brokerName={name}",
            f"brokerId={broker_id}",
            f"brokerRole={'ASYNC_MASTER' if broker_id == 0 else 'SLAVE'}",
            f"brokerIP1={advertised(host)}",
            f"listenHost={host}",
            f"listenPort={port}",
            f"metricsPort={metrics_port}",
            f"namesrvAddr={namesrv}",
            f"storePathRootDir={store}",
            "mappedFileSizeCommitLog=104857600",
            "",
        ]
    )


def dledger_properties(
    self_id: str, port: int, namesrv: str, store: Path, peers: str, host: str = "127.0.0.1", metrics_port: int = 0
) -> str:
    """A broker of the DLedger group ``broker-a``; it starts as a slave until it leads."""
    return "\n".join(
        [
            "brokerClusterName=DefaultCluster",
            f"brokerName={GROUP}",
            f"brokerIP1={advertised(host)}",
            f"listenHost={host}",
            f"listenPort={port}",
            f"metricsPort={metrics_port}",
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
@click.option("--host", default="127.0.0.1", show_default=True, help="listen address of every server (0.0.0.0: all)")
@click.option("--namesrv-port", default=9876, show_default=True)
@click.option("--broker-port", default=10911, show_default=True, help="the master's listen port (HA +1, metrics +2)")
@click.option("--slave-port", default=None, type=int, help="the slave's listen port (default broker port + 10)")
@click.option("--no-slave", is_flag=True, help="run the master alone (master-slave and controller modes)")
@click.option(
    "--mode",
    type=click.Choice(["master-slave", "controller", "dledger"]),
    default="master-slave",
    show_default=True,
    help="master + slave; two brokers a controller (inside the name server) fails over; "
    "or a 3-broker DLedger (Raft) group that elects its master",
)
@click.option(
    "--controller-port", default=None, type=int, help="controller mode: the controller's Raft port (namesrv port + 1)"
)
@click.option("--dledger-ports", default=None, help="dledger mode: the three brokers' listen ports, p0,p1,p2")
@click.option("--metrics/--no-metrics", default=True, show_default=True, help="metrics on listen port + 2")
@click.option("--console-port", default=8080, show_default=True, help="the web console's port (on 127.0.0.1)")
@click.option("--console/--no-console", "with_console", default=True, show_default=True, help="run the web console")
@click.option("--timeout", default=60.0, show_default=True, help="seconds to wait for start-up")
@click.option("--tls", is_flag=True, help="TLS on every link (enforcing, mutual) with a throw-away CA under <data>/tls")
def up(
    data: Path,
    host: str,
    namesrv_port: int,
    broker_port: int,
    slave_port: int | None,
    no_slave: bool,
    mode: str,
    dledger_ports: str | None,
    controller_port: int | None,
    metrics: bool,
    console_port: int,
    with_console: bool,
    timeout: float,
    tls: bool,
) -> None:
    """Start a name server and a broker group (master + slave, a controller-mode pair, or a
    DLedger group) in the foreground, restart what dies; Ctrl-C stops them."""
    data = data.resolve()
    ns = f"{advertised(host)}:{namesrv_port}"
    cluster_tls = make_cluster_tls(data / "tls", (advertised(host), "localhost")) if tls else None
    client_tls = cluster_tls.client_options() if cluster_tls is not None else None
    layout = _Layout(
        host,
        ns,
        data,
        metrics,
        cluster_tls.server_keys() if cluster_tls is not None else "",
        Supervisor(ns, data / "run", _echo, tls=client_tls),
    )
    layout.conf_dir.mkdir(parents=True, exist_ok=True)
    raft_port = controller_port or namesrv_port + 1
    ns_spec = _plan_namesrv(layout, namesrv_port, raft_port if mode == "controller" else None)
    if mode == "dledger":
        _plan_dledger(layout, _dledger_ports(broker_port, dledger_ports))
    elif mode == "controller":
        _plan_controller(layout, broker_port, slave_port, no_slave)
    else:
        _plan_master_slave(layout, broker_port, slave_port, no_slave)
    console_spec = None
    if with_console:
        layout.plan.append(PlannedPort(console_port, "console port", "--console-port / --no-console"))
        console_spec = MemberSpec(
            "console", "console", console_args(ns, console_port, client_tls), layout.logs / "console.log"
        )
    try:
        check_ports(host, layout.plan)
    except PortProblem as exc:
        raise click.ClickException(str(exc)) from None
    sup = layout.sup
    stopping = _catch_stop_signals()
    try:
        try:
            if not _start_in_order(sup, ns_spec, layout.specs, mode == "dledger", timeout, stopping):
                return
            if console_spec is not None:
                wait_console(sup.spawn(console_spec), console_port, timeout, stopping)
        except StartupFailed as exc:
            raise click.ClickException(str(exc)) from None  # the finally below stops the rest
        lines, extra, on_poll = _roles_banner(mode, layout, raft_port, timeout, cluster_tls)
        if console_spec is not None:
            extra.append(f"console          http://{CONSOLE_HOST}:{console_port}/   log {console_spec.log}")
        if cluster_tls is not None:
            extra.append(cluster_tls.admin_hint(ns))
        print_banner(_echo, f"{host}:{namesrv_port}", ns, layout.logs, lines, extra, client_tls)
        sup.run(stopping, on_poll)
    finally:
        sup.stop()
        click.echo("cluster stopped", err=True)


@dataclasses.dataclass
class _Layout:
    """What ``cluster up`` will run: the ports to check first, the broker processes and their
    banner lines, gathered by the ``_plan_*`` functions of the chosen mode."""

    host: str
    ns: str  # the name server address members dial
    data: Path
    metrics: bool
    tls_keys: str  # properties lines that make a server enforce TLS ("" without --tls)
    sup: Supervisor
    plan: list[PlannedPort] = dataclasses.field(default_factory=list)
    specs: list[MemberSpec] = dataclasses.field(default_factory=list)
    lines: list[BrokerLine] = dataclasses.field(default_factory=list)

    @property
    def conf_dir(self) -> Path:
        return self.data / "conf"

    @property
    def logs(self) -> Path:
        return self.data / "logs"

    def metrics_port(self, port: int) -> int:
        return port + METRICS_OFFSET if self.metrics else 0

    def metrics_url(self, port: int, who: str, option: str) -> str | None:
        """Plans the metrics port of a broker on ``port``; where to point a browser at it."""
        if not self.metrics:
            return None
        self.plan.append(PlannedPort(port + METRICS_OFFSET, f"{who} metrics port", option + " / --no-metrics"))
        shown = "127.0.0.1" if self.host in ("", "0.0.0.0") else self.host
        return f"http://{shown}:{port + METRICS_OFFSET}/metrics"

    def add(self, spec: MemberSpec, line: BrokerLine) -> None:
        self.specs.append(spec)
        self.lines.append(line)


def _plan_namesrv(layout: _Layout, port: int, controller_raft_port: int | None) -> MemberSpec:
    """The name server (with the controller inside when given its Raft port)."""
    layout.plan.append(PlannedPort(port, "name server port", "--namesrv-port"))
    kv_config = str(layout.data / "namesrv" / "kvConfig.json")
    args: tuple[str, ...] = ("namesrv", "--host", layout.host, "-p", str(port), "--kv-config", kv_config)
    props = layout.tls_keys
    if controller_raft_port is not None:
        layout.plan.append(PlannedPort(controller_raft_port, "controller Raft port", "--controller-port"))
        raft_addr = f"{advertised(layout.host)}:{controller_raft_port}"
        props += controller_mode.namesrv_properties(raft_addr, layout.data / "controller")
    if props:
        conf = layout.conf_dir / "namesrv.properties"
        conf.write_text(props)
        args += ("-c", str(conf))
    return MemberSpec("namesrv", "name server", args, layout.logs / "namesrv.log")


def _plan_dledger(layout: _Layout, ports: list[int]) -> None:
    """Three members of one Raft group, each talking Raft on its listen port + 1."""
    adv = advertised(layout.host)
    peers = ";".join(f"{n}-{adv}:{p + 1}" for n, p in zip(DLEDGER_IDS, ports, strict=True))
    for n, p in zip(DLEDGER_IDS, ports, strict=True):
        who = f"{GROUP} {n}"
        option = "--dledger-ports / --broker-port"
        layout.plan += [PlannedPort(p, f"{who} listen port", option), PlannedPort(p + 1, f"{who} raft port", option)]
        url = layout.metrics_url(p, who, option)
        store = layout.data / f"{GROUP}-{n}"
        conf = layout.conf_dir / f"{GROUP}-{n}.properties"
        props = dledger_properties(n, p, layout.ns, store, peers, layout.host, layout.metrics_port(p))
        conf.write_text(props + layout.tls_keys)
        spec = MemberSpec(
            f"{GROUP}-{n}", who, ("broker", "-c", str(conf)), layout.logs / f"{GROUP}-{n}.log", f"{adv}:{p}"
        )
        line = BrokerLine(who, f"{layout.host}:{p}", f"raft port {p + 1}", url, store, layout.sup.pid_file(spec))
        layout.add(spec, line)


def _plan_controller(layout: _Layout, broker_port: int, slave_port: int | None, no_slave: bool) -> None:
    """One or two replicas in controller mode; the controller decides which is master."""
    replicas = [("1", broker_port, "--broker-port"), ("2", slave_port or broker_port + 10, "--slave-port")]
    host, adv = layout.host, advertised(layout.host)
    for replica, p, option in replicas[: 1 if no_slave else 2]:
        who = f"{GROUP} {replica}"
        layout.plan += [PlannedPort(p, f"{who} listen port", option), PlannedPort(p + 1, f"{who} HA port", option)]
        url = layout.metrics_url(p, who, option)
        name = f"{GROUP}-{replica}"
        store = layout.data / name
        conf = layout.conf_dir / f"{name}.properties"
        metrics_port = layout.metrics_port(p)
        props = controller_mode.broker_properties(GROUP, p, layout.ns, store, host, adv, metrics_port)
        conf.write_text(props + layout.tls_keys)
        spec = MemberSpec(name, who, ("broker", "-c", str(conf)), layout.logs / f"{name}.log", f"{adv}:{p}")
        layout.add(spec, BrokerLine(who, f"{host}:{p}", f"HA port {p + 1}", url, store, layout.sup.pid_file(spec)))


def _plan_master_slave(layout: _Layout, broker_port: int, slave_port: int | None, no_slave: bool) -> None:
    """A master (brokerId 0, HA on its listen port + 1) and, unless told not to, its slave."""
    members = [("master", broker_port, 0, GROUP, "--broker-port")]
    if not no_slave:
        members.append(("slave", slave_port or broker_port + 10, 1, f"{GROUP}-s", "--slave-port"))
    for role, p, broker_id, name, option in members:
        who = f"{role} {GROUP}"
        layout.plan.append(PlannedPort(p, f"{who} listen port", option))
        if broker_id == 0:
            layout.plan.append(PlannedPort(p + 1, f"{who} HA port", option))
        url = layout.metrics_url(p, who, option)
        store = layout.data / name
        conf = layout.conf_dir / f"{name}.properties"
        props = broker_properties(GROUP, p, layout.ns, store, broker_id, layout.host, layout.metrics_port(p))
        conf.write_text(props + layout.tls_keys)
        addr = f"{advertised(layout.host)}:{p}"
        spec = MemberSpec(name, who, ("broker", "-c", str(conf)), layout.logs / f"{name}.log", addr, broker_id)
        second = f"HA port {p + 1}" if broker_id == 0 else "replicating"
        line = BrokerLine(f"{GROUP} {role}", f"{layout.host}:{p}", second, url, store, layout.sup.pid_file(spec))
        layout.add(spec, line)


def _start_in_order(
    sup: Supervisor,
    ns_spec: MemberSpec,
    specs: list[MemberSpec],
    together: bool,
    timeout: float,
    stopping: Callable[[], bool],
) -> bool:
    """The name server, then the brokers; False if asked to stop meanwhile.

    DLedger members elect together: all start, then all are waited for. Otherwise one by
    one: a slave learns its master's HA address from the name server, and in controller
    mode the first replica to register becomes master, so broker-a-1 leads at first."""
    if not sup.wait_ready([sup.spawn(ns_spec)], timeout, stopping):
        return False
    if together:
        return sup.wait_ready([sup.spawn(s) for s in specs], timeout, stopping)
    return all(sup.wait_ready([sup.spawn(s)], timeout, stopping) for s in specs)


def _roles_banner(
    mode: str, layout: _Layout, raft_port: int, timeout: float, cluster_tls: ClusterTls | None
) -> tuple[list[BrokerLine], list[str], Callable[[], None] | None]:
    """The broker lines with the roles the cluster settled on, the mode's extra lines, and
    (controller mode) what the supervisor runs on each poll to print role changes."""
    if mode == "controller":
        return _controller_banner(layout.ns, raft_port, layout.specs, layout.lines, timeout, cluster_tls)
    if mode != "dledger":
        return layout.lines, [], None
    master = _dledger_master(layout.sup, layout.specs)
    lines = [
        dataclasses.replace(ln, role="leader (master)" if s.addr == master else "follower (slave)")
        for ln, s in zip(layout.lines, layout.specs, strict=True)
    ]
    tls_flags = cluster_tls.admin_flags() if cluster_tls is not None else ""
    ns = layout.ns
    extra = [
        f"DLedger group {GROUP} leader: {master}",
        f"  status:   ledgermq admin{tls_flags} dledgerStatus -n {ns}",
        f"  handover: ledgermq admin{tls_flags} transferLeader -n {ns} -g {GROUP} -t n1",
    ]
    return lines, extra, None


def _catch_stop_signals() -> Callable[[], bool]:
    """SIGINT / SIGTERM ask the supervisor to stop (it stops the children in order)."""
    stopping = False

    def on_signal(signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    return lambda: stopping


def _controller_banner(
    ns: str,
    raft_port: int,
    specs: list[MemberSpec],
    lines: list[BrokerLine],
    timeout: float,
    cluster_tls: ClusterTls | None,
) -> tuple[list[BrokerLine], list[str], Callable[[], None]]:
    """Each broker's role once the slave is in the master's SyncStateSet (bounded), what to
    try, and the watch that reports later role changes (over TLS in a ``--tls`` cluster)."""
    addrs = [s.addr for s in specs if s.addr is not None]
    tls = cluster_tls.client_options() if cluster_tls is not None else None
    tls_flags = cluster_tls.admin_flags() if cluster_tls is not None else ""
    states = controller_mode.wait_in_sync(ns, addrs, timeout, tls=tls)
    lines = [
        dataclasses.replace(ln, role=states[s.addr].role.lower() if s.addr in states else "")
        for ln, s in zip(lines, specs, strict=True)
    ]
    master = next((a for a, st in states.items() if st.role == "MASTER"), None)
    in_sync = states[master].sync_state_set if master else ""
    extra = [
        f"controller       {controller_mode.CONTROLLER_SELF_ID} inside the name server (controllerAddr={ns}, "
        f"raft port {raft_port}); {GROUP} master {master or 'not elected yet'}, in sync: {in_sync or '-'}",
        f"  roles:    ledgermq admin{tls_flags} getSyncStateSet -a {ns} -b {GROUP}",
        "  failover: kill -9 the master's pid (pid file above): the other broker takes writes within ~1 s,",
        "            the killed one is restarted and returns as its slave",
    ]
    watch = controller_mode.RoleWatch(ns, {s.addr: s.label for s in specs if s.addr is not None}, _echo, tls=tls)
    watch.seed(states)
    return lines, extra, watch


def _dledger_master(sup: Supervisor, specs: list[MemberSpec], timeout: float = 30.0) -> str | None:
    """The member the name server lists as master (brokerId 0) once one leads."""
    deadline = SYSTEM_CLOCK.monotonic() + timeout
    while SYSTEM_CLOCK.monotonic() < deadline:
        addr = sup.master_addr(GROUP)
        if addr in {s.addr for s in specs}:
            return addr
        time.sleep(0.2)
    return None
