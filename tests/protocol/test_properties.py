"""The 0x01/0x02 property string (docs/formats.md §4.3, MessageDecoder.string2messageProperties)."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ledgermq.protocol.properties import (
    NAME_VALUE_SEPARATOR,
    PROPERTY_SEPARATOR,
    decode_properties,
    encode_properties,
    get_property,
)
from tests.protocol.golden import ref_string2properties

JAVA_FORM = "TAGS\x01TagA\x02KEYS\x01k1 k2\x02WAIT\x01true\x02UNIQ_KEY\x01AC1100010F2A"
C_FORM = "TAGS\x01TagA\x02KEYS\x01k1 k2\x02WAIT\x01true\x02UNIQ_KEY\x01AC1100010F2A\x02"
EXPECTED = {"TAGS": "TagA", "KEYS": "k1 k2", "WAIT": "true", "UNIQ_KEY": "AC1100010F2A"}


def test_separators() -> None:
    assert (NAME_VALUE_SEPARATOR, PROPERTY_SEPARATOR) == ("\x01", "\x02")


def test_java_and_cpp_forms_decode_the_same() -> None:
    assert decode_properties(JAVA_FORM) == EXPECTED
    assert decode_properties(C_FORM) == EXPECTED


def test_encode_is_java_form() -> None:
    assert encode_properties(EXPECTED) == JAVA_FORM
    assert not encode_properties(EXPECTED).endswith("\x02")
    assert encode_properties({}) == ""
    assert encode_properties({"A": "1"}) == "A\x011"


def test_encode_skips_none_values_and_empty_keys() -> None:
    assert encode_properties({"A": "1", "B": None, "": "x", "C": "3"}) == "A\x011\x02C\x013"  # type: ignore[dict-item]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", {}),
        ("\x02", {}),
        ("\x02\x02\x02", {}),
        ("A\x01b", {"A": "b"}),  # the minimum: 3 characters
        ("A\x01", {}),  # empty value
        ("\x01b", {}),  # empty key
        ("\x01\x01", {}),  # empty key, value "\x01"
        ("ab", {}),  # too short, no separator
        ("abc", {}),  # no separator at all
        ("\x02A\x01b\x02", {"A": "b"}),  # leading and trailing separators
        ("A\x01b\x02\x02\x02C\x01d", {"A": "b", "C": "d"}),  # empty segments between pairs
        ("x\x02A\x01b\x02yz\x02K\x01\x02\x01v\x02C\x01d", {"A": "b", "C": "d"}),
        ("K\x01a\x01b", {"K": "a\x01b"}),  # value runs to the next 0x02 and may hold 0x01
        ("K\x01\x01", {"K": "\x01"}),
        ("A\x01old\x02A\x01new", {"A": "new"}),  # a later pair replaces an earlier one (HashMap.put)
        ("A\x01old\x02A\x01", {"A": "old"}),  # ...but an empty later value is skipped, not stored
        ("键\x01值\x02😀\x01🎉", {"键": "值", "😀": "🎉"}),
        ("😀\x01", {}),  # 3 UTF-16 units in Java but the value is empty
    ],
)
def test_decode_table(text: str, expected: dict[str, str]) -> None:
    assert decode_properties(text) == expected
    assert ref_string2properties(text) == expected  # keeps the reference honest too


PROP_CHARS = st.sampled_from(["\x01", "\x02", "A", "K", "v", "é", "😀", " "])


@settings(max_examples=400, derandomize=True, deadline=None)
@given(text=st.one_of(st.text(PROP_CHARS, max_size=40), st.text(max_size=40)))
def test_decode_matches_reference_on_any_text(text: str) -> None:
    assert decode_properties(text) == ref_string2properties(text)
    assert decode_properties(text) == decode_properties(text + "\x02")  # the C form of the same text


KEY = st.text(st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)), min_size=1, max_size=8)
VALUE = st.text(st.characters(blacklist_characters="\x02", blacklist_categories=("Cs",)), min_size=1, max_size=12)


@settings(max_examples=200, derandomize=True, deadline=None)
@given(props=st.dictionaries(KEY, VALUE, max_size=8))
def test_encode_decode_round_trip(props: dict[str, str]) -> None:
    text = encode_properties(props)
    assert decode_properties(text) == props
    assert decode_properties(text + "\x02") == props  # C appends 0x02 after every pair
    c_form = "".join(f"{k}\x01{v}\x02" for k, v in props.items())
    assert decode_properties(c_form) == props


# --------------------------------------------------------------------------- get_property


def test_get_property_basic() -> None:
    for text in (JAVA_FORM, C_FORM):
        for key, value in EXPECTED.items():
            assert get_property(text, key) == value
        assert get_property(text, "DELAY") is None
    assert get_property("", "TAGS") is None


def test_get_property_matches_only_at_pair_starts() -> None:
    text = "AKEYS\x01x\x02KEYS\x01y\x02XKEYS\x01z"
    assert get_property(text, "KEYS") == "y"
    assert get_property(text, "AKEYS") == "x"
    assert get_property(text, "XKEYS") == "z"
    assert get_property(text, "EYS") is None
    assert get_property("AKEYS\x01x", "KEYS") is None
    assert get_property("KEYS\x01x", "AKEYS") is None
    assert get_property("KEYSX\x01x", "KEYS") is None  # a longer key is not a match


def test_get_property_ignores_keys_inside_values() -> None:
    text = "X\x01KEYS\x01inner\x02TAGS\x01t"
    assert decode_properties(text) == {"X": "KEYS\x01inner", "TAGS": "t"}
    assert get_property(text, "KEYS") is None
    assert get_property(text, "X") == "KEYS\x01inner"
    assert get_property("A\x01TAGS\x01\x01x", "TAGS") is None


def test_get_property_empty_value_is_absent() -> None:
    assert get_property("TAGS\x01\x02KEYS\x01k", "TAGS") is None
    assert get_property("TAGS\x01", "TAGS") is None


@settings(max_examples=200, derandomize=True, deadline=None)
@given(
    pairs=st.lists(
        st.tuples(st.sampled_from(["TAGS", "KEYS", "AKEYS", "KEY", "UNIQ_KEY", "DELAY", "A"]), VALUE),
        unique_by=lambda kv: kv[0],
        max_size=6,
    ),
    junk=st.lists(st.text(st.characters(blacklist_characters="\x01\x02"), max_size=5), max_size=3),
    trailing=st.booleans(),
    order=st.randoms(use_true_random=False),
    key=st.sampled_from(["TAGS", "KEYS", "AKEYS", "KEY", "UNIQ_KEY", "DELAY", "A", "EYS", "TAG"]),
)
def test_get_property_agrees_with_decode_for_distinct_keys(
    pairs: list[tuple[str, str]], junk: list[str], trailing: bool, order: random.Random, key: str
) -> None:
    segments = [f"{k}\x01{v}" for k, v in pairs] + junk
    order.shuffle(segments)
    text = "\x02".join(segments) + ("\x02" if trailing else "")
    assert get_property(text, key) == decode_properties(text).get(key)


# The two cases below have a key occurring twice. The broker's dispatch (CommitLog.checkMessageAndReturnSize)
# reads TAGS, KEYS and UNIQ_KEY through string2messageProperties, where the last non-empty pair wins, so the
# fast lookup must give the same answer, or the consume-queue tag code and index keys differ from a Java
# broker's.
# Duplicate keys are legal input: the broker appends the client-supplied batch-level properties (header `i`)
# to every batch entry's own properties (a Java client's batches store WAIT twice this way).


def test_get_property_duplicate_key_last_wins_like_java() -> None:
    text = "TAGS\x01entry\x02WAIT\x01true\x02TAGS\x01batch"
    assert decode_properties(text)["TAGS"] == "batch"
    assert get_property(text, "TAGS") == decode_properties(text)["TAGS"]


def test_get_property_skips_an_empty_first_occurrence_like_java() -> None:
    text = "TAGS\x01\x02TAGS\x01TagA"
    assert decode_properties(text) == {"TAGS": "TagA"}
    assert get_property(text, "TAGS") == "TagA"
