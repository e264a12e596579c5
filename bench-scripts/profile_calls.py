"""Python calls per message from the profiles ``produce_cpu.py --profile DIR --idle S`` wrote.

A run's profile also holds the periodic work of its span (timers, the delay-level
scheduler, housekeeping), which a slower run (a loaded host) charges to more messages.
Each run's idle profile gives that work's rate; the figures here take ``rate x run span``
out, function by function, so calls per message do not move with the load.

    .venv/bin/python bench-scripts/profile_calls.py DIR              # every run, both roles
    .venv/bin/python bench-scripts/profile_calls.py DIR A0 B1 master # by function, B1 - A0
"""

from __future__ import annotations

import json
import pstats
import sys
from pathlib import Path

Key = tuple[str, str]  # (file below src/ or its base name, function)


def _counts(path: Path) -> dict[Key, int]:
    out: dict[Key, int] = {}
    for (file, _line, name), (_cc, calls, _tt, _ct, _callers) in pstats.Stats(str(path)).stats.items():  # type: ignore[attr-defined]
        key = (file.split("/src/")[-1] if "/src/" in file else file.rsplit("/", 1)[-1], name)
        out[key] = out.get(key, 0) + calls
    return out


def per_message(directory: Path, stem: str, role: str) -> dict[Key, float]:
    """Calls per message of each function in ``stem``'s run (e.g. ``B1-sync``), idle rate out."""
    meta = json.loads((directory / f"{stem}.json").read_text())
    run = _counts(directory / f"{stem}-{role}.prof")
    idle_path = directory / f"{stem}-{role}-idle.prof"
    idle = _counts(idle_path) if idle_path.exists() else {}
    scale = meta["run_s"] / meta["idle_s"] if idle else 0.0
    n = meta["messages"]
    return {k: (run.get(k, 0) - idle.get(k, 0) * scale) / n for k in run.keys() | idle.keys()}


def main() -> None:
    directory = Path(sys.argv[1])
    if len(sys.argv) == 5:
        a, b, role = sys.argv[2:]
        stem_a, stem_b = (next(p.stem for p in directory.glob(f"{t}-*.json")) for t in (a, b))
        ca, cb = per_message(directory, stem_a, role), per_message(directory, stem_b, role)
        print(f"{stem_a} {sum(ca.values()):.1f}  {stem_b} {sum(cb.values()):.1f} calls per message ({role})")
        rows = sorted(ca.keys() | cb.keys(), key=lambda k: cb.get(k, 0) - ca.get(k, 0))
        for k in rows:
            d = cb.get(k, 0) - ca.get(k, 0)
            if abs(d) >= 0.3:
                print(f"{ca.get(k, 0):7.2f} {cb.get(k, 0):7.2f} {d:+7.2f}  {k[0]}:{k[1]}")
        return
    for meta_path in sorted(directory.glob("*.json")):
        stem = meta_path.stem
        for role in ("master", "slave"):
            if not (directory / f"{stem}-{role}.prof").exists():
                continue
            raw = (
                sum(_counts(directory / f"{stem}-{role}.prof").values()) / json.loads(meta_path.read_text())["messages"]
            )
            net = sum(per_message(directory, stem, role).values())
            print(f"{stem:16} {role:6} calls/msg {raw:7.1f}  less idle {net:7.1f}")


if __name__ == "__main__":
    main()
