"""The Java value types a RocketMQ SQL92 filter computes with, and Java's conversions.

RocketMQ's evaluator (ActiveMQ's, trimmed) works on ``Integer``, ``Long``, ``Double``,
``String`` and ``Boolean`` objects, and which conversion a comparison applies depends on
the Java class of each side: a property compared with ``5`` is read with
``Integer.valueOf``, with ``5000000000`` with ``Long.valueOf``, with ``5.0`` with
``Double.valueOf``. Python has one int type, so the numeric classes are tagged here
(``JInt``, ``JLong``, ``JDouble``), and the parsers below accept exactly the text Java's do
(``int("1_0")``, ``float("inf")`` or surrounding blanks in an integer must not match where
Java would throw).
"""

from __future__ import annotations

import math
import re
import struct
from typing import Final

INT_MIN: Final = -(2**31)
INT_MAX: Final = 2**31 - 1
LONG_MIN: Final = -(2**63)
LONG_MAX: Final = 2**63 - 1
DOUBLE_MIN_VALUE: Final = 5e-324  # Java's Double.MIN_VALUE: the smallest positive double


class JInt(int):
    """A ``java.lang.Integer``."""

    __slots__ = ()


class JLong(int):
    """A ``java.lang.Long``."""

    __slots__ = ()


class JDouble(float):
    """A ``java.lang.Double``."""

    __slots__ = ()


JNumber = JInt | JLong | JDouble
Value = JInt | JLong | JDouble | str | bool | None
"""What an expression evaluates to: a property is a str (or None when absent)."""


class JavaNumberFormatError(ValueError):
    """Java's NumberFormatException: the text is not a number of the wanted type."""


# Integer.parseInt accepts an optional sign and Character.digit digits (any Unicode Nd).
_INTEGER = re.compile(r"[+-]?\d+")
# FloatingDecimal.readJavaFormatString after String.trim(): ASCII digits only.
_DOUBLE = re.compile(
    r"[+-]?(?:(?P<special>NaN|Infinity)"
    r"|(?P<dec>(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)[fFdD]?"
    r"|(?P<hex>0[xX](?:[0-9a-fA-F]+\.?[0-9a-fA-F]*|\.[0-9a-fA-F]+)[pP][+-]?[0-9]+)[fFdD]?)"
)


def _parse_integer(text: str, low: int, high: int, kind: str) -> int:
    if not _INTEGER.fullmatch(text):
        raise JavaNumberFormatError(f'For input string: "{text}" (not a {kind})')
    value = int(text)
    if not low <= value <= high:
        raise JavaNumberFormatError(f'For input string: "{text}" (out of the {kind} range)')
    return value


def parse_int(text: str) -> JInt:
    """``Integer.valueOf(String)``."""
    return JInt(_parse_integer(text, INT_MIN, INT_MAX, "Integer"))


def parse_long(text: str) -> JLong:
    """``Long.valueOf(String)``."""
    return JLong(_parse_integer(text, LONG_MIN, LONG_MAX, "Long"))


def _java_trim(text: str) -> str:
    """``String.trim``: strips every char <= U+0020 at both ends."""
    start, end = 0, len(text)
    while start < end and text[start] <= " ":
        start += 1
    while end > start and text[end - 1] <= " ":
        end -= 1
    return text[start:end]


def parse_double(text: str) -> JDouble:
    """``Double.valueOf(String)``: blanks trimmed, NaN, Infinity, hex floats, f/d suffixes."""
    trimmed = _java_trim(text)
    m = _DOUBLE.fullmatch(trimmed)
    if m is None:
        raise JavaNumberFormatError(f'For input string: "{text}" (not a Double)')
    negative = trimmed.startswith("-")
    if m.group("special") is not None:
        value = math.nan if m.group("special") == "NaN" else math.inf
    elif m.group("dec") is not None:
        value = float(m.group("dec"))
    else:
        value = float.fromhex(m.group("hex"))
    return JDouble(-value if negative else value)


def parse_boolean(text: str) -> bool:
    """``Boolean.valueOf(String)``: true only for "true" in any case; never fails."""
    return text.lower() == "true" if text.isascii() else False


_BITS = struct.Struct(">q")
_DBL = struct.Struct(">d")


def _double_bits(value: float) -> int:
    """``Double.doubleToLongBits`` (every NaN folded to the canonical one)."""
    if value != value:
        return 0x7FF8000000000000
    return int(_BITS.unpack(_DBL.pack(value))[0])


def compare_doubles(a: float, b: float) -> int:
    """``Double.compare``: NaN above everything and equal to itself, -0.0 below 0.0."""
    if a < b:
        return -1
    if a > b:
        return 1
    bits_a, bits_b = _double_bits(a), _double_bits(b)
    return (bits_a > bits_b) - (bits_a < bits_b)


def java_string(value: Value) -> str:
    """How Java's ``toString`` shows a value in an error message."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, JDouble):
        return java_double_text(float(value))
    return str(value)


def java_double_text(value: float) -> str:
    """``Double.toString`` closely enough for messages (1.0, 1.5E10, NaN, Infinity)."""
    if value != value:
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    if value == int(value) and abs(value) < 1e7:
        return f"{value:.1f}"
    text = repr(value)
    return text.replace("e+", "E").replace("e", "E")
