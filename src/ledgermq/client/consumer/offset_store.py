"""Consumer offset stores (RocketMQ 4.9.7 ``consumer/store``).

A consumer keeps, per message queue, the offset of the next message to consume. It
updates that number in memory after every consumed batch, and the consumer (not these
classes: they start no tasks) calls ``persist_all`` every 5 s and at shutdown to make it
durable somewhere:

* ``RemoteOffsetStore`` (clustering): on the broker that owns the queue, through
  UPDATE_CONSUMER_OFFSET, so the next owner of the queue after a rebalance continues where
  this one stopped. Reading from the store asks the broker (QUERY_CONSUMER_OFFSET).
* ``LocalFileOffsetStore`` (broadcasting): every consumer reads every queue, so progress
  is private to the process and lives in ``<dir>/<client id>/<group>/offsets.json``.

``read_offset`` keeps Java's answers because ``RebalancePushImpl`` branches on them:
an offset >= 0 is where to start; ``NO_OFFSET`` (-1) means "the group never consumed
here", which sends the consumer to CONSUME_FROM_LAST/FIRST/TIMESTAMP; ``OFFSET_UNREADABLE``
(-2) means "could not ask", and the consumer must not guess (it retries at the next
rebalance instead of jumping to the end of the queue and skipping messages).
"""

from __future__ import annotations

import asyncio
import enum
import logging
import os
import re
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any, Protocol

import orjson

from ledgermq.atomic_file import write_atomic
from ledgermq.client.errors import MQBrokerError, MQClientError
from ledgermq.errors import RemoteProtocolError
from ledgermq.protocol.admin_body import MessageQueue, decode_mq_table, loads_lenient, mq_table
from ledgermq.util.ratelog import limited

__all__ = [
    "LOCAL_OFFSET_STORE_DIR_ENV",
    "NO_OFFSET",
    "OFFSET_UNREADABLE",
    "LocalFileOffsetStore",
    "OffsetBroker",
    "OffsetStore",
    "ReadOffsetType",
    "RemoteOffsetStore",
    "decode_offset_file",
    "default_local_offset_store_dir",
    "encode_offset_file",
]

log = logging.getLogger(__name__)

NO_OFFSET = -1
"""No offset is known (nothing in memory, the broker answered "not found", no file entry)."""
OFFSET_UNREADABLE = -2
"""The broker could not be asked (no route, no connection, timeout): do not guess a start."""

LOCAL_OFFSET_STORE_DIR_ENV = "ROCKETMQ_CLIENT_LOCAL_OFFSET_STORE_DIR"
"""Our name for Java's system property ``rocketmq.client.localOffsetStoreDir``."""


class ReadOffsetType(enum.Enum):
    """Where ``read_offset`` looks (Java ``ReadOffsetType``)."""

    READ_FROM_MEMORY = "READ_FROM_MEMORY"
    READ_FROM_STORE = "READ_FROM_STORE"
    MEMORY_FIRST_THEN_STORE = "MEMORY_FIRST_THEN_STORE"


class OffsetBroker(Protocol):
    """The two broker calls ``RemoteOffsetStore`` needs, addressed by queue.

    The implementation finds the broker of ``mq.broker_name`` (the master, or a slave while
    the master is down), refreshes the route when it knows none, and raises
    ``MQBrokerError`` when the broker answers with an error code and ``MQClientError``
    (e.g. ``MQConnectError``) when it cannot ask at all.
    """

    async def query_consumer_offset(self, mq: MessageQueue, group: str) -> int | None:
        """The group's committed offset on the queue; ``None`` when the broker has none (QUERY_NOT_FOUND)."""
        ...

    async def update_consumer_offset(self, mq: MessageQueue, group: str, offset: int, *, oneway: bool) -> None:
        """Commit ``offset``; ``oneway`` sends without waiting for the answer (what the 5 s persist uses)."""
        ...


class OffsetStore(Protocol):
    """What a consumer needs from either store (Java ``OffsetStore``)."""

    async def load(self) -> None: ...

    def update_offset(self, mq: MessageQueue, offset: int, increase_only: bool) -> None: ...

    async def read_offset(self, mq: MessageQueue, read_type: ReadOffsetType) -> int: ...

    async def persist_all(self, mqs: Collection[MessageQueue]) -> None: ...

    async def persist(self, mq: MessageQueue) -> None: ...

    def remove_offset(self, mq: MessageQueue) -> None: ...

    def clone_offset_table(self, topic: str | None = None) -> dict[MessageQueue, int]: ...

    async def update_consume_offset_to_broker(self, mq: MessageQueue, offset: int, oneway: bool) -> None: ...


