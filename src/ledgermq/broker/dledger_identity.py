"""Which native commit log lies below a DLedger member's Raft log, and the start-up check
that every member of a group holds the same one.

A master-slave group moved to DLedger mode keeps its old commit log readable below the
divided offset (RocketMQ's dividedCommitlogOffset); only messages sent after the switch
are replicated by Raft. So every member must start from the same old log (RocketMQ's
upgrade guide: align the old master's and slave's commit logs, copy the master's store to
the third machine). A member that started empty, from another store, or from a slave that
had not caught up would serve a different history below the divided offset, and once
leader it would hand out queue offsets its consume queues do not reach (reusing offsets
the others gave to old messages). That is refused.

``StoreIdentity``: the divided offset, where the old log's data ends (the start of the
blank the switch sealed it with) and the CRC32 of its last message, found by walking the
last old segment's record sizes (nothing is read for a store that never had a native
log). Retention may delete the old log (all of it, before any DLedger file) and later the
first DLedger data files; what is gone cannot be compared, so such a member agrees with
any other (its Raft log still must match, which Raft itself checks).

Before its Raft driver starts, a broker asks its peers for theirs (DLEDGER_STORE_IDENTITY
on the Raft port, carrying its own) and starts only once a quorum (itself included)
agrees; a peer that differs is logged at ERROR, and when too many differ for a quorum to
ever agree the start is refused with both identities named. A peer that does not know
the request (an older ledgermq) is counted as agreeing, with a warning, so a rolling
upgrade still starts. A member cannot be elected or commit without a quorum, so waiting
for one costs no write availability.
"""

from __future__ import annotations

import asyncio
import logging
import struct
import zlib
from collections.abc import Mapping
from dataclasses import dataclass

from ledgermq.clock import SYSTEM_CLOCK, Clock
from ledgermq.errors import ConfigError
from ledgermq.net.client import RemotingClient
from ledgermq.net.server import RequestContext
from ledgermq.protocol import message as M
from ledgermq.protocol.codes import RequestCode, ResponseCode
from ledgermq.protocol.command import RemotingCommand
from ledgermq.protocol.headers import MissingField
from ledgermq.protocol.headers_dledger import StoreIdentityHeader
from ledgermq.store.dledger.mode_store import DLedgerMessageStore
from ledgermq.store.mapped_file import SegmentGoneError
from ledgermq.store.message_store import MessageStore

log = logging.getLogger(__name__)

_HEAD = struct.Struct(">ii")  # total size, magic
UNKNOWN = -1


@dataclass(frozen=True, slots=True)
class StoreIdentity:
    divided_offset: int  # 0: no native commit log below the DLedger data
    old_end: int  # where the old log's messages end; UNKNOWN if its last segment is gone
    old_last_crc: int  # CRC32 of the old log's last message (0 without one)

    def agrees(self, other: StoreIdentity) -> bool:
        if UNKNOWN in (self.divided_offset, other.divided_offset):
            return True  # retention deleted the old log (or early DLedger data): nothing to compare
        if self.divided_offset != other.divided_offset:
            return False
        if UNKNOWN in (self.old_end, other.old_end):
            return True  # a member whose last old segment was deleted: only the offsets compare
        return (self.old_end, self.old_last_crc) == (other.old_end, other.old_last_crc)

    def header(self, self_id: str, group: str = "") -> StoreIdentityHeader:
        return StoreIdentityHeader(self.divided_offset, self.old_end, self.old_last_crc, self_id, group)

    @classmethod
    def of(cls, header: StoreIdentityHeader) -> StoreIdentity:
        return cls(header.divided_offset, header.old_end, header.old_last_crc)

    def describe(self) -> str:
        if self.divided_offset == UNKNOWN:
            return "a log whose beginning retention deleted (nothing below it to compare)"
        if self.divided_offset == 0:
            return "no native commit log below its DLedger data"
        end = "unknown (its last old segment is gone)" if self.old_end == UNKNOWN else str(self.old_end)
        return (
            f"a native commit log ending at {end} (last message CRC {self.old_last_crc}), "
            f"DLedger data from {self.divided_offset}"
        )


