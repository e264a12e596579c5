"""Reading request header fields (extFields) the way both RocketMQ clients send them.

Every value arrives as a string (Java) or a JSON number/string that the codec already
turned into a string (C++). Booleans: Java sends "true"/"false", C++ sends "1"/"0".
A missing or malformed required field raises MissingField, which processors turn into a
SYSTEM_ERROR answer naming the field.
"""

from __future__ import annotations

from ledgermq.errors import ProtocolError
from ledgermq.protocol.command import RemotingCommand


class MissingField(ProtocolError):
    """A required request header field is absent or malformed."""


def field(cmd: RemotingCommand, name: str) -> str:
    value = cmd.ext_fields.get(name)
    if value is None:
        raise MissingField(f"the request header lacks {name!r}")
    return value


def opt_field(cmd: RemotingCommand, name: str, default: str | None = None) -> str | None:
    return cmd.ext_fields.get(name, default)


def int_field(cmd: RemotingCommand, name: str, default: int | None = None) -> int:
    value = cmd.ext_fields.get(name)
    if value is None or value == "" or value == "null":
        if default is not None:
            return default
        raise MissingField(f"the request header lacks {name!r}")
    try:
        return int(value)
    except ValueError:
        try:
            as_float = float(value)
        except ValueError:
            raise MissingField(f"header field {name!r} is not an integer: {value!r}") from None
        if as_float != int(as_float):
            raise MissingField(f"header field {name!r} is not an integer: {value!r}") from None
        return int(as_float)


def bool_field(cmd: RemotingCommand, name: str, default: bool = False) -> bool:
    value = cmd.ext_fields.get(name)
    if value is None:
        return default
    return value.strip().lower() in ("true", "1")
