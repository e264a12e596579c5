"""Server-side filtering during pulls: by consume-queue tag code, then optionally by record."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from ledgermq.util.javahash import java_string_hash


class MessageFilter(Protocol):
    def matches_tags_code(self, tags_code: int) -> bool: ...

    def matches_record(self, record: bytes) -> bool: ...


class TagFilter:
    """``*`` (or no tags) matches everything; otherwise the tag hash must be in the set.

    Hash collisions let a few foreign tags through; clients re-filter by tag string, as
    with RocketMQ's own broker.
    """

    def __init__(self, tags: Iterable[str] | None) -> None:
        tag_list = [t.strip() for t in tags or () if t.strip()]
        self.codes: frozenset[int] | None = (
            None if not tag_list or "*" in tag_list else frozenset(map(java_string_hash, tag_list))
        )

    @classmethod
    def parse(cls, expression: str | None) -> TagFilter:
        """From a subscription expression such as ``TagA || TagB`` or ``*``."""
        return cls((expression or "*").split("||"))

    def matches_tags_code(self, tags_code: int) -> bool:
        return self.codes is None or tags_code in self.codes

    def matches_record(self, record: bytes) -> bool:
        return True
