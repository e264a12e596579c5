"""Java String.hashCode (docs/formats.md §4.4): the consume-queue tag code and the index key hash."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ledgermq.protocol.javahash import java_string_hash, java_utf8_hash, python_string_hash
from tests.protocol.golden import ref_java_hash

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("TagA", 2598919),  # the example of docs/formats.md §4.4
        ("", 0),
        ("a", 97),
        ("Aa", 2112),  # the classic collision pair
        ("BB", 2112),
        ("hello", 99162322),
        ("polygenelubricants", INT32_MIN),  # hashes to Integer.MIN_VALUE
        ("é", 0xE9),
        ("中", 0x4E2D),
        ("\U0001f600", 31 * 0xD83D + 0xDE00),  # one code point, two UTF-16 units
        ("\ud800", 0xD800),  # a lone surrogate is one unit, as in a Java String
    ],
)
def test_known_values(text: str, expected: int) -> None:
    assert java_string_hash(text) == expected
    assert ref_java_hash(text) == expected


def test_non_bmp_counts_as_two_units() -> None:
    emoji = "\U0001f600"
    as_pair = "\ud83d\ude00"  # the same two code units spelled as surrogates
    assert java_string_hash(emoji) == java_string_hash(as_pair) == 1772899
    assert java_string_hash("x" + emoji) == 31 * 31 * ord("x") + 1772899
    assert java_string_hash(emoji) != ord(emoji)  # not hashed as one code point


def test_result_is_signed_32_bit() -> None:
    # 31**5 * ord("z") already exceeds 2**31, so these wrap; a long string stays in range.
    for text in ("zzzzzz", "zzzzzzzzzzzzzzzzzzzzzz", "z" * 5000, "\uffff" * 700):
        h = java_string_hash(text)
        assert INT32_MIN <= h <= INT32_MAX
        assert h == ref_java_hash(text)
    assert java_string_hash("zzzzzz") == -685785664  # (122 * (31**6 - 1) / 30) mod 2**32, read as signed
    assert java_string_hash("polygenelubricants") == INT32_MIN


@pytest.mark.parametrize("n", [1, 2, 255, 256, 511, 512, 513, 700, 1024, 1025, 4000])
def test_lengths_around_internal_thresholds(n: int) -> None:
    for text in (
        "k" * n,
        ("é" * n)[:n],
        ("a\U0001f600" * n)[:n],
        "".join(chr(0x20 + i % 90) for i in range(n)),
    ):
        assert java_string_hash(text) == ref_java_hash(text)


ANY_CHAR = st.characters(blacklist_categories=())  # include surrogates: Java strings can hold them


@settings(max_examples=400, derandomize=True, deadline=None)
@given(text=st.one_of(st.text(max_size=40), st.text(ANY_CHAR, max_size=40), st.text(max_size=1200)))
def test_matches_reference(text: str) -> None:
    h = java_string_hash(text)
    assert h == ref_java_hash(text)
    assert INT32_MIN <= h <= INT32_MAX


@settings(max_examples=100, derandomize=True, deadline=None)
@given(a=st.text(ANY_CHAR, max_size=20), b=st.text(ANY_CHAR, max_size=20))
def test_concatenation_law(a: str, b: str) -> None:
    """hash(a + b) == hash(a) * 31**len16(b) + hash(b)  (mod 2**32): the defining recurrence."""
    units_b = len(b.encode("utf-16-be", "surrogatepass")) // 2
    expected = (java_string_hash(a) * pow(31, units_b, 2**32) + java_string_hash(b)) % 2**32
    assert java_string_hash(a + b) % 2**32 == expected


def test_every_code_unit_alone_and_after_another() -> None:
    """Each UTF-16 unit is summed through its two bytes' base-31 digits: every byte value
    in both places, alone and with a weight."""
    for u in range(0x10000):
        c = chr(u)
        assert java_string_hash(c) == u
        assert java_string_hash(c + "\x7f") % 2**32 == (31 * u + 0x7F) % 2**32


@settings(max_examples=300, derandomize=True)
@given(data=st.one_of(st.binary(max_size=600), st.text(max_size=600).map(lambda t: t.encode("utf-8", "surrogatepass"))))
def test_utf8_hash_is_the_hash_of_the_decoded_text(data: bytes) -> None:
    """An index key taken straight from a record's bytes (store/record_scan.py) hashes as
    the text the properties parse would have read: undecodable bytes as U+FFFD."""
    assert java_utf8_hash(data) == java_string_hash(data.decode("utf-8", "replace"))


@settings(max_examples=300, derandomize=True, deadline=None)
@given(text=st.one_of(st.text(ANY_CHAR, max_size=40), st.text(max_size=1200)))
def test_the_python_hash_agrees_with_the_one_in_use(text: str) -> None:
    """Where the C hash is built, ``java_string_hash`` is it; the Python one (used without
    a C compiler, and in `make test`'s pure-Python pass) must give the same numbers."""
    assert python_string_hash(text) == java_string_hash(text) == ref_java_hash(text)
