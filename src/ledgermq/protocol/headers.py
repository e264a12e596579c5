"""Reading request header fields (extFields) the way both RocketMQ clients send them.

Every value arrives as a string (Java) or a JSON number/string that the codec already
turned into a string (C++). Numbers are read as Java reads them: decimal integers only
(no "1.0", "nan" or "1e3"), within the field's Java type (int or long); a required field
that is absent, empty or "null" is an error, as Java's @CFNotNull checks and unboxing
make it. Booleans: Java sends "true"/"false", C++ sends "1"/"0".
A bad field raises MissingField, which processors turn into a SYSTEM_ERROR naming it.

Processors do not call these helpers: they decode a typed header once (protocol/header_codec.py
and protocol/headers_*.py), whose generated decoders fall back on ``parse_int`` here for
anything but plain digits, so the rules live in one place.
"""

from __future__ import annotations

import re
from typing import Any

from ledgermq.errors import ProtocolError
from ledgermq.protocol.command import RemotingCommand

_INTEGER = re.compile(r"[+-]?\d+")
INT32 = 32
INT64 = 64


class MissingField(ProtocolError):
    """A required request header field is absent or malformed."""


def field(cmd: RemotingCommand, name: str) -> str:
    value = cmd.ext_fields.get(name)
    if value is None:
        raise MissingField(f"the request header lacks {name!r}")
    return value


def opt_field(cmd: RemotingCommand, name: str, default: str | None = None) -> str | None:
    return cmd.ext_fields.get(name, default)


def int_field(cmd: RemotingCommand, name: str, default: int | None = None, *, bits: int = INT64) -> int:
    """A Java int (``bits=32``) or long field; ``default`` makes it optional."""
    value: int = parse_int(cmd.ext_fields.get(name), name, _REQUIRED if default is None else default, bits)
    return value


class _RequiredMarker:
    pass


_REQUIRED = _RequiredMarker()


def parse_int(value: str | None, name: str, absent: object, bits: int) -> Any:
    """``value`` read as a Java int/long; ``absent`` is the answer for a missing value, or a
    non-int/None marker object for a required field. The one place these rules live (the
    typed headers in protocol/header_codec.py call it off their fast path)."""
    if value is None or value.strip() in ("", "null"):
        if absent is None or isinstance(absent, int):
            return absent
        raise MissingField(f"the request header lacks {name!r}")
    text = value.strip()
    if not _INTEGER.fullmatch(text):
        raise MissingField(f"header field {name!r} is not an integer: {value!r}")
    number = int(text)
    limit = 1 << (bits - 1)
    if not -limit <= number < limit:
        raise MissingField(f"header field {name!r} is out of range for a {bits}-bit integer: {value!r}")
    return number


def bool_field(cmd: RemotingCommand, name: str, default: bool = False) -> bool:
    value = cmd.ext_fields.get(name)
    if value is None:
        return default
    return value.strip().lower() in ("true", "1")
