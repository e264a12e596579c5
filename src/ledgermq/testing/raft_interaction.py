"""A scripted Raft cluster for golden transcripts: every Ready and message is printed in a stable form.

Unlike the simulator nothing here is random except each node's seeded election
jitter: messages wait in per-node inboxes until a command delivers them, and writes
become durable only on ``persist`` (or at once with ``sync-writes``), so a transcript
can stop anywhere to show the state in between.

Commands (see ``tests/raft/testdata``): ``add-nodes N [pre_vote= check_quorum= noop=
election= heartbeat= sync=]``, ``campaign ID``, ``propose ID DATA``, ``tick ID [N]``,
``tick-election ID``, ``tick-heartbeat ID``, ``process-ready ID...``, ``deliver-msgs
[ID...] [drop=true]``, ``persist ID...``, ``stabilize [ID...]``, ``partition A B | C``,
``isolate ID``, ``heal``, ``crash ID``, ``restart ID``, ``transfer-leader FROM TO``,
``status ID...``, ``raft-log ID``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from ledgermq.raft import (
    Entry,
    EntryKind,
    HardState,
    Message,
    MsgType,
    ProposalDroppedError,
    RaftConfig,
    RaftNode,
    Ready,
)
from ledgermq.raft.storage import MemoryStorage
from ledgermq.testing.datadriven import Command


def fmt_entry(e: Entry) -> str:
    if e.kind is EntryKind.NOOP:
        return f"{e.index}/{e.term} NOOP"
    return f"{e.index}/{e.term} {e.data.decode(errors='backslashreplace')}"


def fmt_msg(m: Message) -> str:
    s = f"{m.src}->{m.dst} {m.type.value} Term:{m.term}"
    t = m.type
    if t in (MsgType.PRE_VOTE, MsgType.VOTE, MsgType.APPEND):
        s += f" Log:{m.log_term}/{m.index}"
    if t in (MsgType.APPEND, MsgType.HEARTBEAT):
        s += f" Commit:{m.commit}"
    if t is MsgType.APPEND:
        s += " Entries:[" + ", ".join(fmt_entry(e) for e in m.entries) + "]"
    if t is MsgType.APPEND_RESP and not m.reject:
        s += f" Index:{m.index}"
    if m.reject:
        s += " Rejected"
        if t is MsgType.APPEND_RESP:
            s += f" (Index:{m.index} Hint:{m.log_term}/{m.reject_hint})"
    if m.transfer:
        s += " Transfer"
    if m.repair_until:
        s += f" RepairingUntil:{m.repair_until}"
    return s


def fmt_ready(node_id: str, rd: Ready) -> list[str]:
    out = [f"> {node_id} handling Ready", f"  Lead:{rd.soft_state.leader} State:{rd.soft_state.role.value}"]
    if rd.hard_state is not None:
        hs = rd.hard_state
        out.append(f"  HardState Term:{hs.term} Vote:{hs.vote} Commit:{hs.commit} MustSync:{rd.must_sync}")
    if rd.entries_to_persist:
        out.append("  Entries:")
        out += [f"    {fmt_entry(e)}" for e in rd.entries_to_persist]
    if rd.committed_entries:
        out.append("  CommittedEntries:")
        out += [f"    {fmt_entry(e)}" for e in rd.committed_entries]
    if rd.messages:
        out.append("  Messages:")
        out += [f"    {fmt_msg(m)}" for m in rd.messages]
    return out


@dataclass(slots=True)
class _Disk:
    hard_state: HardState = field(default_factory=HardState)
    storage: MemoryStorage = field(default_factory=MemoryStorage)
    pending: list[tuple[Entry, ...]] = field(default_factory=list)


class InteractionEnv:
    def __init__(self) -> None:
        self.nodes: dict[str, RaftNode] = {}
        self.down: set[str] = set()
        self.disks: dict[str, _Disk] = {}
        self.inbox: dict[str, list[Message]] = {}
        self.blocked: set[tuple[str, str]] = set()
        self.sync_writes = True
        self._cfg: dict[str, RaftConfig] = {}

    def handle(self, cmd: Command) -> str:
        handler = getattr(self, "_cmd_" + cmd.name.replace("-", "_"), None)
        if handler is None:
            raise ValueError(f"{cmd.where}: unknown command {cmd.name!r}")
        lines: list[str] = handler(cmd)
        return "\n".join(lines) if lines else "ok"

    # -- set-up ----------------------------------------------------------------------

    def _cmd_add_nodes(self, cmd: Command) -> list[str]:
        n = int(cmd.args[0])
        ids = [f"n{i}" for i in range(n)]
        self.sync_writes = cmd.flag("sync", True)
        for pos, nid in enumerate(ids):
            self._cfg[nid] = RaftConfig(
                nid,
                election_timeout_ticks=int(cmd.get("election", "10")),
                heartbeat_ticks=int(cmd.get("heartbeat", "1")),
                pre_vote=cmd.flag("pre_vote", True),
                check_quorum=cmd.flag("check_quorum", True),
                append_noop_on_election=cmd.flag("noop", True),
                max_entries_per_append=int(cmd.get("max_entries", "64")),
                seed=pos,
            )
            self.disks[nid] = _Disk()
            self.inbox[nid] = []
            self.nodes[nid] = RaftNode(self._cfg[nid], ids, storage=self.disks[nid].storage)
        return []

    # -- inputs ------------------------------------------------------------------------

    def _cmd_campaign(self, cmd: Command) -> list[str]:
        self.nodes[cmd.args[0]].campaign()
        return []

    def _cmd_propose(self, cmd: Command) -> list[str]:
        try:
            index = self.nodes[cmd.args[0]].propose(cmd.args[1].encode())
        except ProposalDroppedError as exc:
            return [f"{type(exc).__name__}: {exc}"]
        return [f"index {index}"]

    def _cmd_transfer_leader(self, cmd: Command) -> list[str]:
        try:
            self.nodes[cmd.args[0]].transfer_leader(cmd.args[1])
        except ProposalDroppedError as exc:
            return [f"{type(exc).__name__}: {exc}"]
        return []

    def _cmd_tick(self, cmd: Command) -> list[str]:
        for _ in range(int(cmd.args[1]) if len(cmd.args) > 1 else 1):
            self.nodes[cmd.args[0]].tick()
        return []

    def _cmd_tick_election(self, cmd: Command) -> list[str]:
        # 2T - 1 ticks always pass the randomized timeout in [T, 2T).
        n = self.nodes[cmd.args[0]]
        for _ in range(2 * self._cfg[n.id].election_timeout_ticks - 1):
            n.tick()
        return []

    def _cmd_tick_heartbeat(self, cmd: Command) -> list[str]:
        n = self.nodes[cmd.args[0]]
        for _ in range(self._cfg[n.id].heartbeat_ticks):
            n.tick()
        return []

    # -- the caller's loop ---------------------------------------------------------------

    def _cmd_process_ready(self, cmd: Command) -> list[str]:
        out: list[str] = []
        for nid in cmd.args:
            out += self._process_ready(nid)
        return out

    def _process_ready(self, nid: str) -> list[str]:
        n = self.nodes[nid]
        if nid in self.down or not n.has_ready():
            return []
        rd = n.ready()
        disk = self.disks[nid]
        if rd.hard_state is not None:
            disk.hard_state = rd.hard_state
        if rd.entries_to_persist:
            disk.pending.append(rd.entries_to_persist)
        for m in rd.messages:
            if (m.src, m.dst) not in self.blocked:  # a partition drops what crosses it at once
                self.inbox[m.dst].append(m)
        n.advance(rd)
        out = fmt_ready(nid, rd)
        if self.sync_writes:
            self._persist(nid)
        return out

    def _persist(self, nid: str) -> list[str]:
        disk = self.disks[nid]
        out = []
        for entries in disk.pending:
            disk.storage.append(entries)
            self.nodes[nid].persisted(entries[-1].index, entries[-1].term)
            out.append(f"> {nid} persisted {entries[-1].index}/{entries[-1].term}")
        disk.pending.clear()
        return out

    def _cmd_persist(self, cmd: Command) -> list[str]:
        out: list[str] = []
        for nid in cmd.args:
            out += self._persist(nid)
        return out

    def _cmd_deliver_msgs(self, cmd: Command) -> list[str]:
        return self._deliver(list(cmd.args) or list(self.nodes), drop=cmd.flag("drop", False))

    def _deliver(self, targets: list[str], drop: bool = False) -> list[str]:
        out: list[str] = []
        for nid in targets:
            msgs, self.inbox[nid] = self.inbox[nid], []
            for m in msgs:
                if drop or nid in self.down or (m.src, m.dst) in self.blocked:
                    out.append(f"dropped: {fmt_msg(m)}")
                    continue
                out.append(fmt_msg(m))
                self.nodes[nid].step(m)
        return out

    def _cmd_stabilize(self, cmd: Command) -> list[str]:
        targets = list(cmd.args) or list(self.nodes)
        out: list[str] = []
        while True:
            step: list[str] = []
            for nid in targets:
                step += self._process_ready(nid)
            for nid in targets:
                step += self._deliver([nid])
            if not step:
                return out
            out += step

    # -- faults ----------------------------------------------------------------------------

    def _cmd_partition(self, cmd: Command) -> list[str]:
        bar = cmd.args.index("|")
        left, right = set(cmd.args[:bar]), set(cmd.args[bar + 1 :])
        self.blocked = {
            (a, b) for a in self.nodes for b in self.nodes if (a in left and b in right) or (a in right and b in left)
        }
        return []

    def _cmd_isolate(self, cmd: Command) -> list[str]:
        nid = cmd.args[0]
        self.blocked |= {(a, b) for a in self.nodes for b in self.nodes if (a == nid) != (b == nid)}
        return []

    def _cmd_heal(self, cmd: Command) -> list[str]:
        self.blocked.clear()
        return []

    def _cmd_crash(self, cmd: Command) -> list[str]:
        nid = cmd.args[0]
        self.down.add(nid)
        lost = sum(len(p) for p in self.disks[nid].pending)
        self.disks[nid].pending.clear()
        self.inbox[nid].clear()
        return [f"{nid} crashed, {lost} unsynced entries lost"]

    def _cmd_restart(self, cmd: Command) -> list[str]:
        nid = cmd.args[0]
        self.down.discard(nid)
        disk = self.disks[nid]
        cfg = self._cfg[nid]
        self.nodes[nid] = RaftNode(cfg, list(self.nodes), disk.hard_state, disk.storage, rng=random.Random(cfg.seed))
        return [f"{nid} restarted with {disk.storage.last_index()} entries, {disk.hard_state}"]

    # -- inspection ------------------------------------------------------------------------

    def _cmd_status(self, cmd: Command) -> list[str]:
        out = []
        for nid in cmd.args or tuple(self.nodes):
            n = self.nodes[nid]
            line = f"{nid}: {n.role.value} term={n.term} vote={n.vote} lead={n.leader} commit={n.commit}"
            line += f" last={n.last_index} persisted={n.persisted_index} applied={n.applied}"
            if nid in self.down:
                line += " (down)"
            out.append(line)
            for peer, (match, nxt, state) in sorted(n.progress().items()):
                out.append(f"  {peer}: match={match} next={nxt} {state.value}")
        return out

    def _cmd_raft_log(self, cmd: Command) -> list[str]:
        n = self.nodes[cmd.args[0]]
        return [fmt_entry(e) for e in n.entries(1, n.last_index + 1)] or ["(empty)"]
