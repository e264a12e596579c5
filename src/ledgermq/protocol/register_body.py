"""The compressed REGISTER_BROKER body of RocketMQ 4.9 (``RegisterBrokerBody.encode(true)``).

Sans-I/O: bytes in, ``RegisterBrokerBody`` out, and back. A request header
``compressed=true`` says the body is one zlib stream (Java's ``DeflaterOutputStream``
over ``Deflater(BEST_COMPRESSION)``) holding, all integers 4-byte big-endian signed::

    int    length of the DataVersion JSON      {"counter":7,"timestamp":1700000000000}
    bytes  the DataVersion JSON (UTF-8)
    int    number of topic configs
    then for each topic config:
      int    length of its line
      bytes  "topicName readQueueNums writeQueueNums perm topicFilterType" (UTF-8, one
             space between fields: Java's ``TopicConfig.encode``)
    int    length of the filter-server list JSON
    bytes  the filter-server list JSON          ["10.0.0.9:30000"] or []

A 10,000-topic table shrinks from ~1.6 MB of JSON to ~60 KB, and name servers read it
faster (no JSON object per topic). The line form carries no ``topicSysFlag`` and no
``order``: a name server reading it records sysFlag 0, as a Java name server does; that
is why increments (one or a few topics) stay plain JSON.
"""

from __future__ import annotations

import struct
import zlib
from typing import Any

from ledgermq.errors import RemoteProtocolError
from ledgermq.protocol import fastjson
from ledgermq.protocol.route import DataVersion, RegisterBrokerBody, TopicConfig

MAX_INFLATED = 64 * 1024 * 1024
"""A compressed body inflating past this is refused: 100,000 topics take ~5 MB, and a
small frame must not make the name server allocate without bound."""

TOPIC_FILTER_TYPES = frozenset({"SINGLE_TAG", "MULTI_TAG"})
_INT = struct.Struct(">i")


def topic_config_line(tc: TopicConfig) -> str:
    """Java's ``TopicConfig.encode()``: five fields joined by one space."""
    return f"{tc.topic_name} {tc.read_queue_nums} {tc.write_queue_nums} {tc.perm} {tc.topic_filter_type}"


def _java_int(text: bytes, what: str) -> int:
    """Integer.parseInt, strictly: ASCII digits with an optional sign (Python's int() would
    also take spaces and underscores), within a Java int."""
    digits = text[1:] if text[:1] in (b"+", b"-") else text
    if not digits.isdigit():  # bytes.isdigit: ASCII digits only
        raise RemoteProtocolError(f"{what} {text[:40]!r} is not an integer")
    value = int(text)
    if not -(2**31) <= value < 2**31:
        raise RemoteProtocolError(f"{what} {text[:40]!r} is beyond a Java int")
    return value


def parse_topic_config_line(line: bytes) -> TopicConfig:
    """Java's ``TopicConfig.decode``, strict: where Java would store a config named null
    (anything but five fields, which its name server then fails on) this refuses."""
    fields = line.split(b" ")
    while fields and not fields[-1]:  # Java's String.split drops trailing empty strings
        fields.pop()
    if len(fields) != 5 or not fields[0]:
        raise RemoteProtocolError(f"topic config {line[:200]!r} is not 'name read write perm filterType'")
    name, read, write, perm, filter_type = fields
    try:
        topic, filter_name = name.decode(), filter_type.decode()
    except UnicodeDecodeError as exc:
        raise RemoteProtocolError(f"topic config {line[:200]!r} is not UTF-8") from exc
    if filter_name not in TOPIC_FILTER_TYPES:
        raise RemoteProtocolError(f"topic config {topic!r}: no topic filter type {filter_name[:40]!r}")
    return TopicConfig(
        topic,
        _java_int(read, "readQueueNums"),
        _java_int(write, "writeQueueNums"),
        _java_int(perm, "perm"),
        filter_name,
    )


