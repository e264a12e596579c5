"""What the read-path record check costs a pull: ``python -m tests.store.read_check_cost``.

Pulls of 32 messages of 1 KiB from one queue (adjacent records, one commit-log read per
pull), 300 pulls (9,600 messages) per round, best of 7 rounds, three variants alternating
in the same process: no check, the check as first written (a function call per record,
four struct unpacks, the body sliced out for its CRC), and the current one (inlined in the
run's loop, one unpack for an IPv4 record's header, bodies over 2 KiB read through a
memoryview). Prints microseconds per message. Not a test: numbers, not verdicts.
"""

from __future__ import annotations

import struct
import tempfile
import time
import zlib
from collections.abc import Callable
from pathlib import Path

from ledgermq.protocol import message as M
from ledgermq.protocol import sysflag as SF
from ledgermq.store import reads
from ledgermq.store.message_input import MessageInput
from ledgermq.store.message_store import MessageStore, open_message_store
from ledgermq.store.record_check import stored_run_problem
from ledgermq.store.results import GetStatus
from tests.conftest import small_config

MESSAGES = 9600
BATCH = 32
ROUNDS = 7
_CORE = struct.Struct(">iiiiiqqi")
_INT = struct.Struct(">i")
_SHORT = struct.Struct(">h")


def _first_record_problem(buf: bytes, pos: int, size: int, offset: int) -> str | None:
    """The check as first written (commit c545013, record_check.py): the body is sliced out
    of the bytes for its CRC."""
    if size < M.record_length(0, 1, 0) or pos + size > len(buf):
        return "out of bounds"
    total, magic, crc, _qid, _flag, _qoff, phys, sysflag = _CORE.unpack_from(buf, pos)
    if magic != M.MESSAGE_MAGIC_CODE or total != size or phys != offset:
        return "header"
    p = pos + M.BORNHOST_POS + (20 if sysflag & SF.BORNHOST_V6 else 8) + 8
    p += (20 if sysflag & SF.STOREHOST_V6 else 8) + 4 + 8
    body_len = _INT.unpack_from(buf, p)[0]
    p += 4
    end = pos + size
    if body_len < 0 or p + body_len + 3 > end:
        return "body length"
    if zlib.crc32(buf[p : p + body_len]) & 0x7FFFFFFF != crc:
        return "crc"
    p += body_len
    p += 1 + buf[p]
    if p + 2 > end or p + 2 + _SHORT.unpack_from(buf, p)[0] != end:
        return "fields"
    return None


def _first_run_problem(run: bytes, offset: int) -> str | None:
    pos = 0
    while pos < len(run):
        size = _INT.unpack_from(run, pos)[0]
        problem = _first_record_problem(run, pos, size, offset + pos)
        if problem is not None:
            return problem
        pos += size
    return None


def _round(store: MessageStore) -> float:
    began = time.perf_counter()
    offset = 0
    while offset < MESSAGES:
        got = store.get_message("Cost", 0, offset, BATCH)
        assert got.status is GetStatus.FOUND and got.message_count == BATCH, got.status
        offset = got.next_begin_offset
    return (time.perf_counter() - began) / MESSAGES * 1e6


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        store = open_message_store(small_config(Path(tmp), mapped_file_size_commitlog=64 << 20))
        store.start()
        try:
            for seq in range(MESSAGES):
                body = struct.pack(">q", seq) + bytes(1016)
                assert store.put_message(MessageInput(topic="Cost", body=body, queue_id=0)).ok
            assert store.wait_dispatched()
            variants: dict[str, Callable[[bytes, int], str | None]] = {
                "no check": lambda run, offset: None,
                "body sliced (before)": _first_run_problem,
                "inlined (now)": stored_run_problem,
            }
            best = dict.fromkeys(variants, float("inf"))
            for _ in range(ROUNDS):
                for name, check in variants.items():
                    reads.stored_run_problem = check  # type: ignore[assignment]
                    best[name] = min(best[name], _round(store))
            reads.stored_run_problem = stored_run_problem
        finally:
            store.shutdown()
    for name, us in best.items():
        print(f"{name:22s} {us:6.2f} us/message  ({us * BATCH:6.1f} us per pull of {BATCH})")


if __name__ == "__main__":
    main()
