"""Server-side filtering during pulls: by consume-queue tag code, then optionally by record
(or only by the record's properties, for property filters)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Protocol

from ledgermq.protocol.message import body_end, properties_after_body
from ledgermq.protocol.properties import decode_properties
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


class PropertyFilter:
    """Selects by a record's properties (SQL92 subscriptions): every consume-queue entry
    passes the tag stage, then the store reads only the record's properties section and
    asks ``predicate``; the body of a message that does not match is never read."""

    def __init__(self, predicate: Callable[[Mapping[str, str]], bool]) -> None:
        self.predicate = predicate

    def matches_tags_code(self, tags_code: int) -> bool:
        return True

    def matches_properties(self, properties_text: str) -> bool:
        return self.predicate(decode_properties(properties_text))

    def matches_record(self, record: bytes) -> bool:
        """For callers holding a whole record (the store's fast path uses ``matches_properties``)."""
        return self.matches_properties(properties_after_body(memoryview(record)[body_end(record) :]))
