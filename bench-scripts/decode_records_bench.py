"""Microbenchmark of a client's pull-body decode (not part of the test suite): µs per record
of ``message.decode_records`` in Python and in C (ledgermq/_record_decode.c), for a pull
body of 32 records of 1 KiB with three properties each, as a push consumer drains them.

Run: ``PYTHONPATH=src python bench-scripts/decode_records_bench.py`` (the extension built
in place: ``python setup.py build_ext --inplace``).
"""

from __future__ import annotations

import os
import timeit
import uuid
import zlib

from ledgermq import speedups
from ledgermq.protocol.message import MessageRecord, _decode_records_py, decode_record, encode_record

RECORDS = 32


def pull_body() -> bytes:
    parts = []
    for i in range(RECORDS):
        props = f"TAGS\x01TagA\x02KEYS\x01order-{i}\x02UNIQ_KEY\x01{uuid.uuid4().hex.upper()}"
        rec = encode_record(
            topic="TopicTest",
            body=os.urandom(1024),
            queue_id=3,
            properties=props,
            born_timestamp=1_700_000_000_000 + i,
            born_host=("10.0.0.7", 53124),
            store_host=("10.0.0.2", 10911),
            queue_offset=1000 + i,
            physical_offset=1_000_000 + i * 1300,
            store_timestamp=1_700_000_000_005 + i,
        )
        parts.append(bytes(rec))
    return b"".join(parts)


def per_record_us(fn: object, number: int = 2000, repeat: int = 7) -> float:
    best = min(timeit.repeat(fn, number=number, repeat=repeat))  # type: ignore[arg-type]
    return best / number / RECORDS * 1e6


def main() -> None:
    body = pull_body()
    c = speedups.recordc
    assert c is not None, "build the extension first (python setup.py build_ext --inplace)"
    expected = _decode_records_py(body)
    assert c.decode_records(body, True, True, MessageRecord, decode_record) == expected
    py = per_record_us(lambda: _decode_records_py(body, check_crc=True, inflate=True))
    cc = per_record_us(lambda: c.decode_records(body, True, True, MessageRecord, decode_record))
    cc_nocrc = per_record_us(lambda: c.decode_records(body, False, True, MessageRecord, decode_record))
    fields = _fields(expected)
    ctor = per_record_us(lambda: [MessageRecord(*f) for f in fields])
    print(f"pull body: {RECORDS} records, {len(body)} bytes")
    print(f"Python decode_records:      {py:.2f} us/record")
    print(f"C decode_records:           {cc:.2f} us/record ({py / cc:.1f}x)")
    print(f"C, check_crc=False:         {cc_nocrc:.2f} us/record")
    print(f"MessageRecord(...) alone:   {ctor:.2f} us/record (the dataclass __init__ both pay)")
    crc = per_record_us(lambda: [zlib.crc32(body[:1024]) for _ in range(RECORDS)])
    print(f"zlib.crc32 of a 1 KiB body: {crc:.2f} us (Python's CRC, in its time above)")


def _fields(records: list[MessageRecord]) -> list[tuple[object, ...]]:
    return [tuple(getattr(r, n) for n in MessageRecord.__slots__[:16]) for r in records]


if __name__ == "__main__":
    main()
