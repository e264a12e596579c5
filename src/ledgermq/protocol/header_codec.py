"""Typed request and response headers: one frozen dataclass per RocketMQ header class.

A request header's fields name their wire key (RocketMQ's Java field name, or SEND_MESSAGE_V2's
one-letter key) and their Java type; ``decode`` reads the extFields once into typed attributes,
so a processor never parses a string. The rules are Java's ``decodeCommandCustomHeader`` as
protocol/headers.py states them: numbers are decimal integers only, within the Java type (int
or long); a required number that is absent, empty or "null" is missing; a required string is
missing only when absent; booleans are "true" (Java) or "1" (C++), any case, anything else false.
A bad field raises MissingField naming it, which the processors' guard answers as SYSTEM_ERROR.

The decoder of each class is generated once, when the class is defined, as straight-line
Python (one dict lookup per field, an inline fast path for plain digits), because a reflective
loop over the fields per request would cost more than the field-by-field reads it replaces on
the produce path. Response headers encode to the string extFields the wire carries, in field
order (the binary header keeps insertion order), dropping None as ``stringify`` does.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Self, TypeVar, dataclass_transform

from ledgermq import speedups
from ledgermq.protocol.command import RemotingCommand
from ledgermq.protocol.headers import INT32, INT64, MissingField, parse_int

_WIRE = "ledgermq.wire"
_TRUE = frozenset(("true", "1"))
_BOOLS = {"true": True, "false": False, "1": True, "0": False}


class Kind(enum.Enum):
    TEXT = "text"
    INT = "int"
    BOOL = "bool"


class _Required:
    """The absent-value marker of a required field (None is a legal default)."""

    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED: Any = _Required()


@dataclasses.dataclass(frozen=True, slots=True)
class Wire:
    """How one attribute travels: its key, its Java type, and what absence means."""

    key: str
    kind: Kind
    bits: int = INT64
    absent: Any = REQUIRED

    @property
    def required(self) -> bool:
        return self.absent is REQUIRED


def _spec(wire: Wire) -> Any:
    return dataclasses.field(metadata={_WIRE: wire})


def text(key: str, *, absent: str | _Required | None = REQUIRED) -> Any:
    """A Java String: required (@CFNotNull) unless ``absent`` gives the value for a missing key."""
    return _spec(Wire(key, Kind.TEXT, absent=absent))


def int32(key: str, *, absent: int | _Required | None = REQUIRED) -> Any:
    """A Java int/Integer; ``absent`` makes it optional."""
    return _spec(Wire(key, Kind.INT, INT32, absent))


def int64(key: str, *, absent: int | _Required | None = REQUIRED) -> Any:
    """A Java long/Long; ``absent`` makes it optional."""
    return _spec(Wire(key, Kind.INT, INT64, absent))


def boolean(key: str, *, absent: bool = False) -> Any:
    """A Java boolean/Boolean; never missing (absent reads as ``absent``)."""
    return _spec(Wire(key, Kind.BOOL, absent=absent))


def wires(cls: type) -> list[tuple[str, Wire]]:
    """(attribute, wire spec) in declaration order."""
    return [(f.name, f.metadata[_WIRE]) for f in dataclasses.fields(cls)]


Decoder = Callable[[Mapping[str, str]], Any]


def build_decoder(cls: type, renames: Mapping[str, str] | None = None) -> Decoder:
    """Straight-line decode of ``cls`` from extFields; ``renames`` maps attribute -> another
    wire key (SEND_MESSAGE_V2's short keys) while errors still name the attribute's own key."""
    renames = renames or {}
    env: dict[str, Any] = {"_MissingField": MissingField, "_parse_int": parse_int, "_TRUE": _TRUE, "_BOOLS": _BOOLS}
    lines = ["def decode(ext):", "    get = ext.get"]
    for i, (attr, wire) in enumerate(wires(cls)):
        env[f"_d{i}"] = wire.absent
        key = renames.get(attr, wire.key)
        lines.append(f"    v = get({key!r})")
        name = repr(wire.key)
        if wire.kind is Kind.TEXT:
            if wire.required:
                lines.append(f"    if v is None: raise _MissingField('the request header lacks ' + {name!r})")
                lines.append(f"    a{i} = v")
            else:
                lines.append(f"    a{i} = _d{i} if v is None else v")
        elif wire.kind is Kind.BOOL:
            # The four spellings clients send are looked up; anything else is read Java's way.
            lines.append(f"    a{i} = _d{i} if v is None else _BOOLS.get(v)")
            lines.append(f"    if a{i} is None: a{i} = v.strip().lower() in _TRUE")
        else:
            # Fewer digits than the type's largest value has: in range, no further check.
            short = 10 if wire.bits == INT32 else 19
            fast = f"int(v) if len(v) < {short} and v.isdecimal() else _parse_int(v, {name}, _d{i}, {wire.bits})"
            if wire.required:
                lines.append(f"    a{i} = _parse_int(v, {name}, _d{i}, {wire.bits}) if v is None else {fast}")
            else:  # absent optional numbers are common (maxReconsumeTimes): no call for them
                lines.append(f"    a{i} = _d{i} if v is None else {fast}")
    lines += _construct(cls, env)
    # The source is built above from the class's own field specs, never from request data.
    exec("\n".join(lines), env)
    decoder: Decoder = env["decode"]
    return _compiled(cls, renames, decoder) or decoder


_KIND_CODES = {Kind.TEXT: 0, Kind.INT: 1, Kind.BOOL: 2}


def _compiled(cls: type, renames: Mapping[str, str], slow: Decoder) -> Decoder | None:
    """The same decoder in C (ledgermq/_recordc.c, ``decode_header``) where it is built: it
    reads what clients send (plain digits, the four boolean spellings) and hands anything
    else to ``slow``, the generated decoder above, whose errors users see."""
    c = speedups.recordc
    if c is None:
        return None
    plan = tuple(
        (
            renames.get(attr, wire.key),
            _KIND_CODES[wire.kind],
            wire.absent,
            vars(cls)[attr],  # the slot's member descriptor
            10 if wire.bits == INT32 else 19,  # as the fast path above: fewer digits, in range
        )
        for attr, wire in wires(cls)
    )
    decoder: Decoder = functools.partial(c.decode_header, cls, plan, slow, REQUIRED)
    return decoder


def _construct(cls: type, env: dict[str, Any]) -> list[str]:
    """Lines building ``cls`` from a0..an. A frozen dataclass's ``__init__`` sets each field
    through ``object.__setattr__``; writing the slots through their descriptors gives the same
    object at half the cost, which matters on the produce path (15 fields per send)."""
    env["_new"], env["_cls"] = object.__new__, cls
    lines = ["    o = _new(_cls)"]
    for i, (attr, _wire) in enumerate(wires(cls)):
        env[f"_s{i}"] = vars(cls)[attr].__set__
        lines.append(f"    _s{i}(o, a{i})")
    return [*lines, "    return o"]


def build_encoder(cls: type) -> Callable[[Any], dict[str, str]]:
    """extFields of a response header: strings, None dropped, booleans as Java prints them."""
    env: dict[str, Any] = {}
    lines = ["def encode(h):", "    out = {}"]
    for attr, wire in wires(cls):
        lines.append(f"    v = h.{attr}")
        if wire.kind is Kind.BOOL:
            lines.append(f"    if v is not None: out[{wire.key!r}] = 'true' if v else 'false'")
        else:
            lines.append(f"    if v is not None: out[{wire.key!r}] = v if v.__class__ is str else str(v)")
    lines.append("    return out")
    # The source is built above from the class's own field specs, never from request data.
    exec("\n".join(lines), env)
    encoder: Callable[[Any], dict[str, str]] = env["encode"]
    return encoder


class RequestHeader:
    """Base of every request header: ``decode`` once at the top of a processor."""

    __slots__ = ()
    _decoder: ClassVar[Decoder]
    _encoder: ClassVar[Callable[[Any], dict[str, str]]]

    @classmethod
    def decode(cls, cmd: RemotingCommand) -> Self:
        result: Self = cls._decoder(cmd.ext_fields)
        return result

    @classmethod
    def from_ext(cls, ext: Mapping[str, str]) -> Self:
        result: Self = cls._decoder(ext)
        return result

    def ext(self) -> dict[str, str]:
        """The extFields of this header, for a request the broker itself sends on."""
        return type(self)._encoder(self)


class ResponseHeader:
    """Base of every response header: ``ext()`` is the extFields dict the wire needs;
    ``decode`` reads an answer's (a client's side), by the same rules as a request's."""

    __slots__ = ()
    _decoder: ClassVar[Decoder]
    _encoder: ClassVar[Callable[[Any], dict[str, str]]]

    @classmethod
    def decode(cls, cmd: RemotingCommand) -> Self:
        result: Self = cls._decoder(cmd.ext_fields)
        return result

    def ext(self) -> dict[str, str]:
        return type(self)._encoder(self)


H = TypeVar("H", bound=type)


@dataclass_transform(frozen_default=True, field_specifiers=(text, int32, int64, boolean))
def request_header(cls: H) -> H:
    """A frozen, slotted request header class with its decoder generated once."""
    made: Any = dataclasses.dataclass(frozen=True, slots=True)(cls)
    made._decoder = staticmethod(build_decoder(made))
    made._encoder = staticmethod(build_encoder(made))
    result: H = made
    return result


@dataclass_transform(frozen_default=True, field_specifiers=(text, int32, int64, boolean))
def response_header(cls: H) -> H:
    """A frozen, slotted response header class with its extFields encoder and decoder generated once."""
    made: Any = dataclasses.dataclass(frozen=True, slots=True)(cls)
    made._decoder = staticmethod(build_decoder(made))
    made._encoder = staticmethod(build_encoder(made))
    result: H = made
    return result
