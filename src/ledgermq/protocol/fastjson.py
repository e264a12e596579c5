"""JSON as RocketMQ's Java side writes it (fastjson), read and written from Python.

fastjson writes ``Map<Integer|Long, ...>`` keys unquoted (``{0:"addr"}``, ``{1:12}``),
which is not JSON. ``loads`` accepts that (and standard JSON) by quoting bare integer
keys before parsing; ``dumps`` always writes standard JSON, which every RocketMQ client
accepts (fastjson turns "0" back into a Long; the C++ client uses atoi).
"""

from __future__ import annotations

import re
from typing import Any

import orjson

from ledgermq.errors import RemoteProtocolError

# A string literal (possessive, and allowed to run to the end unterminated, so malformed
# input is scanned in linear time), or a bare integer key after '{' or ','.
_TOKENS = re.compile(rb'"(?:\\.|[^"\\])*+(?:"|\\?\Z)|([{,]\s*)(-?\d+)(\s*:)')


def _quote_keys(raw: bytes) -> bytes:
    def fix(m: re.Match[bytes]) -> bytes:
        if m.group(2) is None:
            return m.group(0)  # a string literal: leave it alone
        return m.group(1) + b'"' + m.group(2) + b'"' + m.group(3)

    return _TOKENS.sub(fix, raw)


def loads(raw: bytes | str) -> Any:
    data = raw.encode() if isinstance(raw, str) else bytes(raw)
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        pass
    try:
        return orjson.loads(_quote_keys(data))
    except orjson.JSONDecodeError as exc:
        raise RemoteProtocolError(f"body is not JSON: {exc}") from exc


def dumps(value: Any) -> bytes:
    return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS | orjson.OPT_SORT_KEYS)


def dumps_pretty(value: Any) -> bytes:
    """For files under config/ (RocketMQ writes them pretty-printed)."""
    return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS | orjson.OPT_SORT_KEYS | orjson.OPT_INDENT_2)