class _MemoryOffsets:
    """The in-memory table both stores share, with Java's update rules.

    Every method runs on the event loop thread and never awaits, so each is atomic with
    respect to the consumer's other coroutines; no lock is needed (Java uses AtomicLong
    and compare-and-set because its callers are threads).
    """

    def __init__(self, group: str) -> None:
        self.group = group
        self._table: dict[MessageQueue, int] = {}

    def update_offset(self, mq: MessageQueue, offset: int, increase_only: bool) -> None:
        """Record progress. ``increase_only`` ignores a smaller offset (a late, slower batch
        must not move the offset back); a queue seen for the first time takes any value."""
        current = self._table.get(mq)
        if current is None or not increase_only or offset > current:
            self._table[mq] = offset

    def _memory_offset(self, mq: MessageQueue) -> int | None:
        return self._table.get(mq)

    def clone_offset_table(self, topic: str | None = None) -> dict[MessageQueue, int]:
        """A copy of the table, of one topic or (``topic`` blank or ``None``) of all."""
        if topic is None or not topic.strip():
            return dict(self._table)
        return {mq: offset for mq, offset in self._table.items() if mq.topic == topic}


class RemoteOffsetStore(_MemoryOffsets):
    """Offsets of a clustering consumer, committed to the brokers (Java ``RemoteBrokerOffsetStore``).

    Broker failures never lose the in-memory offsets: a failed commit is logged and the
    same (or a newer) offset is sent again at the next ``persist_all``.
    """

    def __init__(self, broker: OffsetBroker, group: str, *, client_id: str = "") -> None:
        super().__init__(group)
        self.broker = broker
        self.client_id = client_id

    async def load(self) -> None:
        """Nothing to load: the broker is asked queue by queue when a queue is assigned."""

    async def read_offset(self, mq: MessageQueue, read_type: ReadOffsetType) -> int:
        """The offset to start from; see the module docstring for -1 and -2.

        Only "the broker has none" is -1; an error answer or a failure to ask is -2 (unlike
        4.9.7, which reads every error answer as -1). A value read from the broker replaces
        the memory value.
        """
        if read_type is not ReadOffsetType.READ_FROM_STORE:
            offset = self._memory_offset(mq)
            if offset is not None:
                return offset
            if read_type is ReadOffsetType.READ_FROM_MEMORY:
                return NO_OFFSET
        try:
            stored = await self.broker.query_consumer_offset(mq, self.group)
        except MQBrokerError as exc:
            # 4.9.7 reads any error answer as "no offset", so a consumer set to start from the
            # last offset skips the backlog after one SYSTEM_ERROR; like 5.x we call it
            # unreadable instead, and the queue is taken on at a later rebalance.
            # (a group the broker learns from our next heartbeat answers so for a moment)
            limited.persisting(
                log,
                logging.WARNING,
                ("query-offset", self.group, mq.broker_name),
                "group %s: the broker could not answer the offset of %s: %s",
                self.group,
                mq,
                exc,
                grace=30.0,
            )
            return OFFSET_UNREADABLE
        except Exception as exc:
            limited.persisting(
                log,
                logging.WARNING,
                ("query-offset", self.group, mq.broker_name),
                "group %s: could not fetch the consume offset of %s from the broker: %s",
                self.group,
                mq,
                exc,
                grace=30.0,
            )
            return OFFSET_UNREADABLE
        limited.reset(("query-offset", self.group, mq.broker_name))
        if stored is None:
            return NO_OFFSET
        self.update_offset(mq, stored, increase_only=False)
        return stored

    async def persist_all(self, mqs: Collection[MessageQueue]) -> None:
        """Commit the offsets of the queues in ``mqs`` (one by one, oneway) and forget the others.

        ``mqs`` is the set of queues the consumer still processes; an offset of any other
        queue belongs to a queue rebalanced away, and committing it would overwrite the new
        owner's progress. An empty ``mqs`` does nothing (Java): a consumer between
        rebalances with no queue keeps its table untouched. Failures are logged per queue.
        """
        if not mqs:
            return
        keep = set(mqs)
        unused = [mq for mq in self._table if mq not in keep]
        for mq in unused:  # before any await, so a queue re-added meanwhile is not dropped
            del self._table[mq]
            log.info("group %s: removed the offset of unused queue %s", self.group, mq)
        for mq in list(self._table):
            offset = self._table.get(mq)  # the newest value, read after the previous await
            if offset is not None:
                await self._commit(mq, offset, "persist_all")

    async def persist(self, mq: MessageQueue) -> None:
        """Commit one queue's offset (oneway) if memory has one; failures are logged."""
        offset = self._memory_offset(mq)
        if offset is not None:
            await self._commit(mq, offset, "persist")

    async def _commit(self, mq: MessageQueue, offset: int, why: str) -> None:
        try:
            await self.broker.update_consumer_offset(mq, self.group, offset, oneway=True)
        except Exception as exc:
            limited.persisting(
                log,
                logging.WARNING,
                ("commit-offset", self.group, mq.broker_name),
                "[%s] group %s client %s: could not commit offset %d of %s: %s",
                why,
                self.group,
                self.client_id,
                offset,
                mq,
                exc,
            )
        else:
            limited.reset(("commit-offset", self.group, mq.broker_name))
            log.debug("[%s] group %s client %s: committed offset %d of %s", why, self.group, self.client_id, offset, mq)

    def remove_offset(self, mq: MessageQueue) -> None:
        """Forget a queue (rebalanced away, after its final ``persist``)."""
        if self._table.pop(mq, None) is not None:
            log.info("group %s: removed the offset of %s, %d left", self.group, mq, len(self._table))

    async def update_consume_offset_to_broker(self, mq: MessageQueue, offset: int, oneway: bool) -> None:
        """Commit ``offset`` now, raising the broker's error (admin and pull-consumer commits)."""
        await self.broker.update_consumer_offset(mq, self.group, offset, oneway=oneway)


