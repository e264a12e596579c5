"""Server-side filtering during pulls: by consume-queue tag code, then optionally by record
(or only by the record's properties, for property filters)."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Protocol

from ledgermq.protocol.javahash import tag_hash
from ledgermq.protocol.message import record_properties_text
from ledgermq.protocol.properties import decode_properties, get_property
from ledgermq.protocol.tag_expression import TagExpression, parse_tag_expression


class MessageFilter(Protocol):
    def matches_tags_code(self, tags_code: int) -> bool: ...

    def matches_record(self, record: bytes) -> bool: ...


class TagFilter:
    """By consume-queue tag code: the tags of a parsed expression (None: every message; an
    empty set: none, as RocketMQ's broker answers a text that names no tag).

    Hash collisions let a few foreign tags through; clients re-filter by tag string, as
    with RocketMQ's own broker.
    """

    def __init__(self, tags: Iterable[str] | None) -> None:
        self.codes: frozenset[int] | None = None if tags is None else frozenset(map(tag_hash, tags))

    @classmethod
    def by_codes(cls, codes: frozenset[int] | None) -> TagFilter:
        """From tag codes already computed (a subscription's ``codeSet``; None: every message)."""
        made = cls(None)
        made.codes = codes
        return made

    @classmethod
    def of(cls, expression: TagExpression) -> TagFilter:
        return cls.by_codes(None if expression.matches_all else expression.codes)

    @classmethod
    def parse(cls, expression: str | None) -> TagFilter:
        """From a subscription expression such as ``TagA || TagB`` or ``*``
        (``protocol/tag_expression.py`` reads it; TagExpressionError if RocketMQ refuses it)."""
        return cls.of(parse_tag_expression(expression))

    def matches_tags_code(self, tags_code: int) -> bool:
        return self.codes is None or tags_code in self.codes

    def matches_record(self, record: bytes) -> bool:
        return True


class PropertyFilter:
    """Selects by a record's properties (SQL92 subscriptions): every consume-queue entry
    passes the tag stage, then the store reads only the record's properties section and
    asks ``predicate``; the body of a message that does not match is never read, nor
    anything of it when ``verdict`` already knows the answer.

    With ``names`` (the properties the expression reads), only those are looked up in the
    properties text instead of splitting all of it into a dict."""

    def __init__(
        self,
        predicate: Callable[[Mapping[str, str]], bool],
        names: Collection[str] | None = None,
        verdict: Callable[[int, int], bool | None] | None = None,
    ) -> None:
        self.predicate = predicate
        self.names = tuple(names) if names is not None else None
        # verdict(queue_offset, commit_log_offset): an answer computed earlier (at dispatch),
        # or None when unknown; a known answer spares reading the record at all.
        self.verdict = verdict

    def matches_tags_code(self, tags_code: int) -> bool:
        return True

    def matches_properties(self, properties_text: str) -> bool:
        if self.names is None:
            return self.predicate(decode_properties(properties_text))
        found = {}
        for name in self.names:
            value = get_property(properties_text, name)
            if value is not None:
                found[name] = value
        return self.predicate(found)

    def matches_record(self, record: bytes) -> bool:
        """For callers holding a whole record (the store's fast path uses ``matches_properties``)."""
        return self.matches_properties(record_properties_text(record))
