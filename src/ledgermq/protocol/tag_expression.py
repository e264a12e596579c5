"""Tag subscription expressions (``"*"``, ``"TagA || TagB"``): the one parser every part uses.

The meaning is RocketMQ's ``FilterAPI.buildSubscriptionData`` (4.9), because a broker and a
client that disagree on it deliver different messages for the same subscription:

* absent, empty or exactly ``"*"`` selects every message (the text becomes ``"*"``);
* anything else is split on ``"||"`` (Java's ``split``: trailing empty parts dropped; an
  expression that is nothing but separators, such as ``"||"``, is refused), each part is
  trimmed as Java's ``String.trim`` trims (characters up to U+0020), and the non-empty
  parts are the tags, each once. The text is kept as written.

Two consequences look odd but are RocketMQ's, and a broker must answer as RocketMQ's does:
``" * "`` selects the tag ``*`` only (it is not exactly ``"*"``), and a text with no tag
in it (``" "``, ``"|| "``) selects nothing on the broker. Clients refuse both before they
subscribe (``check_subscribable``), so only a foreign client can send them.

The broker filters by tag hash code (Java's ``String.hashCode``, the consume-queue tag
code); the client checks the tag text again, since two tags may share a code.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from ledgermq.errors import ProtocolError
from ledgermq.protocol.javahash import tag_hash

__all__ = ["SUB_ALL", "TagExpression", "TagExpressionError", "check_subscribable", "parse_tag_expression"]

SUB_ALL = "*"
_SEPARATOR = "||"
_JAVA_TRIMMED = "".join(chr(c) for c in range(0x21))  # String.trim: every char <= U+0020


class TagExpressionError(ProtocolError):
    """A tag expression RocketMQ refuses to build a subscription from."""


@dataclass(frozen=True, slots=True)
class TagExpression:
    """A parsed tag expression: ``text`` is the subscription string as it travels (the
    heartbeat's ``subString``), ``tags`` its distinct tags in the order written, ``codes``
    their hash codes (``codeSet``)."""

    text: str
    tags: tuple[str, ...]
    codes: frozenset[int]

    @property
    def matches_all(self) -> bool:
        """Every message is selected (the broker's ``subString.equals("*")``)."""
        return self.text == SUB_ALL

    def matches_code(self, tags_code: int) -> bool:
        """The broker's consume-queue check (``ExpressionMessageFilter.isMatchedByConsumeQueue``)."""
        return self.matches_all or tags_code in self.codes

    def matches_tag(self, tag: str | None) -> bool:
        """The client's re-check of what a broker sent (``PullAPIWrapper.processPullResult``):
        without tags it keeps everything, else only messages whose tag is one of them."""
        if not self.tags:
            return True
        return tag is not None and tag in self.tags


ALL = TagExpression(SUB_ALL, (), frozenset())


@lru_cache(maxsize=1024)
def parse_tag_expression(expression: str | None) -> TagExpression:
    """RocketMQ's reading of a tag expression; TagExpressionError for one it refuses.

    Cached: every pull answer is checked against its expression, and there are few."""
    if not expression or expression == SUB_ALL:
        return ALL
    parts = expression.split(_SEPARATOR)
    while parts and not parts[-1]:
        parts.pop()  # Java's String.split drops trailing empty strings
    if not parts:
        raise TagExpressionError(f"subString split error: the tag expression {expression!r} names no tag")
    tags = tuple(dict.fromkeys(t for part in parts if (t := part.strip(_JAVA_TRIMMED))))
    return TagExpression(expression, tags, frozenset(tag_hash(t) for t in tags))


def check_subscribable(expression: str | None) -> TagExpression:
    """A client's own subscription: RocketMQ's parse, refusing also what would silently
    select something other than the user meant: a text with no tag in it (the broker would
    deliver nothing) and ``*`` among other text (it would select only the tag ``*``)."""
    parsed = parse_tag_expression(expression)
    if parsed.matches_all:
        return parsed
    if not parsed.tags:
        raise TagExpressionError(f"the tag expression {expression!r} names no tag; use '*' for every message")
    if SUB_ALL in parsed.tags:
        raise TagExpressionError(
            f"the tag expression {expression!r} uses '*' beside other text; '*' must be the whole expression"
        )
    return parsed
