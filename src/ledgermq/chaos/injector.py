"""Injecting and healing one fault on a layout and its link proxies.

``begin(plan)`` resolves the plan's role to a node (waiting, bounded, for a master or
leader) and injects the fault; ``end(record)`` heals it (a killed node is restarted and
waited for). Everything a fault chooses beyond its role comes from the plan's seeded
draws; which follower a "follower" fault hits comes from a generator seeded the same way.
``heal_all`` leaves a run's group whole whatever state it ended in.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from pathlib import Path

from ledgermq.chaos import disk
from ledgermq.chaos.controller import ControllerLayout
from ledgermq.chaos.faults import GROUP, FaultPlan, FaultRecord, zero_tail
from ledgermq.chaos.layout import HOST, Layout, tcp_open
from ledgermq.chaos.proxy import FaultProxy

log = logging.getLogger(__name__)
SEALED_WAIT_S = 30.0  # how long a segment fault waits for its target to seal a segment
SETTLE_S = 0.2  # between the second kill of kill-in-recovery and the restart


class Injector:
    """Starts and ends faults on a layout and its link proxies."""

    def __init__(self, layout: Layout, proxies: dict[str, FaultProxy], seed: int = 0) -> None:
        self.layout = layout
        self.proxies = proxies
        self._rng = random.Random(seed)  # which follower, when there are several
        self._jumps: dict[int, asyncio.Task[None]] = {}  # clock-jump: the jump back, per fault

    async def resolve(self, role: str, timeout: float) -> str:
        if role == "link":
            return ",".join(self.proxies)
        if role == GROUP:
            return ",".join(self.layout.targets())
        if role == "controller-leader":
            leader = await self._controllers().controller_leader(timeout)
            if leader is None:
                raise RuntimeError(f"no controller leader within {timeout:.0f}s")
            return leader
        master = await self.layout.wait_master(timeout)
        if master is None:
            raise RuntimeError(f"no master/leader within {timeout:.0f}s to resolve {role!r}")
        if role in ("master", "leader"):
            return master
        return self._rng.choice([t for t in self.layout.targets() if t != master])

    def _other(self, target: str, draw: float) -> str:
        """The node a pair's second fault hits: one of the others, by the plan's draw."""
        others = [t for t in self.layout.targets() if t != target]
        return others[min(len(others) - 1, int(draw * len(others)))]

    def _controllers(self) -> ControllerLayout:
        if not isinstance(self.layout, ControllerLayout):
            raise RuntimeError(f"the {self.layout.name} layout has no controller to fault")
        return self.layout

    def _raft_links_of(self, controller: str) -> list[FaultProxy]:
        """The controller node's Raft links, both ways (not the brokers' links to it)."""
        mine = (f"raft:{controller}->", f"->{controller}")
        return [
            p
            for name, p in self.proxies.items()
            if name.startswith("raft:") and (name.startswith(mine[0]) or name.endswith(mine[1]))
        ]

    def _links_of(self, target: str) -> list[FaultProxy]:
        """The proxies to cut: every link for "link", else the links to and from ``target``."""
        if target in self.layout.targets():
            return [p for name, p in self.proxies.items() if f":{target}->" in name or name.endswith(f"->{target}")]
        return list(self.proxies.values())

    def _isolate(self, target: str, mode: str) -> list[str]:
        """Cut ``target`` from its peers (a master-slave group's only link is its HA link)."""
        cut = self._links_of(target) or list(self.proxies.values())
        for proxy in cut:
            proxy.cut(mode)
        return [p.name for p in cut]

    async def _sealed(self, target: str) -> list[Path]:
        """The target's sealed, digested log segments, waiting (bounded) for one to exist."""
        store = self.layout.node(target).store_dir
        deadline = time.monotonic() + SEALED_WAIT_S
        while not (found := disk.digested_segments(store)) and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
        return found

    async def begin(self, plan: FaultPlan, resolve_timeout: float = 30.0) -> FaultRecord:
        """Resolve the plan's role (waiting, bounded, for a leader) and inject the fault."""
        target = await self.resolve(plan.role, resolve_timeout)
        rec = FaultRecord(plan.index, plan.kind, plan.role, target, plan.mode, time.monotonic())
        kind = plan.kind
        if kind in ("bitflip", "segment-loss"):
            await self._segment_fault(plan, rec)
        elif kind == "kill":
            self.layout.kill(target)
            rec.detail = f"SIGKILL {target}"
        elif kind == "suspend":
            self.layout.pause(target)
            rec.detail = f"SIGSTOP {target}"
        elif kind == "partition":
            cut = self._links_of(target)
            for proxy in cut:
                proxy.cut(plan.mode)
            rec.notes = {"links": [p.name for p in cut]}
            what = target if len(cut) == 1 or target not in self.layout.targets() else f"{target} from its peers"
            rec.detail = f"cut {what} ({plan.mode}, {len(cut)} links)"
        elif kind == "tail-loss":
            self.layout.kill(target)
            rec.notes = zero_tail(self.layout.node(target).store_dir)
            rec.detail = f"SIGKILL {target}, zeroed {rec.notes.get('bytes', 0)} bytes of {rec.notes.get('segment')}"
        elif kind == "disk-full":
            self.layout.node(target).disk_full_flag.touch()
            rec.detail = f"disk of {target} full"
        elif kind == "power-loss":
            self._power_loss(rec)
        elif kind == "slow-disk":
            self.layout.node(target).slow_disk_flag.touch()
            rec.detail = f"fsyncs of {target} stall"
        elif kind == "clock-jump":
            self._clock_jump(plan, rec)
        elif kind == "kill+disk-full":
            other = self._other(target, plan.draws[0])
            self.layout.node(other).disk_full_flag.touch()
            self.layout.kill(target)
            rec.notes = {"disk_full": other}
            rec.detail = f"SIGKILL {target} and the disk of {other} full"
        elif kind == "partition+restart":
            other = self._other(target, plan.draws[0])
            links = self._isolate(target, plan.mode)
            self.layout.kill(other)
            rec.notes = {"links": links, "restarted": other}
            rec.detail = f"cut {target} from its peers ({plan.mode}, {len(links)} links), SIGKILL {other}"
        elif kind == "controller-kill":
            self._controllers().kill_controller(target)
            rec.detail = f"SIGKILL controller leader {target}"
        elif kind == "controller-partition":
            cut = self._raft_links_of(target)
            for proxy in cut:
                proxy.cut(plan.mode)
            rec.notes = {"links": [p.name for p in cut]}
            rec.detail = f"cut controller leader {target} from its peers ({plan.mode}, {len(cut)} links)"
        elif kind == "kill-in-recovery":
            self.layout.kill(target)
            rec.detail = f"SIGKILL {target}, again {plan.draws[0]:.2f}s into its restart"
            rec.notes = {"second_kill_after_s": plan.draws[0]}
        else:  # pragma: no cover - parse_kinds refuses it
            raise ValueError(kind)
        return rec

    async def _segment_fault(self, plan: FaultPlan, rec: FaultRecord) -> None:
        """bitflip / segment-loss: a sealed segment of the target, picked by the plan's draw."""
        target = rec.target
        if not await self._sealed(target):
            rec.notes = {"skipped": f"{target} sealed and digested no log segment within {SEALED_WAIT_S:.0f}s"}
            rec.detail = f"nothing done: {rec.notes['skipped']}"
            return
        if plan.kind == "segment-loss" or plan.mode == "kill":
            self.layout.kill(target)
        elif plan.mode == "stop":
            self.layout.stop(target)
        segment = disk.pick(disk.digested_segments(self.layout.node(target).store_dir), plan.draws[0])
        if plan.kind == "segment-loss":
            rec.notes = disk.lose_segment(segment, plan.mode, plan.draws[1])
            rec.detail = f"SIGKILL {target}, {plan.mode} its segment {segment.name}"
            return
        flips = disk.flip_bytes(segment, disk.flip_picks(plan.draws[1:]))
        rec.notes = {"segment": segment.name, "flips": flips, "down": plan.mode != "online"}
        how = {"kill": "SIGKILL", "stop": "stop"}.get(plan.mode, "running")
        rec.detail = f"{how} {target}, flip {len(flips)} bytes of {segment.name}"

    def _power_loss(self, rec: FaultRecord) -> None:
        names = self.layout.targets()
        self.layout.kill_all()
        notes = {}
        for name in names:
            node = self.layout.node(name)
            notes[name] = disk.power_loss(node.store_dir, node.fsync_log)
        rec.notes = {"nodes": notes}
        lost = sum(n["log_bytes_lost"] for n in notes.values())
        rec.detail = f"power lost on {', '.join(names)}: {lost} commit-log bytes past the last fsyncs gone"

    def _clock_jump(self, plan: FaultPlan, rec: FaultRecord) -> None:
        forward, back = plan.draws
        skew = self.layout.node(rec.target).clock_skew_file
        _write_skew(skew, forward)

        async def jump_back() -> None:
            await asyncio.sleep(plan.hold_s / 2)
            _write_skew(skew, back)

        self._jumps[rec.index] = asyncio.create_task(jump_back())
        rec.notes = {"forward_s": forward, "back_s": back}
        rec.detail = f"clock of {rec.target} {forward:+.0f}s, then {back:+.0f}s"

    async def end(self, rec: FaultRecord) -> None:
        """Heal the fault; a killed node is restarted (and waited for)."""
        rec.healed_at = time.monotonic()
        try:
            await self._heal(rec)
        except Exception as exc:
            rec.error = f"heal failed: {exc}"
        rec.ready_at = time.monotonic()

    async def _heal(self, rec: FaultRecord) -> None:
        kind, target, notes = rec.kind, rec.target, rec.notes
        if kind in ("kill", "tail-loss", "segment-loss") or (kind == "bitflip" and notes.get("down")):
            if not self.layout.node(target).process.alive:
                await self.layout.restart(target)
        elif kind == "suspend":
            self.layout.resume(target)
        elif kind in ("partition", "controller-partition"):
            self._heal_links()
        elif kind == "controller-kill":
            await self._controllers().restart_controller(target)
        elif kind == "disk-full":
            self.layout.node(target).disk_full_flag.unlink(missing_ok=True)
        elif kind == "power-loss":
            await self.layout.restart_all(self.layout.targets())
        elif kind == "slow-disk":
            self.layout.node(target).slow_disk_flag.unlink(missing_ok=True)
        elif kind == "clock-jump":
            task = self._jumps.pop(rec.index, None)
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            self.layout.node(target).clock_skew_file.unlink(missing_ok=True)
        elif kind == "kill+disk-full":
            self.layout.node(notes["disk_full"]).disk_full_flag.unlink(missing_ok=True)
            await self.layout.restart(target)
        elif kind == "partition+restart":
            try:  # the links heal even when the restart fails: a cut node must not stay cut
                await self.layout.restart(notes["restarted"])
            finally:
                self._heal_links()
        elif kind == "kill-in-recovery":
            await self._kill_in_recovery(rec)

    async def _kill_in_recovery(self, rec: FaultRecord) -> None:
        node = self.layout.node(rec.target)
        node.process.start()
        await asyncio.sleep(rec.notes["second_kill_after_s"])
        rec.notes["serving_at_second_kill"] = await tcp_open(HOST, node.port)
        self.layout.kill(rec.target)
        await asyncio.sleep(SETTLE_S)
        await self.layout.restart(rec.target)

    def _heal_links(self) -> None:
        for proxy in self.proxies.values():
            if proxy.is_cut:
                proxy.heal()

    async def heal_all(self) -> list[str]:
        """Whatever state a run ends in: every proxy forwarding, no full or slow disk, the
        real time, every node running. The actions taken (a node that would not start
        again is reported, not raised: what it holds is checked as missing)."""
        done = []
        for task in self._jumps.values():
            task.cancel()
        self._jumps.clear()
        for proxy in self.proxies.values():
            if proxy.is_cut:
                proxy.heal()
                done.append(f"healed {proxy.name}")
        if isinstance(self.layout, ControllerLayout):
            for name, proc in self.layout.controllers.items():
                if not proc.alive:
                    try:
                        await self.layout.restart_controller(name)
                        done.append(f"restarted controller {name}")
                    except Exception as exc:
                        log.error("chaos: controller %s would not start again: %s", name, exc)
                        done.append(f"controller {name} would not start again: {str(exc)[:500]}")
        for name in self.layout.targets():
            node = self.layout.node(name)
            for flag, what in (
                (node.disk_full_flag, "freed the disk of"),
                (node.slow_disk_flag, "unstalled the disk of"),
                (node.clock_skew_file, "reset the clock of"),
            ):
                if flag.exists():
                    flag.unlink()
                    done.append(f"{what} {name}")
            if node.process.paused:
                self.layout.resume(name)
                done.append(f"resumed {name}")
            if not node.process.alive:
                try:
                    await self.layout.restart(name)
                    done.append(f"restarted {name}")
                except Exception as exc:
                    log.error("chaos: %s would not start again: %s", name, exc)
                    done.append(f"{name} would not start again: {str(exc)[:500]}")
        return done


def _write_skew(path: Path, seconds: float) -> None:
    """Atomically, so the broker never reads half a number."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(f"{int(seconds * 1000)}\n")
    tmp.replace(path)
