"""The compiled parts of the broker, and whether this process uses them.

ledgermq runs from pure Python; where a C extension is built (``pip install`` compiles
src/ledgermq/_recordc.c when a C compiler is there) the hot per-message paths use it: the
records of sends and batches (store/encoding.py), request headers
(protocol/header_codec.py), Java's string hash (protocol/javahash.py), a replica's
read of stored records for its dispatch (store/record_scan.py), a client's decode of
pulled records (protocol/message.py, src/ledgermq/_record_decode.c), the index file's puts
(store/index_batch.py, src/ledgermq/_index_put.c).
``LEDGERMQ_PURE_PYTHON=1`` in the environment turns them off (the tests run both ways;
a suspected difference between the two is checked by running with it set).
"""

from __future__ import annotations

import os
from types import ModuleType


def _load() -> ModuleType | None:
    if os.environ.get("LEDGERMQ_PURE_PYTHON", "") not in ("", "0"):
        return None
    try:
        from ledgermq import _recordc
    except ImportError:
        return None
    return _recordc


recordc: ModuleType | None = _load()
"""``ledgermq._recordc`` when it is built and not turned off, else None."""


def describe() -> str:
    """Which record path this process runs, for the broker's start-up line."""
    return "compiled record path" if recordc is not None else "pure Python"
