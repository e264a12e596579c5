"""The half messages of an exactly-once write, kept compact (pure).

A task returns the halves it stored in its commit message to the driver, and the driver
writes the chosen ones into a commit record on the broker; a batch of a million rows is a
million halves, so they travel as parallel arrays (about 30 bytes a half before
compression) rather than one object each. Each half carries what END_TRANSACTION needs
(broker group, commit-log offset, half-queue offset, transaction id) and where its message
goes when committed (topic and queue), which is where a recovering driver looks to see
whether the commit already happened.
"""

from __future__ import annotations

import json
import struct
import zlib
from array import array
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from ledgermq.client import HalfMessage, SendResult

_HEADER = struct.Struct(">I")


class HalfSetError(ValueError):
    """A commit record body that does not decode (damaged, or written by another version)."""


@dataclass(slots=True)
class HalfSet:
    """Halves in send order. ``targets`` names the (broker, topic, queueId) triples,
    ``target`` holds one index into it per half."""

    targets: list[tuple[str, str, int]] = field(default_factory=list)
    target: array[int] = field(default_factory=lambda: array("I"))
    commit_log_offsets: array[int] = field(default_factory=lambda: array("q"))
    queue_offsets: array[int] = field(default_factory=lambda: array("q"))
    msg_ids: list[str] = field(default_factory=list)
    _index: dict[tuple[str, str, int], int] = field(default_factory=dict, repr=False, compare=False)

    def __len__(self) -> int:
        return len(self.msg_ids)

    def __getstate__(self) -> dict[str, object]:  # slots + a cache: pickle the data only
        return {
            "targets": self.targets,
            "target": self.target,
            "cl": self.commit_log_offsets,
            "qo": self.queue_offsets,
            "ids": self.msg_ids,
        }

    def __setstate__(self, state: dict[str, object]) -> None:
        self.targets = state["targets"]  # type: ignore[assignment]
        self.target = state["target"]  # type: ignore[assignment]
        self.commit_log_offsets = state["cl"]  # type: ignore[assignment]
        self.queue_offsets = state["qo"]  # type: ignore[assignment]
        self.msg_ids = state["ids"]  # type: ignore[assignment]
        self._index = {t: i for i, t in enumerate(self.targets)}

    def add(
        self, broker: str, topic: str, queue_id: int, commit_log_offset: int, queue_offset: int, msg_id: str
    ) -> None:
        key = (broker, topic, queue_id)
        index = self._index.get(key)
        if index is None:
            index = self._index[key] = len(self.targets)
            self.targets.append(key)
        self.target.append(index)
        self.commit_log_offsets.append(commit_log_offset)
        self.queue_offsets.append(queue_offset)
        self.msg_ids.append(msg_id)

    def add_sent(self, sent: SendResult) -> None:
        half = HalfMessage.of(sent)
        q = sent.queue
        self.add(q.broker_name, q.topic, q.queue_id, half.commit_log_offset, half.queue_offset, half.msg_id)

    def extend(self, other: HalfSet) -> None:
        for i in range(len(other)):
            broker, topic, qid = other.targets[other.target[i]]
            self.add(broker, topic, qid, other.commit_log_offsets[i], other.queue_offsets[i], other.msg_ids[i])

    @classmethod
    def concat(cls, sets: Iterable[HalfSet]) -> HalfSet:
        out = cls()
        for s in sets:
            out.extend(s)
        return out

    def half(self, i: int) -> HalfMessage:
        return HalfMessage(
            self.targets[self.target[i]][0], self.commit_log_offsets[i], self.queue_offsets[i], self.msg_ids[i]
        )

    def halves(self) -> Iterator[HalfMessage]:
        return (self.half(i) for i in range(len(self)))

    def select(self, keep: Iterable[int]) -> HalfSet:
        out = HalfSet()
        for i in keep:
            broker, topic, qid = self.targets[self.target[i]]
            out.add(broker, topic, qid, self.commit_log_offsets[i], self.queue_offsets[i], self.msg_ids[i])
        return out

    def parts(self, size: int) -> list[HalfSet]:
        """Consecutive pieces of at most ``size`` halves (a commit record message has a size limit)."""
        return [self.select(range(i, min(i + size, len(self)))) for i in range(0, len(self), size)] or [HalfSet()]

    # -- bytes (a commit record's body) ----------------------------------------------------
    def encode(self, header: dict[str, object]) -> bytes:
        """``header`` (JSON) and the halves, zlib-compressed."""
        meta = dict(header, targets=self.targets, n=len(self))
        head = json.dumps(meta, separators=(",", ":")).encode()
        ids = "\n".join(self.msg_ids).encode()
        raw = b"".join(
            (
                _HEADER.pack(len(head)),
                head,
                self.target.tobytes(),
                self.commit_log_offsets.tobytes(),
                self.queue_offsets.tobytes(),
                ids,
            )
        )
        return zlib.compress(raw, 6)

    @classmethod
    def decode(cls, body: bytes) -> tuple[HalfSet, dict[str, object]]:
        """The halves and the header ``encode`` wrote; ``HalfSetError`` when it does not decode."""
        try:
            raw = zlib.decompress(body)
            (head_len,) = _HEADER.unpack_from(raw)
            meta = json.loads(raw[4 : 4 + head_len])
            n = int(meta["n"])
            out = cls()
            out.targets = [(str(b), str(t), int(q)) for b, t, q in meta["targets"]]
            out._index = {t: i for i, t in enumerate(out.targets)}
            pos = 4 + head_len
            for arr in (out.target, out.commit_log_offsets, out.queue_offsets):
                width = arr.itemsize
                arr.frombytes(raw[pos : pos + n * width])
                pos += n * width
            out.msg_ids = raw[pos:].decode().split("\n") if n else []
        except (zlib.error, struct.error, ValueError, KeyError, TypeError) as exc:
            raise HalfSetError(f"a commit record body does not decode: {exc}") from None
        if not (len(out.target) == len(out.commit_log_offsets) == len(out.queue_offsets) == len(out.msg_ids) == n):
            raise HalfSetError(f"a commit record body is truncated ({n} halves announced)")
        if any(t >= len(out.targets) for t in out.target):
            raise HalfSetError("a commit record body names a target it does not list")
        return out, meta