def store_identity(store: MessageStore) -> StoreIdentity:
    """This store's identity (blocking: walks the last old segment's record heads)."""
    if not isinstance(store, DLedgerMessageStore):
        return StoreIdentity(0, 0, 0)
    dl = store.commitlog
    old_segments = dl.old_log.queue
    if dl.divided_offset == 0:
        first = dl.ledger.data.first()
        if not old_segments.files and first is not None and first.start_offset > 0:
            # Retention deleted the old native log (the divided offset is no longer known)
            # or the first DLedger data files: a member like this cannot be told apart.
            return StoreIdentity(UNKNOWN, UNKNOWN, 0)
        return StoreIdentity(0, 0, 0)
    last = old_segments.find(dl.divided_offset - 1)
    if last is None or not last.pin():
        return StoreIdentity(dl.divided_offset, UNKNOWN, 0)
    try:
        at, prev = 0, -1
        while at + _HEAD.size <= last.size:
            size, magic = _HEAD.unpack(last.read(at, _HEAD.size))
            if magic != M.MESSAGE_MAGIC_CODE or size <= 0 or at + size > last.size:
                break  # the sealing blank (or the end of the written data)
            prev, at = at, at + size
        crc = zlib.crc32(last.read(prev, at - prev)) if prev >= 0 else 0
        return StoreIdentity(dl.divided_offset, last.start_offset + at, crc)
    except SegmentGoneError:
        return StoreIdentity(dl.divided_offset, UNKNOWN, 0)
    finally:
        last.unpin()


class IdentityCheck:
    """Answers peers' DLEDGER_STORE_IDENTITY and waits until a quorum agrees with us."""

    def __init__(
        self,
        group: str,
        self_id: str,
        peers: Mapping[str, str],
        identity: StoreIdentity,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.clock = clock
        self.group = group
        self.self_id = self_id
        self.peers = {p: a for p, a in peers.items() if p != self_id}
        self.identity = identity
        self.needed = (len(self.peers) + 1) // 2  # a quorum of all members, less ourselves

    async def process(self, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
        try:
            asked = StoreIdentityHeader.decode(cmd)
        except MissingField as exc:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"malformed store identity: {exc}")
        if asked.group != self.group:
            return cmd.response(
                ResponseCode.SYSTEM_ERROR, f"{self.self_id} is in group {self.group}, not {asked.group}"
            )
        theirs = StoreIdentity.of(asked)
        if not theirs.agrees(self.identity):
            log.error(
                "DLedger %s: member %s holds %s, this member %s; neither counts the other towards the quorum "
                "it needs to start",
                self.self_id,
                asked.self_id,
                theirs.describe(),
                self.identity.describe(),
            )
        return cmd.response(ResponseCode.SUCCESS, ext_fields=self.identity.header(self.self_id).ext())

    async def wait_for_quorum(self, client: RemotingClient, *, poll_s: float = 0.2, log_every_s: float = 10.0) -> None:
        """Return once enough peers agree; ConfigError once too many differ for that."""
        agree: set[str] = set()
        differ: dict[str, str] = {}
        last_log = self.clock.monotonic()
        while len(agree) < self.needed:
            for peer, addr in self.peers.items():
                if peer in agree or peer in differ:
                    continue
                verdict = await self._ask(client, peer, addr)
                if verdict is None:
                    continue
                if verdict == "":
                    agree.add(peer)
                else:
                    differ[peer] = verdict
                    log.error("DLedger %s: %s", self.self_id, verdict)
            if len(self.peers) - len(differ) < self.needed:
                raise ConfigError(
                    f"DLedger {self.self_id}: its store does not match enough members of group {self.group} "
                    f"to form a quorum ({'; '.join(differ.values())}). Every member must start from the same "
                    f"commit log: stop the group and copy one member's store to the others (docs/dledger.md, "
                    f"'Moving a master-slave group to DLedger')"
                )
            if len(agree) >= self.needed:
                break
            now = self.clock.monotonic()
            if now - last_log >= log_every_s:
                last_log = now
                log.warning(
                    "DLedger %s: waiting for %d more member(s) to compare stores with (agreeing: %s)",
                    self.self_id,
                    self.needed - len(agree),
                    ", ".join(sorted(agree)) or "none yet",
                )
            await asyncio.sleep(poll_s)
        log.info("DLedger %s: store matches %s (%s)", self.self_id, ", ".join(sorted(agree)), self.identity.describe())

    async def _ask(self, client: RemotingClient, peer: str, addr: str) -> str | None:
        """ "" when ``peer`` agrees, why not when it differs, None when it did not answer."""
        ext = self.identity.header(self.self_id, self.group).ext()
        try:
            resp = await client.invoke(addr, RemotingCommand.request(RequestCode.DLEDGER_STORE_IDENTITY, ext), 1.0)
        except Exception:
            return None
        if resp.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED:
            log.warning(
                "DLedger %s: %s does not report its store (an older version?); counted as agreeing", self.self_id, peer
            )
            return ""
        if resp.code == ResponseCode.SYSTEM_BUSY:
            return None  # still starting: ask again
        if resp.code != ResponseCode.SUCCESS:
            return f"{peer} refused the store comparison: {resp.remark}"
        try:
            theirs = StoreIdentity.of(StoreIdentityHeader.from_ext(resp.ext_fields))
        except MissingField as exc:
            return f"{peer} answered a malformed store identity: {exc}"
        if theirs.agrees(self.identity):
            return ""
        mine = self.identity.describe()
        return f"member {peer} holds {theirs.describe()}, but this member ({self.self_id}) holds {mine}"
