"""A soak's tables on the console (the JSON summary holds the same and the raw samples)."""

from __future__ import annotations

import sys
from typing import Any

from rich.console import Console
from rich.table import Table


def _bad(n: int) -> str:
    return f"[red]{n}[/red]" if n else "0"


def render(summary: dict[str, Any], console: Console | None = None) -> None:
    console = console or Console(width=None if sys.stdout.isatty() else 120)
    run, verdict, chaos = summary["run"], summary["verdict"], summary["chaos"]
    console.print(
        f"[bold]ledgermq chaos soak[/bold] layout={run['layout']} seed={run['seed']} ran={run['ran_s']:.0f}s "
        f"faults={len(summary['faults'])} ({','.join(run['faults'])}, one per {run['fault_every_s']:g}s)"
    )
    console.print(
        f"chaos workload: {chaos['attempts']} sends, {chaos['acked']} acknowledged; lost={chaos['lost']} "
        f"corrupt_served={chaos['corrupt_served']} diverged={chaos['diverged']}"
    )

    lat = Table(title=f"send latency per {summary['latency']['window_s'] / 60:g} min (acknowledged sends, all flows)")
    for col in ("window s", "sends", "failed", "p50 ms", "p99 ms", "p999 ms", "max ms"):
        lat.add_column(col, justify="right")
    for w in summary["latency"]["windows"]:
        lat.add_row(f"{w['from_s']:g}-{w['to_s']:g}", str(w["sends"]), str(w["failed"]), str(w["p50_ms"]),
                    str(w["p99_ms"]), str(w["p999_ms"]), str(w["max_ms"]))  # fmt: skip
    for name, s in summary["latency"]["per_flow"].items():
        lat.add_row(name, str(s["sends"]), "", str(s["p50_ms"]), str(s["p99_ms"]), str(s["p999_ms"]), str(s["max_ms"]))
    console.print(lat)

    flows = Table(title="checked flows")
    for col in ("flow / receiver", "acked", "expected", "received", "missing", "unexpected", "duplicates", "problems"):
        flows.add_column(col, justify="left" if col == "flow / receiver" else "right")
    for f in summary["flows"]:
        problems = ", ".join(f"{k}={v['count']}" for k, v in f["problems"].items()) or "0"
        for r in f["receivers"]:
            flows.add_row(f"{f['flow']}: {r['receiver']}", str(f["acked"]), str(r["expected"]), str(r["received"]),
                          _bad(r["missing"]), _bad(r["unexpected"]), str(r["duplicates"]),
                          f"[red]{problems}[/red]" if f["problems"] else "0")  # fmt: skip
    console.print(flows)

    res = Table(title="broker resources: median of the second quarter -> the last quarter")
    for col in ("broker", "samples", "lives", "RssAnon MiB", "RSS MiB", "open fds", "verdict"):
        res.add_column(col, justify="left" if col in ("broker", "verdict") else "right")
    for node, row in summary["resources"]["nodes"].items():
        cells = []
        for key, scale in (("anon_kib", 1024), ("rss_kib", 1024), ("fds", 1)):
            m = row.get(key)
            cells.append(f"{m['q2_median'] / scale:.0f} -> {m['q4_median'] / scale:.0f}" if m else "-")
        mark = f"[red]grew: {', '.join(row['grew'])}[/red]" if row["grew"] else row["verdict"]
        res.add_row(node, str(row["samples"]), str(row["lives"]), *cells, mark)
    console.print(res)
    console.print(f"growth rule: {summary['resources']['rule']}")
    for note in chaos["notes"]:
        console.print(f"note: {note}")
    status = "[red]FAIL[/red]" if verdict["failed"] else "[green]PASS[/green]"
    console.print(
        f"{status}: lost={verdict['lost']} corrupt_served={verdict['corrupt_served']} diverged={verdict['diverged']} "
        f"flows_failed={verdict['flows_failed']} grew={verdict['grew']} "
        f"(replay: ledgermq chaos soak {run['replay']})"
    )
