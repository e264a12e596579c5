"""Broker CPU per message (issue #24): a name server, a master and its slave as processes,
1 KiB messages, one sender awaiting each send ("sync") and 256 in flight on one connection
(``--conns N``: both spread over N connections, e.g. N senders each awaiting its send).

Run from the worktree root:

    .venv/bin/python bench-scripts/produce_cpu.py --src A_SRC,B_SRC [--order ABBA] [--role SYNC_MASTER]
        [--sync 3000] [--inflight 20000] [--conns 1] [--idle S] [--profile DIR] [--strace]

Each letter of ``--order`` starts a fresh group from that tree's sources (PYTHONPATH), runs
both workloads (after a warm-up) and prints one JSON line: for master and slave the CPU
µs/msg (utime+stime from /proc), voluntary context switches per message, and the host's
1-minute load before and after; with ``--idle S`` also ``net_cpu_us``, the CPU per message
less what the process spent over as long while idle (measured for S seconds first: the
periodic work a slow run on a loaded host charges to each message). ``--profile DIR``
writes a cProfile of each server's loop thread over the measured run
(DIR/<tree>-<workload>-<role>.prof), with ``--idle`` one over the idle span too
(``...-idle.prof``) and the spans and message count in DIR/<tree>-<workload>.json, which
``bench-scripts/profile_calls.py`` turns into calls per message less the idle ones.
``--strace`` counts the system calls of master and slave over the measured run (strace -c
-f; slows the servers, so CPU figures of such a run are not comparable). The client is
this process (asyncio, raw SEND_MESSAGE_V2 frames), so its CPU is not in the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.compat.cluster import HOST, wait_until  # noqa: E402

from ledgermq.bench.procstat import (  # noqa: E402
    cpu_seconds,
    cpu_split,
    load_average,
    thread_cpu_seconds,
    voluntary_switches,
)
from ledgermq.protocol import properties as P  # noqa: E402
from ledgermq.protocol.codes import RequestCode  # noqa: E402
from ledgermq.protocol.command import RemotingCommand, decode_command  # noqa: E402

TOPIC = "ProduceCpuBench"
QUEUES = 4
BODY = 1024


def send_request(n: int, opaque: int) -> bytes:
    props = P.encode_properties({"TAGS": "T", "UNIQ_KEY": f"{opaque:032X}", "WAIT": "true"})
    header = {"a": "pg", "b": TOPIC, "c": "TBW102", "d": QUEUES, "e": n % QUEUES, "f": 0,
              "g": int(time.time() * 1000), "h": 0, "i": props, "j": 0, "k": "false", "m": "false"}  # fmt: skip
    body = (f"{n:08d}|".encode() + b"x" * BODY)[:BODY]
    return RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, header, body, opaque=opaque).encode()


async def drive(port: int, count: int, inflight: int) -> int:
    """Send ``count`` messages with at most ``inflight`` unanswered; every answer must be SEND_OK."""
    reader, writer = await asyncio.open_connection(HOST, port)
    frames = [send_request(n, n + 1) for n in range(count)]
    sent = ok = 0

    def refill() -> None:
        nonlocal sent
        stop = min(count, ok + inflight)
        if stop > sent:
            writer.write(b"".join(frames[sent:stop]))
            sent = stop

    refill()
    while ok < count:
        (length,) = struct.unpack(">i", await reader.readexactly(4))
        cmd = decode_command(await reader.readexactly(length))
        if cmd.code != 0:
            raise RuntimeError(f"send failed: {cmd.code} {cmd.remark}")
        ok += 1
        if inflight == 1 or ok + inflight - sent >= inflight // 4:
            refill()
    writer.close()
    return ok


async def drive_many(port: int, count: int, inflight: int, conns: int) -> int:
    """``count`` messages over ``conns`` connections, each with at most ``inflight`` unanswered."""
    if conns <= 1:
        return await drive(port, count, inflight)
    shares = [count // conns + (1 if i < count % conns else 0) for i in range(conns)]
    return sum(await asyncio.gather(*(drive(port, n, inflight) for n in shares if n)))


def run_workload(
    pids: dict[str, int], port: int, name: str, count: int, inflight: int, tag: str, args: argparse.Namespace
) -> dict[str, object]:
    asyncio.run(drive_many(port, min(1000, count), inflight, args.conns))  # warm-up: pages, caches, the link
    time.sleep(0.3)
    tracers: list[subprocess.Popen[bytes]] = []
    if args.strace:
        for role, pid in pids.items():
            out = Path(args.strace_dir) / f"{tag}-{name}-{role}.strace"
            tracers.append(
                subprocess.Popen(["strace", "-c", "-f", "-o", str(out), "-p", str(pid)], stderr=subprocess.DEVNULL)
            )
        time.sleep(1.0)
    idle_rate = {r: 0.0 for r in pids}
    spans: dict[str, float] = {}
    if args.idle:  # what each server spends doing nothing (timers, periodic services), per second
        idle0 = {r: cpu_seconds(p) for r, p in pids.items()}
        t_idle = time.monotonic()
        _profile(pids, signal.SIGUSR1, args)
        time.sleep(args.idle)
        spans["idle_s"] = _profile(pids, signal.SIGUSR2, args, f"{tag}-{name}", "idle") - t_idle
        span = time.monotonic() - t_idle
        idle_rate = {r: (cpu_seconds(p) - idle0[r]) / span for r, p in pids.items()}
    t_profile = time.monotonic()
    _profile(pids, signal.SIGUSR1, args)
    cpu0 = {r: cpu_seconds(p) for r, p in pids.items()}
    sw0 = {r: voluntary_switches(p) for r, p in pids.items()}
    th0 = {r: thread_cpu_seconds(p) for r, p in pids.items()}
    us0 = {r: cpu_split(p) for r, p in pids.items()}
    load0 = load_average()
    t0 = time.monotonic()
    asyncio.run(drive_many(port, count, inflight, args.conns))
    wall = time.monotonic() - t0
    time.sleep(0.2)  # the slave finishes what it was sent
    spans["run_s"] = _profile(pids, signal.SIGUSR2, args, f"{tag}-{name}", "") - t_profile
    out: dict[str, object] = {"wall_s": round(wall, 2), "msgs_s": round(count / wall), "load": [load0, load_average()]}
    for role, pid in pids.items():
        out[role] = {
            "cpu_us": round((cpu_seconds(pid) - cpu0[role]) * 1e6 / count, 1),
            # the same without what the process spends idle over as long (``--idle``): the
            # periodic work that a slower run (a loaded host) charges to each message
            "net_cpu_us": round((cpu_seconds(pid) - cpu0[role] - idle_rate[role] * wall) * 1e6 / count, 1),
            "switches": round((voluntary_switches(pid) - sw0[role]) / count, 2),
            "sys_us": round((cpu_split(pid)[1] - us0[role][1]) * 1e6 / count, 1),
            "other_threads_us": round(
                sum(v - th0[role].get(t, 0.0) for t, v in thread_cpu_seconds(pid).items() if t != pid) * 1e6 / count, 1
            ),
        }
    if args.profile:  # what bench-scripts/profile_calls.py needs to take the idle calls out
        meta = {"messages": count, **spans}
        (Path(args.profile) / f"{tag}-{name}.json").write_text(json.dumps(meta))
    for tracer in tracers:
        tracer.send_signal(signal.SIGINT)
        tracer.wait(20)
    return out


def _profile(pids: dict[str, int], sig: int, args: argparse.Namespace, stem: str = "", kind: str = "") -> float:
    """Start (SIGUSR1) or stop (SIGUSR2) each server's loop-thread profile; a stopped one is
    kept as DIR/<stem>-<role>[-<kind>].prof. Returns when the signals were sent."""
    if not args.profile:
        return time.monotonic()
    for pid in pids.values():
        os.kill(pid, sig)
    sent = time.monotonic()
    if sig == signal.SIGUSR1:
        time.sleep(0.2)
        return sent
    for role, pid in pids.items():
        prof = Path(args.profile) / f"{pid}.prof"
        wait_until("the profile", prof.exists, 20, 0.1)
        time.sleep(0.3)
        prof.rename(Path(args.profile) / f"{stem}-{role}{'-' + kind if kind else ''}.prof")
    return sent


def run_tree(tag: str, src: str, args: argparse.Namespace) -> dict[str, object]:
    from tests.ha.process_group import HAGroup

    os.environ["PYTHONPATH"] = f"{src}:{ROOT / 'bench-scripts' / 'counting'}"
    with tempfile.TemporaryDirectory(prefix="produce-cpu-") as tmp:
        group = HAGroup(Path(tmp))
        seg = 512 * 1024 * 1024
        master = group.add("m", 0, args.role, mappedFileSizeCommitLog=seg, flushDiskType=args.flush)
        slave = group.add("s", 1, "SLAVE", mappedFileSizeCommitLog=seg)
        try:
            group.start_namesrv()
            group.start(master)
            group.start(slave)

            def probe() -> bool:
                try:
                    return asyncio.run(drive(master.port, 1, 1)) == 1
                except RuntimeError:
                    return False

            wait_until("a SEND_OK with the slave connected", probe, 30, 0.5)
            pids = {"master": master.pid, "slave": slave.pid}
            result: dict[str, object] = {"tree": tag, "src": src, "role": args.role, "flush": args.flush}
            if args.sync:
                result["sync"] = run_workload(pids, master.port, "sync", args.sync, 1, tag, args)
            if args.inflight:
                result["inflight256"] = run_workload(pids, master.port, "inflight256", args.inflight, 256, tag, args)
            return result
        finally:
            group.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--src", default=str(ROOT / "src"), help="comma-separated source trees: A,B")
    parser.add_argument("--order", default="A", help="which tree each run uses, e.g. ABBA")
    parser.add_argument("--role", default="SYNC_MASTER")
    parser.add_argument("--flush", default="ASYNC_FLUSH")
    parser.add_argument("--sync", type=int, default=3000)
    parser.add_argument("--inflight", type=int, default=20000)
    parser.add_argument("--conns", type=int, default=1, help="connections the sends are spread over")
    parser.add_argument("--idle", type=float, default=0.0, help="seconds of idle CPU measured first (net_cpu_us)")
    parser.add_argument("--profile", default="")
    parser.add_argument("--strace", action="store_true")
    parser.add_argument("--strace-dir", default="/tmp")
    args = parser.parse_args()
    if args.profile:
        Path(args.profile).mkdir(parents=True, exist_ok=True)
        os.environ["LMQ_PROFILE_DIR"] = args.profile
    trees = dict(zip("ABCD", args.src.split(","), strict=False))
    for i, tag in enumerate(args.order):
        result = run_tree(f"{tag}{i}", trees[tag], args)
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
