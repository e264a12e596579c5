"""Run a short ``ledgermq chaos run`` profile as a child process and check what every layout
must show: exit 0, nothing acknowledged lost, no divergence, each fault kind once, each
recovered. Returns the JSON summary and a report (output and process logs) for assertions."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any


def run_short_profile(
    tmp_path: Path, layout: str, kinds: str, seed: int, timeout: float, extra: tuple[str, ...] = ()
) -> tuple[dict[str, Any], str]:
    out = tmp_path / "summary.json"
    src = Path(__file__).resolve().parents[2] / "src"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(src), os.environ.get("PYTHONPATH", "")]))}
    cycles = str(len(kinds.split(",")))
    args = [
        sys.executable, "-m", "ledgermq.cli.main", "chaos", "run", "--layout", layout, "--cycles", cycles,
        "--seed", str(seed), "--faults", kinds, "--steady", "1,2", "--hold-scale", "0.6",
        "--data", str(tmp_path / "data"), "--json", str(out), *extra,
    ]  # fmt: skip
    done = subprocess.run(args, capture_output=True, text=True, timeout=timeout, env=env, check=False)
    logs = "\n".join(
        f"--- {p.name} ---\n{p.read_text(errors='replace')[-3000:]}" for p in (tmp_path / "data").glob("*/logs/*.log")
    )
    report = f"exit {done.returncode}\nstdout:\n{done.stdout[-6000:]}\nstderr:\n{done.stderr[-3000:]}\n{logs}"
    assert done.returncode == 0, report
    summary: dict[str, Any] = json.loads(out.read_text())
    verdict = summary["verdict"]
    assert verdict["lost"] == 0 and not verdict["diverged"] and verdict.get("corrupt_served", 0) == 0, report
    assert verdict["acked"] > 100, report
    assert sorted(f["kind"] for f in summary["faults"]) == sorted(kinds.split(",")), report
    assert all(f["recovered_at"] > 0 for f in summary["faults"]), report
    return summary, report
