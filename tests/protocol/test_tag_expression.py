"""Tag expressions read as RocketMQ 4.9.7's ``FilterAPI.buildSubscriptionData`` reads them.

The expected values follow that method: null, "" and exactly "*" subscribe to everything;
anything else is ``subString.split("\\|\\|")`` (Java drops trailing empty parts, and an
all-empty split is "subString split error"), each part ``String.trim``-ed (characters up
to U+0020 only), non-empty parts added to a HashSet (duplicates once) with their
``String.hashCode`` in ``codeSet``; ``subString`` stays as written. The broker matches
everything only for subString "*" (``ExpressionMessageFilter.isMatchedByConsumeQueue``),
else by code; the client re-checks by tag only when ``tagsSet`` is not empty.
"""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ledgermq.protocol.javahash import java_string_hash
from ledgermq.protocol.tag_expression import (
    SUB_ALL,
    TagExpressionError,
    check_subscribable,
    parse_tag_expression,
)

# (expression, tags RocketMQ builds, whether the broker matches every message)
JAVA_CASES = [
    (None, (), True),
    ("", (), True),
    ("*", (), True),
    ("TagA", ("TagA",), False),
    ("TagA || TagB", ("TagA", "TagB"), False),
    ("TagA||TagB", ("TagA", "TagB"), False),
    ("  TagA  ||\tTagB\n", ("TagA", "TagB"), False),  # trimmed, text kept
    ("TagA || TagA || TagB || TagA", ("TagA", "TagB"), False),  # duplicates once
    ("TagA ||", ("TagA",), False),  # a trailing separator: Java's split drops the empty part
    ("|| TagA", ("TagA",), False),  # a leading one: an empty part, skipped
    ("TagA |||| TagB", ("TagA", "TagB"), False),
    ("TagA ||| TagB", ("TagA", "| TagB"), False),  # split left to right: the third bar stays
    ("TagA | TagB", ("TagA | TagB",), False),  # one bar is part of the tag
    (" * ", ("*",), False),  # not exactly "*": the tag "*"
    ("TagA || *", ("TagA", "*"), False),
    (" ", (), False),  # no tag, not "*": the broker matches nothing
    ("|| ", (), False),
    ("\x01TagA\x1f", ("TagA",), False),  # String.trim drops every char <= U+0020
    ("\u3000TagA\u3000", ("\u3000TagA\u3000",), False),  # but not other Unicode spaces
    ("标签 || tag", ("标签", "tag"), False),
]


@pytest.mark.parametrize(("expression", "tags", "all_"), JAVA_CASES)
def test_rocketmqs_reading(expression: str | None, tags: tuple[str, ...], all_: bool) -> None:
    parsed = parse_tag_expression(expression)
    assert parsed.tags == tags
    assert parsed.codes == frozenset(java_string_hash(t) for t in tags)
    assert parsed.matches_all is all_
    assert parsed.text == (SUB_ALL if all_ else expression)


@pytest.mark.parametrize("expression", ["||", "||||", "||||||"])
def test_separators_only_is_refused_as_java_refuses_it(expression: str) -> None:
    with pytest.raises(TagExpressionError, match="split error"):
        parse_tag_expression(expression)


def test_what_the_broker_and_the_client_match() -> None:
    a, b = java_string_hash("TagA"), java_string_hash("TagB")
    either = parse_tag_expression("TagA || TagB")
    assert either.matches_code(a) and either.matches_code(b) and not either.matches_code(java_string_hash("TagC"))
    assert either.matches_tag("TagA") and not either.matches_tag("TagC") and not either.matches_tag(None)
    everything = parse_tag_expression("*")
    assert everything.matches_code(12345) and everything.matches_tag(None)
    blank = parse_tag_expression(" ")
    assert not blank.matches_code(0) and not blank.matches_code(a)  # the broker: nothing
    assert blank.matches_tag("TagA")  # the client: no tags, no re-check


@pytest.mark.parametrize(
    ("expression", "problem"),
    [(" ", "names no tag"), ("|| ", "names no tag"), (" * ", "whole expression"), ("TagA || *", "whole expression")],
)
def test_a_client_refuses_what_would_select_other_than_meant(expression: str, problem: str) -> None:
    with pytest.raises(TagExpressionError, match=problem):
        check_subscribable(expression)


@pytest.mark.parametrize("expression", [None, "", "*", "TagA", " TagA || TagB ", "TagA ||"])
def test_a_client_accepts_what_means_what_it_says(expression: str | None) -> None:
    assert check_subscribable(expression) == parse_tag_expression(expression)


# -- against a model of Java's split and trim, on many expressions -----------------------------
_JAVA_TRIM = re.compile(r"^[\x00-\x20]+|[\x00-\x20]+$")


def java_model(expression: str) -> tuple[str, ...] | None:
    """FilterAPI.buildSubscriptionData's tag list (insertion order), None when Java throws;
    written from the Java method, independently of the module under test."""
    parts = re.split(r"\|\|", expression)
    while parts and parts[-1] == "":
        parts.pop()
    if not parts:
        return None
    seen: list[str] = []
    for part in parts:
        tag = _JAVA_TRIM.sub("", part)
        if tag and tag not in seen:
            seen.append(tag)
    return tuple(seen)


_PIECES = st.sampled_from(["a", "B", "tag", "*", " ", "\t", "|", "||", "\x00", "\u3000", "é"])


@given(st.lists(_PIECES, max_size=12).map("".join))
def test_matches_the_java_model(expression: str) -> None:
    if expression in ("", "*"):
        assert parse_tag_expression(expression).matches_all
        return
    expected = java_model(expression)
    if expected is None:
        with pytest.raises(TagExpressionError):
            parse_tag_expression(expression)
        return
    parsed = parse_tag_expression(expression)
    assert parsed.tags == expected
    assert parsed.text == expression and not parsed.matches_all
