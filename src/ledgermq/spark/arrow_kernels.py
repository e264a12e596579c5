"""Arrow building blocks of the vectorised decoder (``columnar``): index patterns and helpers.

The vectorised path does all its per-record work in Arrow kernels, mostly ``take`` with
index arrays that depend only on the number of records in a pull. Those arrays are built
here once per size and cached (a reader pulls the same sizes over and over), together with
the small helpers that wrap buffers as arrays without copying. ``properties_map`` reuses
the same patterns to split property strings. Nothing here knows about records beyond the
header fields it gathers (``FIELDS``), whose places are the client's record layout.
"""

from __future__ import annotations

import array
from typing import TYPE_CHECKING, Final

from ledgermq.client.records import V4_BODY_POS, V4_FIELDS

if TYPE_CHECKING:
    import pyarrow as pa

# The header fields the vectorised path gathers, as (column, RocketMQ field), in an order
# that puts the 8-byte fields first so every slice of the gathered buffer stays aligned.
# Numbers are gathered byte-reversed (little-endian); the store host is kept as stored.
GATHERED: Final = (
    ("qoff", "queueOffset"),
    ("phys", "physicalOffset"),
    ("born", "bornTimestamp"),
    ("store", "storeTimestamp"),
    ("host", "storeHost"),
    ("magic", "magicCode"),
    ("sysflag", "sysFlag"),
    ("recon", "reconsumeTimes"),
    ("blen", "bodyLength"),
)
FIELDS: Final = tuple((column, *V4_FIELDS[name]) for column, name in GATHERED)
"""(column, offset in the record, width) of each gathered field."""


class Heads:
    """Index arrays for the header gather of a pull of ``n`` records."""

    __slots__ = ("even", "gather", "half", "head_step", "ramp")

    def __init__(self, n: int) -> None:
        import pyarrow as pa
        import pyarrow.compute as pc

        two = ramp(2 * n)
        self.half = pc.shift_right(two, i32(1))  # 0 0 1 1 2 2 ...
        self.head_step = pc.multiply(pc.bit_wise_and(two, i32(1)), i32(V4_BODY_POS))  # 0 88 0 88 ...
        self.even = pc.shift_left(ramp(n), i32(1))
        self.ramp = ramp(n).cast(pa.int64())
        parts = []
        for name, at, width in FIELDS:
            k = ramp(width * n)
            shift = i32(width.bit_length() - 1)
            row = pc.multiply(pc.shift_right(k, shift), i32(V4_BODY_POS))
            byte = pc.bit_wise_and(k, i32(width - 1))
            # numbers byte-reversed (little-endian), the host as stored
            at_byte = pc.add(byte, i32(at)) if name == "host" else pc.subtract(i32(at + width - 1), byte)
            parts.append(pc.add(row, at_byte))
        self.gather = pa.concat_arrays(parts)


class Quads:
    """``quad`` turns ``[a0 a1 ... b0 b1 ... c0 ... d0 ...]`` into ``[a0 b0 c0 d0 a1 ...]``;
    ``first`` and ``third`` pick elements 0 and 2 of every four."""

    __slots__ = ("first", "quad", "third")

    def __init__(self, n: int) -> None:
        import pyarrow.compute as pc

        four = ramp(4 * n)
        self.quad = pc.add(pc.multiply(pc.bit_wise_and(four, i32(3)), i32(n)), pc.shift_right(four, i32(2)))
        self.first = pc.shift_left(ramp(n), i32(2))
        self.third = pc.add(self.first, i32(2))


_HEADS: dict[int, Heads] = {}
_QUADS: dict[int, Quads] = {}
_RAMP: list[pa.Array] = []


def head_pattern(n: int) -> Heads:
    """The header-gather indexes for ``n`` records, from a small LRU cache (a reader
    pulls the same sizes again and again; building them costs more than using them)."""
    found = _HEADS.pop(n, None) or Heads(n)
    _HEADS[n] = found  # most recently used last
    if len(_HEADS) > 8:
        del _HEADS[next(iter(_HEADS))]
    return found


def quad_pattern(n: int) -> Quads:
    """The interleaving indexes for ``n`` groups of four, from a small LRU cache."""
    found = _QUADS.pop(n, None) or Quads(n)
    _QUADS[n] = found
    if len(_QUADS) > 8:
        del _QUADS[next(iter(_QUADS))]
    return found


def ramp(n: int) -> pa.Array:
    """0, 1, ..., n - 1 as int32 (a slice of one cached array)."""
    import pyarrow as pa

    if not _RAMP or len(_RAMP[0]) < n:
        size = max(n, 2 * len(_RAMP[0]) if _RAMP else 1 << 16)
        _RAMP[:] = [pa.Array.from_buffers(pa.int32(), size, [None, pa.py_buffer(array.array("i", range(size)))])]
    return _RAMP[0].slice(0, n)


# Scalars handed to compute functions are typed: a bare Python int, str or bool is converted
# through type inference, which tries to import dateutil every time (when it is not installed,
# tens of microseconds per call).
def i32(value: int) -> pa.Scalar:
    import pyarrow as pa

    return pa.scalar(value, pa.int32())


def min_max(values: pa.Array) -> tuple[int, int]:
    """(min, max) of a non-empty integer array."""
    import pyarrow.compute as pc

    both = pc.min_max(values)
    return both["min"].as_py(), both["max"].as_py()


def true_scalar() -> pa.Scalar:
    """A typed True for ``pc.index`` (see ``i32`` on why scalars are typed)."""
    import pyarrow as pa

    return pa.scalar(True, pa.bool_())


def header_columns(fields: pa.Buffer, n: int) -> dict[str, pa.Array]:
    """The gathered header bytes as one array per field (zero-copy slices of ``fields``)."""
    import pyarrow as pa

    kinds = {8: pa.int64(), 4: pa.int32()}
    out = {}
    at = 0
    for name, _, width in FIELDS:
        kind = pa.binary(8) if name == "host" else kinds[width]
        out[name] = pa.Array.from_buffers(kind, n, [None, fields.slice(at, width * n)])
        at += width * n
    return out


def binary_over(offsets: pa.Array, data: pa.Buffer) -> pa.Array:
    """A binary array over ``data`` whose elements lie between consecutive ``offsets``."""
    import pyarrow as pa

    return pa.Array.from_buffers(pa.binary(), len(offsets) - 1, [None, offsets_buffer(offsets), data])


def offsets_buffer(offsets: pa.Array) -> pa.Buffer:
    """The int32 values of ``offsets`` as a buffer, honouring a slice's offset (no copy)."""
    buf = offsets.buffers()[1]
    assert buf is not None
    return buf.slice(offsets.offset * 4, len(offsets) * 4)


def values_buffer(arr: pa.Array) -> pa.Buffer:
    """The value bytes of a binary array that ``take`` made (offsets from 0)."""
    buf = arr.buffers()[2]
    assert buf is not None
    return buf
