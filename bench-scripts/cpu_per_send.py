"""CPU per message of each server process, and wakeups (voluntary context switches), for the
write-turn work (issue #24). Run from the worktree root:

    .venv/bin/python bench-scripts/cpu_per_send.py {sync_master,dledger} N INFLIGHT [--src DIR]

``--src`` runs the servers from another source tree (PYTHONPATH), for A/B runs in one session.
Prints one JSON line: per process CPU µs/msg and context switches per message, load average.
"""

from __future__ import annotations

import asyncio
import json
import os
import struct
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.compat.cluster import HOST, wait_until
from tests.guarantees.sends import body_for, send_request

from ledgermq.bench.procstat import cpu_seconds, load_average, voluntary_switches
from ledgermq.protocol.command import decode_command

TOPIC = "WriteTurnBench"
COUNTED = [
    "ledgermq.ha.master:HAService.wake_writers",
    "ledgermq.ha.master_link:SlaveLink.wake",
    "ledgermq.ha.master_link:SlaveLink.pump",
    "ledgermq.ha.master_link:SlaveLink._send_window",
    "ledgermq.broker.write_turn.turn:WriteTurn._run",
    "ledgermq.broker.write_turn.links:ReplicationLinks.pump",
]
COUNTS: dict[str, dict[str, float]] = {}


def read_counts(pid: int) -> dict[str, int]:
    try:
        with open(os.path.join(os.environ["WT_COUNT_DIR"], f"{pid}.json")) as f:
            return dict(json.load(f))
    except (OSError, ValueError):
        return {}


async def drive(port: int, count: int, inflight: int, tag: str) -> int:
    reader, writer = await asyncio.open_connection(HOST, port)
    ok = 0
    sent = 0
    outstanding = 0
    done = asyncio.Event()

    async def read() -> None:
        nonlocal ok, outstanding
        while ok < count:
            (length,) = struct.unpack(">i", await reader.readexactly(4))
            cmd = decode_command(await reader.readexactly(length))
            if cmd.code != 0:
                raise RuntimeError(f"send failed: {cmd.code} {cmd.remark}")
            ok += 1
            outstanding -= 1
            refill()
        done.set()

    def refill() -> None:
        nonlocal sent, outstanding
        frames = []
        while outstanding < inflight and sent < count:
            sent += 1
            outstanding += 1
            frames.append(send_request(TOPIC, sent, body_for(tag, sent), sent).encode())
        if frames:
            writer.write(b"".join(frames))

    task = asyncio.create_task(read())
    refill()
    await asyncio.wait_for(done.wait(), 600)
    await task
    writer.close()
    return ok


def measure(pids: dict[str, int], port: int, count: int, inflight: int) -> dict[str, object]:
    asyncio.run(drive(port, min(500, count), inflight, "warm"))  # warm-up
    time.sleep(0.3)
    cpu0 = {n: cpu_seconds(p) for n, p in pids.items()}
    calls0 = {n: read_counts(p) for n, p in pids.items()}
    sw0 = {n: voluntary_switches(p) for n, p in pids.items()}
    mt0 = {n: voluntary_switches(p, main_thread_only=True) for n, p in pids.items()}
    load0 = load_average()
    t0 = time.monotonic()
    asyncio.run(drive(port, count, inflight, "run"))
    wall = time.monotonic() - t0
    time.sleep(0.3)  # let the slave finish what it was sent
    for n, p in pids.items():
        now = read_counts(p)
        COUNTS[n] = {k.rsplit(":", 1)[1]: round((v - calls0[n].get(k, 0)) / count, 2) for k, v in now.items()}
    out: dict[str, object] = {
        "n": count,
        "inflight": inflight,
        "wall_s": round(wall, 2),
        "load": [load0, load_average()],
    }
    for n, p in pids.items():
        out[n] = {
            "cpu_us_per_msg": round((cpu_seconds(p) - cpu0[n]) * 1e6 / count, 1),
            "switches_per_msg": round((voluntary_switches(p) - sw0[n]) / count, 2),
            "main_switches_per_msg": round((voluntary_switches(p, main_thread_only=True) - mt0[n]) / count, 2),
        }
    return out


def sync_master(root: Path, count: int, inflight: int) -> dict[str, object]:
    from tests.ha.process_group import HAGroup

    group = HAGroup(root)
    master = group.add("m", 0, "SYNC_MASTER", mappedFileSizeCommitLog=256 * 1024 * 1024)
    slave = group.add("s", 1, "SLAVE", mappedFileSizeCommitLog=256 * 1024 * 1024)
    try:
        group.start_namesrv()
        group.start(master)
        group.start(slave)
        wait_until("slave connected", lambda: asyncio.run(drive(master.port, 1, 1, "probe")) == 1, 30, 0.5)
        return measure({"master": master.pid, "slave": slave.pid}, master.port, count, inflight)
    finally:
        group.close()


def dledger(root: Path, count: int, inflight: int) -> dict[str, object]:
    from tests.ha.dledger_group import DLedgerGroup

    group = DLedgerGroup(root, segment=256 * 1024 * 1024)
    try:
        group.start()
        leader = group.master()
        assert leader is not None
        pids = {("leader" if n == leader else n): group.brokers[n].proc.pid for n in group.ids}  # type: ignore[union-attr]
        port = group.ports[leader]

        def probe() -> bool:
            try:
                return asyncio.run(drive(port, 1, 1, "probe")) == 1
            except Exception:
                return False

        wait_until("a send to the leader", probe, 30, 0.5)
        return measure(pids, port, count, inflight)
    finally:
        group.close()


if __name__ == "__main__":
    mode, count, inflight = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    src = (
        sys.argv[sys.argv.index("--src") + 1]
        if "--src" in sys.argv
        else str(Path(__file__).resolve().parents[1] / "src")
    )
    counting = str(Path(__file__).resolve().parent / "counting")
    os.environ["PYTHONPATH"] = f"{src}:{counting}"
    count_dir = tempfile.mkdtemp(prefix="wt-count-")
    os.environ["WT_COUNT_DIR"] = count_dir
    os.environ["WT_COUNT"] = ",".join(COUNTED)
    with tempfile.TemporaryDirectory(prefix="wt-bench-") as tmp:
        result = (sync_master if mode == "sync_master" else dledger)(Path(tmp), count, inflight)
    result["mode"] = mode
    result["src"] = src
    result["calls_per_msg"] = COUNTS
    print(json.dumps(result))
