"""RemotingCommand: the unit every RocketMQ 4.x request and response travels in.

Frame layout (big-endian)::

    0  4  length       = 4 + header length + body length (not counting itself)
    4  4  header word  = serialize type << 24 | header length
    8  n  header       JSON (type 0) or RocketMQ binary (type 1)
    .. m  body         opaque bytes

JSON header keys: ``code``, ``language`` (enum name), ``version``, ``opaque``, ``flag``
(bit 0 response, bit 1 oneway), ``remark`` (omitted when null), ``extFields`` (string to
string). We always write every extFields value as a string and always include the
object, because the C++ client ignores non-string values and dereferences the header
without a null check. Incoming values may be numbers or booleans (the C++ client sends
both); they are turned into strings the way Java's fastjson would.

Binary header: code int16, language int8, version int16, opaque int32, flag int32,
remark (int32 length + UTF-8), extFields (int32 total length, then per entry int16 key
length + key, int32 value length + value).
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from ledgermq import speedups
from ledgermq.errors import RemoteProtocolError
from ledgermq.protocol.codes import (
    CURRENT_VERSION,
    ONEWAY_FLAG,
    RESPONSE_FLAG,
    LanguageCode,
    SerializeType,
)

_LENGTHS = struct.Struct(">ii")
_BIN_FIXED = struct.Struct(">hbhii")
_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")
_LANG_BY_NAME = {lc.name: lc for lc in LanguageCode}


@dataclass(slots=True)
class RemotingCommand:
    code: int
    opaque: int = 0
    flag: int = 0
    language: str = "PYTHON"
    version: int = CURRENT_VERSION
    remark: str | None = None
    ext_fields: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    serialize_type: SerializeType = SerializeType.JSON

    # -- construction ---------------------------------------------------------------
    @classmethod
    def request(
        cls,
        code: int,
        ext_fields: dict[str, Any] | None = None,
        body: bytes = b"",
        *,
        oneway: bool = False,
        opaque: int = 0,
    ) -> RemotingCommand:
        return cls(
            code=int(code),
            opaque=opaque,
            flag=ONEWAY_FLAG if oneway else 0,
            ext_fields=stringify(ext_fields or {}),
            body=body,
        )

    def response(
        self,
        code: int,
        remark: str | None = None,
        ext_fields: dict[str, Any] | None = None,
        body: bytes = b"",
    ) -> RemotingCommand:
        """The answer to this request: same opaque and serialization, response flag set."""
        return RemotingCommand(
            code=int(code),
            opaque=self.opaque,
            flag=RESPONSE_FLAG,
            remark=remark,
            ext_fields=stringify(ext_fields or {}),
            body=body,
            serialize_type=self.serialize_type,
        )

    # -- flags -----------------------------------------------------------------------
    @property
    def is_response(self) -> bool:
        return bool(self.flag & RESPONSE_FLAG)

    @property
    def is_oneway(self) -> bool:
        return bool(self.flag & ONEWAY_FLAG)

    # -- encoding --------------------------------------------------------------------
    def encode(self) -> bytes:
        """The whole frame, length prefix included."""
        header = self._json_header() if self.serialize_type is SerializeType.JSON else self._binary_header()
        length = 4 + len(header) + len(self.body)
        prefix = _LENGTHS.pack(length, (int(self.serialize_type) << 24) | len(header))
        return b"".join((prefix, header, self.body))

    def _json_header(self) -> bytes:
        doc: dict[str, Any] = {
            "code": self.code,
            "extFields": self.ext_fields,
            "flag": self.flag,
            "language": self.language,
            "opaque": self.opaque,
            "serializeTypeCurrentRPC": "JSON",
            "version": self.version,
        }
        if self.remark is not None:
            doc["remark"] = self.remark
        return orjson.dumps(doc, option=orjson.OPT_SORT_KEYS)

    def _binary_header(self) -> bytes:
        lang = _LANG_BY_NAME.get(self.language, LanguageCode.OTHER)
        remark = self.remark.encode() if self.remark is not None else b""
        ext = bytearray()
        for k, v in self.ext_fields.items():
            kb, vb = k.encode(), v.encode()
            ext += _I16.pack(len(kb)) + kb + _I32.pack(len(vb)) + vb
        return b"".join(
            (
                _BIN_FIXED.pack(self.code, lang, self.version, self.opaque, self.flag),
                _I32.pack(len(remark)),
                remark,
                _I32.pack(len(ext)),
                bytes(ext),
            )
        )

    def __repr__(self) -> str:
        kind = "response" if self.is_response else ("oneway" if self.is_oneway else "request")
        return (
            f"RemotingCommand({kind} code={self.code} opaque={self.opaque} remark={self.remark!r} "
            f"ext={self.ext_fields!r} body={len(self.body)}B)"
        )


def stringify(values: dict[str, Any]) -> dict[str, str]:
    """extFields as Java sees them: every value a string, nulls dropped, booleans lower-case."""
    for key, value in values.items():
        if type(value) is not str or type(key) is not str:
            break
    else:  # already strings (typed response headers, our client's headers): a copy will do
        return dict(values)
    out: dict[str, str] = {}
    for k, v in values.items():
        if v is None:
            continue
        if isinstance(v, bool):
            out[str(k)] = "true" if v else "false"
        else:
            out[str(k)] = str(v)
    return out


def python_decode_command(payload: bytes | bytearray | memoryview) -> RemotingCommand:
    """Decode a frame without its 4-byte length prefix; RemoteProtocolError on bad input
    (``decode_command`` is this, or the compiled decoder in front of it)."""
    view = memoryview(payload)
    if len(view) < 4:
        raise RemoteProtocolError("frame shorter than its header-length word")
    word = _I32.unpack_from(view, 0)[0]
    kind = (word >> 24) & 0xFF
    header_len = word & 0xFFFFFF
    if header_len > len(view) - 4:
        raise RemoteProtocolError(f"header length {header_len} exceeds the frame ({len(view) - 4} bytes)")
    header = view[4 : 4 + header_len]
    body = bytes(view[4 + header_len :])
    if kind == SerializeType.JSON:
        cmd = _decode_json_header(bytes(header))
    elif kind == SerializeType.ROCKETMQ:
        cmd = _decode_binary_header(header)
    else:
        raise RemoteProtocolError(f"unknown serialize type {kind}")
    cmd.body = body
    return cmd


def _as_int(doc: dict[str, Any], key: str, default: int = 0) -> int:
    value = doc.get(key, default)
    if type(value) is int:  # the common case first: every request has four of these
        return value
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise RemoteProtocolError(f"header field {key!r} is not an integer: {value!r}")
    try:
        return int(value)
    except ValueError as exc:
        raise RemoteProtocolError(f"header field {key!r} is not an integer: {value!r}") from exc


def _ext_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    if isinstance(value, int | float):
        return str(value)
    return orjson.dumps(value).decode()


def _decode_json_header(raw: bytes) -> RemotingCommand:
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise RemoteProtocolError(f"header is not JSON: {exc}") from exc
    if type(doc) is not dict:
        raise RemoteProtocolError("header JSON is not an object")
    ext = doc.get("extFields") or {}
    if type(ext) is not dict:
        raise RemoteProtocolError("extFields is not an object")
    # JSON object keys are strings; values mostly are (Java, ours), else numbers (C++)
    for value in ext.values():
        if type(value) is not str:
            ext = {k: v if type(v) is str else _ext_value(v) for k, v in ext.items() if v is not None}
            break
    language = doc.get("language", "OTHER")
    if type(language) is not str:
        language = _lang_name(language) if type(language) is int else str(language)
    remark = doc.get("remark")
    code = doc.get("code", 0)
    opaque = doc.get("opaque", 0)
    flag = doc.get("flag", 0)
    version = doc.get("version", 0)
    return RemotingCommand(
        code if type(code) is int else _as_int(doc, "code"),
        opaque if type(opaque) is int else _as_int(doc, "opaque"),
        flag if type(flag) is int else _as_int(doc, "flag"),
        language,
        version if type(version) is int else _as_int(doc, "version"),
        None if remark is None else str(remark),
        ext,
        b"",
        SerializeType.JSON,
    )


def _lang_name(ordinal: int) -> str:
    try:
        return LanguageCode(ordinal).name
    except ValueError:
        return "OTHER"


def _decode_binary_header(view: memoryview) -> RemotingCommand:
    try:
        code, lang, version, opaque, flag = _BIN_FIXED.unpack_from(view, 0)
        pos = _BIN_FIXED.size
        remark_len = _I32.unpack_from(view, pos)[0]
        pos += 4
        if remark_len < 0 or pos + remark_len > len(view):
            raise RemoteProtocolError("binary header: remark overruns the header")
        remark = bytes(view[pos : pos + remark_len]).decode() if remark_len else None
        pos += remark_len
        ext_len = _I32.unpack_from(view, pos)[0]
        pos += 4
        if ext_len < 0 or pos + ext_len > len(view):
            raise RemoteProtocolError("binary header: extFields overrun the header")
        ext: dict[str, str] = {}
        end = pos + ext_len
        while pos < end:
            klen = _I16.unpack_from(view, pos)[0]
            pos += 2
            key = bytes(view[pos : pos + klen]).decode()
            pos += klen
            vlen = _I32.unpack_from(view, pos)[0]
            pos += 4
            if klen < 0 or vlen < 0 or pos + vlen > end:
                raise RemoteProtocolError("binary header: an extFields entry overruns")
            ext[key] = bytes(view[pos : pos + vlen]).decode()
            pos += vlen
    except (struct.error, UnicodeDecodeError) as exc:
        raise RemoteProtocolError(f"binary header does not decode: {exc}") from exc
    return RemotingCommand(
        code=code,
        opaque=opaque,
        flag=flag,
        language=_lang_name(lang),
        version=version,
        remark=remark,
        ext_fields=ext,
        serialize_type=SerializeType.ROCKETMQ,
    )


def _compiled_decode_command() -> Callable[[bytes | bytearray | memoryview], RemotingCommand] | None:
    """The frame decoder in C (ledgermq/_recordc.c, ``decode_frame``) where it is built: a
    JSON header with the usual field types becomes a command there (every request and
    answer costs ~2 µs less); anything else goes to ``python_decode_command``."""
    c = speedups.recordc
    if c is None:
        return None
    names = ("code", "opaque", "flag", "language", "version", "remark", "ext_fields", "body", "serialize_type")
    setters = tuple(vars(RemotingCommand)[name] for name in names)  # the slots' member descriptors
    decoder: Callable[[bytes | bytearray | memoryview], RemotingCommand] = functools.partial(
        c.decode_frame, orjson.loads, RemotingCommand, setters, SerializeType.JSON, python_decode_command
    )
    return decoder


decode_command: Callable[[bytes | bytearray | memoryview], RemotingCommand] = (
    _compiled_decode_command() or python_decode_command
)
"""Decode a frame without its 4-byte length prefix; RemoteProtocolError on bad input."""