def encode_compressed(body: RegisterBrokerBody) -> bytes:
    """``RegisterBrokerBody.encode(true)``: the layout above, deflated at level 9."""
    parts: list[bytes] = []

    def put(chunk: bytes) -> None:
        parts.append(_INT.pack(len(chunk)))
        parts.append(chunk)

    put(fastjson.dumps(body.data_version.to_json()))
    parts.append(_INT.pack(len(body.topic_configs)))
    for tc in body.topic_configs.values():
        put(topic_config_line(tc).encode())
    put(fastjson.dumps(list(body.filter_servers)))
    return zlib.compress(b"".join(parts), 9)


class _Reader:
    """Reads the inflated layout; every shortfall is a clear protocol error."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def int32(self, what: str) -> int:
        if self.pos + 4 > len(self.data):
            raise RemoteProtocolError(f"compressed register body ends inside {what} (or its length)")
        (value,) = _INT.unpack_from(self.data, self.pos)
        self.pos += 4
        if value < 0:
            raise RemoteProtocolError(f"compressed register body: negative {what} {value}")
        return int(value)

    def chunk(self, what: str) -> bytes:
        length = self.int32(what)
        if self.pos + length > len(self.data):
            raise RemoteProtocolError(f"compressed register body ends inside {what} ({length} bytes announced)")
        out = self.data[self.pos : self.pos + length]
        self.pos += length
        return out


def inflate(data: bytes, max_inflated: int = MAX_INFLATED) -> bytes:
    """The whole zlib stream, or a protocol error (corrupt, truncated, or too large)."""
    inflater = zlib.decompressobj()
    try:
        out = inflater.decompress(data, max_inflated + 1)
    except zlib.error as exc:
        raise RemoteProtocolError(f"compressed register body does not inflate: {exc}") from exc
    if len(out) > max_inflated:
        raise RemoteProtocolError(f"compressed register body inflates past {max_inflated} bytes")
    if not inflater.eof:
        raise RemoteProtocolError("compressed register body is truncated (the zlib stream does not end)")
    return out


def _json(raw: bytes, what: str) -> Any:
    try:
        return fastjson.loads(raw)
    except (RemoteProtocolError, ValueError, TypeError) as exc:
        raise RemoteProtocolError(f"compressed register body: {what} is not JSON: {exc}") from exc


def decode_compressed(data: bytes, max_inflated: int = MAX_INFLATED) -> RegisterBrokerBody:
    """``RegisterBrokerBody.decode(data, true)``; refuses rather than half-reads."""
    reader = _Reader(inflate(data, max_inflated))
    version = DataVersion.from_json(_json(reader.chunk("the DataVersion"), "the DataVersion"))
    count = reader.int32("the topic count")
    if count * 4 > len(reader.data) - reader.pos:  # each needs at least its length field
        raise RemoteProtocolError(f"compressed register body announces {count} topics but is too short for them")
    table: dict[str, TopicConfig] = {}
    for _ in range(count):
        tc = parse_topic_config_line(reader.chunk("a topic config"))
        table[tc.topic_name] = tc
    servers = _json(reader.chunk("the filter-server list"), "the filter-server list")
    if not isinstance(servers, list):
        raise RemoteProtocolError("compressed register body: the filter-server list is not a JSON array")
    if reader.pos != len(reader.data):
        raise RemoteProtocolError(f"compressed register body has {len(reader.data) - reader.pos} bytes after its end")
    return RegisterBrokerBody(version, table, [str(s) for s in servers])


def decode_register_body(data: bytes, compressed: bool) -> RegisterBrokerBody:
    """Either form, as the request header's ``compressed`` says (Java brokers before 4.9,
    and 4.9 ones with compressedRegister=false, send plain JSON). No body at all reads as
    an empty table at version 0 in both forms, as in Java, which skips decoding then."""
    return decode_compressed(data) if compressed and data else RegisterBrokerBody.decode(data)
