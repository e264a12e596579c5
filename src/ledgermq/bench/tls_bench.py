"""TLS on against TLS off, side by side: 256 sends in flight and a backlog drain.

``python -m ledgermq.bench.tls_bench [--quick]``. Two systems, each a name server, a master
and a slave as processes (the compare bench's ``LedgermqRunner``): "plain" (TLS disabled,
the default) and "tls" (permissive ports with mutual TLS, every measured connection and every link over TLS: client,
registration, replication), with a throw-away CA. Rounds run A B B A so drift on a shared
machine hits both alike; the figures are medians and the ratio is tls / plain from this run.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
from pathlib import Path

from ledgermq.bench.broker_bench import _spawn, _wait_port
from ledgermq.bench.compare.ledgermq_side import LedgermqRunner
from ledgermq.bench.compare.model import DRAIN_LITE, INFLIGHT, QUICK, CompareSettings
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
    pair = _TlsNamesrvPair(work / "tls", "ASYNC_MASTER", runner.pair.segment_size, **runner.pair.extra)
    pair.conf = work / "namesrv-tls.properties"
    pair.conf.write_text("".join(f"{k}={v}\n" for k, v in keys.items()))
    runner.pair = pair
    return runner


def run(settings: CompareSettings) -> dict[str, dict[str, float]]:
    """Messages per second, median over rounds, per system and workload."""
    work = Path(tempfile.mkdtemp(prefix="ledgermq-tls-bench-"))
    rates: dict[str, dict[str, list[float]]] = {"plain": {}, "tls": {}}
    plain = LedgermqRunner("plain", "ASYNC_MASTER", "ASYNC_FLUSH", settings, WORKLOADS, work / "plain")
    tls = _tls_runner(work, settings)
    with plain, tls:
        round_no = 0
        for _cycle in range(settings.cycles):
            for name, runner in (("plain", plain), ("tls", tls), ("tls", tls), ("plain", plain)):
                for workload in WORKLOADS:
                    round_no += 1
                    runner.prepare(workload, round_no)
                    m = runner.run(workload, round_no)
                    rate = m.count / m.seconds if m.seconds > 0 else 0.0
                    rates[name].setdefault(workload, []).append(rate)
                    print(f"{name:5} {workload:12} {rate:10.0f} msg/s", file=sys.stderr, flush=True)
    return {n: {w: statistics.median(v) for w, v in ws.items()} for n, ws in rates.items()}


def main() -> None:
    settings = QUICK if "--quick" in sys.argv else CompareSettings()
    result = run(settings)
    for workload in WORKLOADS:
        p, t = result["plain"][workload], result["tls"][workload]
        print(f"{workload:12} plain {p:9.0f} msg/s   tls {t:9.0f} msg/s   tls/plain {t / p:.2f}x")


if __name__ == "__main__":
    main()
