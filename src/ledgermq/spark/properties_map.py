"""The ``properties`` map column and single-property lookups, built from property strings.

A record's properties are one ``key\x01value\x02...`` string. ``Properties`` splits a
whole column of them with Arrow kernels into the map column of the source's schema and
answers TAGS / KEYS / UNIQ_KEY lookups from the same split, so no Python dict is made per
message. It is separate from ``columnar`` because it only sees strings, not records.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from ledgermq.spark.arrow_kernels import i32, offsets_buffer, quad_pattern, ramp

if TYPE_CHECKING:
    import pyarrow as pa

_PROP_SEP: Final = "\x02"


def utf8_text(chunks: pa.Array) -> pa.Array:
    """Property bytes as strings: a validating cast, or per-row replacement when invalid."""
    import pyarrow as pa

    try:
        return chunks.cast(pa.string())
    except pa.ArrowInvalid:  # not UTF-8: replace bad bytes as decode_records does
        return pa.array([c.decode("utf-8", "replace") for c in chunks.to_pylist()], pa.string())


class Properties:
    """A column of property strings (``key\\x01value\\x02...``) split into a map column, with
    lookups of single properties. Segments without a key or a value are skipped, as RocketMQ's
    decoder skips them; of a repeated key the first is looked up."""

    def __init__(self, text: pa.Array) -> None:
        import pyarrow as pa
        import pyarrow.compute as pc

        self.rows = len(text)
        lists = pc.split_pattern(text, _PROP_SEP)
        segments = lists.flatten()
        offsets = lists.offsets
        parent = pc.list_parent_indices(lists)
        # key = segment[:sep], value = segment[sep + 1:]; a segment needs both, non-empty
        sep = pc.find_substring(segments, "\x01")
        keep = pc.and_(pc.greater(sep, i32(0)), pc.less(sep, pc.subtract(pc.binary_length(segments), i32(1))))
        starts = _segment_offsets(segments)
        ends = starts.slice(1)
        starts = starts.slice(0, len(segments))
        if keep.false_count:
            starts, ends, sep, parent = starts.filter(keep), ends.filter(keep), sep.filter(keep), parent.filter(keep)
            offsets = _kept_offsets(keep, offsets)
        m = len(starts)
        quads = quad_pattern(m)
        key_end = pc.add(starts, sep.cast(pa.int32()))
        bounds = pc.take(
            pa.concat_arrays([starts, key_end, pc.add(key_end, i32(1)), ends]), quads.quad, boundscheck=False
        )
        bounds = pa.concat_arrays([bounds, ends.slice(m - 1)]) if m else pa.array([0], pa.int32())
        data = segments.buffers()[2]
        pieces = pa.Array.from_buffers(pa.string(), len(bounds) - 1, [None, offsets_buffer(bounds), data])
        keys = pc.take(pieces, quads.first)
        values = pc.take(pieces, quads.third)
        self.keys: pa.Array = keys
        self.values: pa.Array = values
        self.parent: pa.Array = parent
        self.map: pa.Array = pa.MapArray.from_arrays(offsets, keys, values)

    def lookup(self, name: str) -> pa.Array:
        """The value of property ``name`` per row, null where a row lacks it."""
        import pyarrow as pa
        import pyarrow.compute as pc

        mask = pc.equal(self.keys, pa.scalar(name, pa.string()))
        rows = self.parent.filter(mask)
        values = self.values.filter(mask)
        n = self.rows
        if len(rows) == 0:
            return pa.nulls(n, pa.string())
        if len(rows) == n and (n == 1 or pc.all(pc.greater(rows[1:], rows[:-1])).as_py()):
            return values  # every row has it once: already in row order
        return pc.take(values, pc.index_in(ramp(n).cast(rows.type), value_set=rows))


def _segment_offsets(segments: pa.Array) -> pa.Array:
    """The offsets of a string array (``len + 1`` of them) as an int32 array."""
    import pyarrow as pa

    buf = _offsets_buffer_of(segments)
    return pa.Array.from_buffers(pa.int32(), len(segments) + 1, [None, buf])


def _offsets_buffer_of(arr: pa.Array) -> pa.Buffer:
    """The ``len + 1`` int32 offsets of a (possibly sliced) string array as a buffer."""
    buf = arr.buffers()[1]
    assert buf is not None
    return buf.slice(arr.offset * 4, (len(arr) + 1) * 4)


def _kept_offsets(keep: pa.Array, offsets: pa.Array) -> pa.Array:
    """List offsets after dropping the elements ``keep`` is false for."""
    import pyarrow as pa
    import pyarrow.compute as pc

    kept_before = pc.cumulative_sum(pc.cast(keep, pa.int32()))
    kept_before = pa.concat_arrays([pa.array([0], pa.int32()), kept_before.cast(pa.int32())])
    return pc.take(kept_before, offsets)