# -- the local file -----------------------------------------------------------------------


def default_local_offset_store_dir() -> Path:
    """``$ROCKETMQ_CLIENT_LOCAL_OFFSET_STORE_DIR``, else ``~/.rocketmq_offsets`` (Java's default)."""
    configured = os.environ.get(LOCAL_OFFSET_STORE_DIR_ENV)
    return Path(configured) if configured else Path.home() / ".rocketmq_offsets"


def encode_offset_file(offsets: Mapping[MessageQueue, int]) -> bytes:
    """An ``OffsetSerializeWrapper`` document as Java's fastjson writes it.

    fastjson writes the ``MessageQueue`` map keys as inline JSON objects::

        {"offsetTable":{{"brokerName":"b","queueId":0,"topic":"T"}:12}}

    (not JSON, but what a Java client reads back; Java pretty-prints it with tabs, which
    changes nothing for either reader). Queues are sorted, so equal tables give equal bytes.
    """
    return orjson.dumps({"offsetTable": mq_table(offsets)})


def decode_offset_file(raw: bytes) -> dict[MessageQueue, int]:
    """Read an ``offsets.json`` written by us or by Java (object, quoted-JSON or plain keys).

    Raises ``RemoteProtocolError`` when the content is not an offset document. A missing
    or ``null`` table is an empty one, as for fastjson.
    """
    doc = loads_lenient(raw)
    if not isinstance(doc, dict):
        raise RemoteProtocolError("an offset file must hold a JSON object")
    table = doc.get("offsetTable")
    if table is None:
        return {}
    out: dict[MessageQueue, int] = {}
    for mq, value in decode_mq_table(table).items():
        out[mq] = _offset_value(mq, value)
    return out


_INTEGER = re.compile(r"\s*-?[0-9]+\s*")


def _offset_value(mq: MessageQueue, value: Any) -> int:
    # fastjson writes AtomicLong as a number and accepts a numeric string on input.
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and _INTEGER.fullmatch(value):
        return int(value)
    raise RemoteProtocolError(f"offset of {mq} is not an integer: {value!r}")


