"""Java's ``String.hashCode`` in Python.

RocketMQ puts it on disk twice: as the consume-queue tag code and as the index-file key
hash, so a store written by Java and read by us (or the reverse) must agree bit for bit.
Java hashes UTF-16 code units (characters outside the BMP count as two):
``h = sum(u[i] * 31**(n-1-i)) mod 2**32``, read as a signed int. Evaluating that sum with
precomputed powers and ``map`` keeps the per-character work in C, which matters because
every indexed key of every message is hashed (ASCII text, the usual case, sums in floats,
which is exact there and cheaper).
"""

from __future__ import annotations

import sys
from array import array
from functools import lru_cache
from operator import mul

_MASK = 0xFFFFFFFF
_MAX_FAST = 512
# _POWERS[k] = 31**(_MAX_FAST-1-k) mod 2**32, so the last n entries weight an n-unit string.
_POWERS = [pow(31, _MAX_FAST - 1 - k, 1 << 32) for k in range(_MAX_FAST)]
_UTF16_NATIVE = "utf-16-le" if sys.byteorder == "little" else "utf-16-be"


def _code_units(text: str) -> bytes | array[int]:
    if text.isascii():
        return text.encode("ascii")
    return array("H", text.encode(_UTF16_NATIVE, "surrogatepass"))


def _ascii_weights(n: int) -> tuple[float, ...]:
    """The weights of an ``n``-character ASCII string as floats. Exact: a code unit below
    2**7 times a weight below 2**32, summed over at most ``_MAX_FAST`` units, stays below
    2**48, within a double's 53-bit mantissa, and float products and sums cost less than
    big-int ones."""
    weights = _ASCII_WEIGHTS[n]
    if weights is None:
        weights = _ASCII_WEIGHTS[n] = tuple(float(w) for w in _POWERS[_MAX_FAST - n :])
    return weights


_ASCII_WEIGHTS: list[tuple[float, ...] | None] = [None] * (_MAX_FAST + 1)  # by length, built on first use


def java_string_hash(text: str) -> int:
    """Signed 32-bit ``String.hashCode`` of ``text``."""
    n = len(text)
    if n <= _MAX_FAST and text.isascii():
        h = int(sum(map(mul, text.encode("ascii"), _ascii_weights(n)))) & _MASK
    else:
        units = _code_units(text)
        n = len(units)
        if n <= _MAX_FAST:
            h = int(sum(map(mul, units, _POWERS[_MAX_FAST - n :]))) & _MASK
        else:
            h = 0
            for u in units:
                h = (31 * h + u) & _MASK
    return h - (1 << 32) if h >= 1 << 31 else h


def java_hash_concat(prefix_hash: int, suffix: str) -> int:
    """``java_string_hash(prefix + suffix)`` from ``java_string_hash(prefix)``: the hash
    of a concatenation is h(prefix) * 31**len(suffix) + h(suffix) mod 2**32, the length
    counted in UTF-16 code units. Index keys are ``topic#key``: the topic part is hashed
    once per topic, not once per message."""
    n = len(suffix) if suffix.isascii() else len(_code_units(suffix))
    weight = _POWERS[_MAX_FAST - 1 - n] if n < _MAX_FAST else pow(31, n, 1 << 32)
    h = ((prefix_hash & _MASK) * weight + (java_string_hash(suffix) & _MASK)) & _MASK
    return h - (1 << 32) if h >= 1 << 31 else h


@lru_cache(maxsize=1024)
def tag_hash(tag: str) -> int:
    """``java_string_hash`` for tags, which repeat endlessly; index keys are unique and go uncached."""
    return java_string_hash(tag)
