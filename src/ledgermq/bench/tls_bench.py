"""TLS on against TLS off, side by side: 256 sends in flight and a backlog drain.

``python -m ledgermq.bench.tls_bench [--quick] [--cycles N]``. Two systems, each a name
server, a master and a slave as processes (the compare bench's ``LedgermqRunner``): "plain"
(TLS disabled, the default) and "tls" (permissive ports with mutual TLS, every measured
connection and every link over TLS: client, registration, replication), with a throw-away
CA. Rounds run A B B A so drift on a shared machine hits both alike.

Two figures per system and workload, medians over the rounds:

* messages per second, the figure a user sees, but on a machine shared with other work it
  moves with their load as much as with ours (rounds of one system differ by ±40%);
* CPU microseconds per message, of the servers (name server, master, slave: /proc) and of
  the client (this process), which other work barely moves. On a machine where the
  processes are CPU-bound, as on the 2-core machine this is built on, plain CPU / TLS CPU
  is the share of plain throughput TLS keeps.

The load average is printed beside each round.
"""

from __future__ import annotations

import dataclasses
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from ledgermq.bench.broker_bench import _spawn, _wait_port
from ledgermq.bench.compare.ledgermq_side import LedgermqRunner
from ledgermq.bench.compare.model import DRAIN_LITE, INFLIGHT, QUICK, CompareSettings, cpu_delta
from ledgermq.bench.procstat import cpu_seconds, load_average
from ledgermq.bench.replication_bench import HAPair
from ledgermq.client.tls import TlsOptions
from ledgermq.net.tls.devca import dev_tls_properties, make_dev_pki

WORKLOADS = (INFLIGHT, DRAIN_LITE)


class _TlsNamesrvPair(HAPair):
    """HAPair whose name server reads ``conf`` (its TLS keys)."""

    conf: Path

    def __enter__(self) -> HAPair:
        self.work.mkdir(parents=True, exist_ok=True)
        ns = _spawn(
            ["ledgermq.cli.main", "namesrv", "-p", str(self.ns_port), "-c", str(self.conf), "--kv-config",
             str(self.work / "kv.json")],
            self.work / "namesrv.log",
        )  # fmt: skip
        _wait_port(self.ns_port, ns)
        self.procs.append(ns)
        return self


def _tls_runner(work: Path, settings: CompareSettings) -> LedgermqRunner:
    pki = make_dev_pki(work / "pki")
    tls_file = work / "pki" / "tls.properties"
    tls_file.write_text(dev_tls_properties(pki))
    # permissive: the bench's own readiness checks (routes, replicas caught up) ask in plain; everything
    # measured, and every link between the servers, runs over TLS (tls.enable=true)
    keys = {"tls.server.mode": "permissive", "tls.enable": "true", "tls.config.file": str(tls_file)}
    client = TlsOptions(
        trust_cert_path=str(pki.ca.cert_path), cert_path=str(pki.client.cert_path), key_path=str(pki.client.key_path)
    )
    runner = LedgermqRunner(
        "tls", "ASYNC_MASTER", "ASYNC_FLUSH", settings, WORKLOADS, work / "tls", server_props=keys, tls=client
    )
    assert isinstance(runner.pair, HAPair)  # made from role and flush above
    pair = _TlsNamesrvPair(work / "tls", "ASYNC_MASTER", runner.pair.segment_size, **runner.pair.extra)
    pair.conf = work / "namesrv-tls.properties"
    pair.conf.write_text("".join(f"{k}={v}\n" for k, v in keys.items()))
    runner.pair = pair
    return runner


@dataclass
class Rounds:
    """One system's rounds of one workload."""

    rates: list[float] = field(default_factory=list)
    server_us: list[float] = field(default_factory=list)  # server CPU per message
    client_us: list[float] = field(default_factory=list)

    @property
    def rate(self) -> float:
        return statistics.median(self.rates)

    @property
    def cpu_us(self) -> float:
        """Servers' and client's CPU per message (the median of each, summed)."""
        return statistics.median(self.server_us) + statistics.median(self.client_us)


def _measure(runner: LedgermqRunner, workload: str, round_no: int, into: Rounds) -> str:
    runner.prepare(workload, round_no)
    pids = runner.server_pids()
    servers_before = {pid: cpu_seconds(pid) for pid in pids}
    client_before = time.process_time()
    m = runner.run(workload, round_no)
    client = time.process_time() - client_before
    servers = cpu_delta(servers_before, {pid: cpu_seconds(pid) for pid in pids})
    count = max(m.count, 1)
    into.rates.append(m.count / m.seconds if m.seconds > 0 else 0.0)
    into.server_us.append(servers / count * 1e6)
    into.client_us.append(client / count * 1e6)
    return (
        f"{into.rates[-1]:9.0f} msg/s  servers {into.server_us[-1]:6.1f} us/msg  "
        f"client {into.client_us[-1]:6.1f} us/msg  load {load_average():5.1f}"
    )


def run(settings: CompareSettings) -> dict[str, dict[str, Rounds]]:
    """Every round's figures, per system and workload."""
    work = Path(tempfile.mkdtemp(prefix="ledgermq-tls-bench-"))
    rounds: dict[str, dict[str, Rounds]] = {"plain": {}, "tls": {}}
    plain = LedgermqRunner("plain", "ASYNC_MASTER", "ASYNC_FLUSH", settings, WORKLOADS, work / "plain")
    tls = _tls_runner(work, settings)
    with plain, tls:
        round_no = 0
        for _cycle in range(settings.cycles):
            for name, runner in (("plain", plain), ("tls", tls), ("tls", tls), ("plain", plain)):
                for workload in WORKLOADS:
                    round_no += 1
                    line = _measure(runner, workload, round_no, rounds[name].setdefault(workload, Rounds()))
                    print(f"{name:5} {workload:12} {line}", file=sys.stderr, flush=True)
    return rounds


def main() -> None:
    settings = QUICK if "--quick" in sys.argv else CompareSettings()
    if "--cycles" in sys.argv:
        settings = dataclasses.replace(settings, cycles=int(sys.argv[sys.argv.index("--cycles") + 1]))
    result = run(settings)
    for workload in WORKLOADS:
        p, t = result["plain"][workload], result["tls"][workload]
        print(
            f"{workload:12} msg/s: plain {p.rate:8.0f}  tls {t.rate:8.0f}  tls/plain {t.rate / p.rate:.2f}x   "
            f"CPU us/msg: plain {p.cpu_us:6.1f}  tls {t.cpu_us:6.1f}  plain/tls {p.cpu_us / t.cpu_us:.2f}x"
        )


if __name__ == "__main__":
    main()