class LocalFileOffsetStore(_MemoryOffsets):
    """Offsets of a broadcasting consumer in a local file (Java ``LocalFileOffsetStore``).

    The file is ``<store_dir>/<client_id>/<group>/offsets.json``. Each write first copies
    the previous content to ``offsets.json.bak`` (Java's layout; Java reads the ``.bak``
    when the main file is missing, empty or unreadable) and then replaces the main file
    atomically (temp file, fsync, rename, directory fsync), so a crash leaves the old or
    the new table, never a torn one. File work runs in a worker thread so the fsyncs
    never stall the event loop; writes are serialised by a lock.
    """

    def __init__(self, client_id: str, group: str, *, store_dir: str | os.PathLike[str] | None = None) -> None:
        super().__init__(group)
        self.client_id = client_id
        root = Path(store_dir) if store_dir is not None else default_local_offset_store_dir()
        self.path = root / client_id / group / "offsets.json"
        self.bak_path = self.path.with_name(self.path.name + ".bak")
        self._write_lock = asyncio.Lock()

    async def load(self) -> None:
        """Put the file's offsets into memory (overwriting equal queues).

        Raises ``MQClientError`` when neither the file nor its ``.bak`` can be read, as Java
        refuses to start a consumer whose saved progress it cannot parse.
        """
        stored = await asyncio.to_thread(self._read_file)
        for mq, offset in stored.items():
            self._table[mq] = offset
            log.info("group %s: loaded offset %d of %s from %s", self.group, offset, mq, self.path)

    async def read_offset(self, mq: MessageQueue, read_type: ReadOffsetType) -> int:
        """The memory offset and/or the one in the file (which then replaces memory's); -1 if none."""
        if read_type is not ReadOffsetType.READ_FROM_STORE:
            offset = self._memory_offset(mq)
            if offset is not None:
                return offset
            if read_type is ReadOffsetType.READ_FROM_MEMORY:
                return NO_OFFSET
        try:
            stored = await asyncio.to_thread(self._read_file)
        except MQClientError as exc:
            limited.log(log, logging.WARNING, ("offset-file", self.group), "group %s: %s", self.group, exc)
            return NO_OFFSET
        offset = stored.get(mq)
        if offset is None:
            return NO_OFFSET
        self.update_offset(mq, offset, increase_only=False)
        return offset

    async def persist_all(self, mqs: Collection[MessageQueue]) -> None:
        """Write the offsets of the queues in ``mqs`` as the whole file (others are left out).

        An empty ``mqs`` writes nothing. An I/O error is logged, not raised (Java), and the
        offsets stay in memory for the next attempt.
        """
        if not mqs:
            return
        keep = set(mqs)
        async with self._write_lock:
            # Snapshot under the lock: a later persist never writes an older table.
            data = encode_offset_file({mq: off for mq, off in self._table.items() if mq in keep})
            try:
                await asyncio.to_thread(self._write_file, data)
            except OSError as exc:
                limited.log(
                    log,
                    logging.ERROR,
                    ("offset-file-write", self.path),
                    "group %s: could not write consumer offsets to %s: %s",
                    self.group,
                    self.path,
                    exc,
                )

    async def persist(self, mq: MessageQueue) -> None:
        """Nothing (Java): a single queue cannot be written without rewriting the whole file,
        which ``persist_all`` does every 5 s and at shutdown."""

    def remove_offset(self, mq: MessageQueue) -> None:
        """Forget a queue in memory; the file loses it at the next ``persist_all``.

        (Java's local store ignores this call; dropping the memory entry changes nothing
        it writes, since ``persist_all`` only writes the queues it is given.)
        """
        self._table.pop(mq, None)

    async def update_consume_offset_to_broker(self, mq: MessageQueue, offset: int, oneway: bool) -> None:
        """Nothing: broadcasting progress never goes to a broker."""

    # -- file work, in a worker thread ---------------------------------------------------

    def _read_file(self) -> dict[MessageQueue, int]:
        """Java ``readLocalOffset``: the main file, else (missing, empty, unreadable) the ``.bak``."""
        raw = self._read_bytes(self.path)
        if raw is not None and raw.strip():
            try:
                return decode_offset_file(raw)
            except RemoteProtocolError as exc:
                log.warning("%s is unreadable (%s); trying %s", self.path, exc, self.bak_path.name)
        raw = self._read_bytes(self.bak_path)
        if raw is None or not raw.strip():
            return {}
        try:
            return decode_offset_file(raw)
        except RemoteProtocolError as exc:
            raise MQClientError(f"consumer offsets in {self.path} and its .bak are unreadable: {exc}") from exc

    @staticmethod
    def _read_bytes(path: Path) -> bytes | None:
        try:
            return path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            log.warning("cannot read local offset file %s: %s", path, exc)
            return None

    def _write_file(self, data: bytes) -> None:
        """Java ``MixAll.string2File``: previous content to ``.bak``, then the new file."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        previous = self._read_bytes(self.path)
        if previous == data:
            return  # unchanged (an idle consumer): spare the fsyncs
        if previous and previous.strip() and self._decodes(previous):
            # Keep the last good table as the fallback; never replace it with a bad one.
            write_atomic(self.bak_path, previous)
        write_atomic(self.path, data)

    @staticmethod
    def _decodes(raw: bytes) -> bool:
        try:
            decode_offset_file(raw)
        except RemoteProtocolError:
            return False
        return True


def offset_store_for(
    *,
    broadcasting: bool,
    broker: OffsetBroker,
    group: str,
    client_ip: str,
    client_id: str,
    instance_name: str,
    store_dir: str | None = None,
) -> OffsetStore:
    """The store a consumer of this message model uses: a local file when broadcasting, the
    broker otherwise. The file is named by the user's instance name, not the instance's
    per-process one: Java keeps DEFAULT for broadcasting consumers, so ``ip@DEFAULT``'s file
    survives a restart."""
    if broadcasting:
        return LocalFileOffsetStore(f"{client_ip}@{instance_name}", group, store_dir=store_dir)
    return RemoteOffsetStore(broker, group, client_id=client_id)
