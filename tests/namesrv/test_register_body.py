"""The compressed REGISTER_BROKER body (RocketMQ 4.9) and the name server reading it.

The fixture is laid out by hand from the Java format (org.apache.rocketmq.common.protocol.
body.RegisterBrokerBody#encode(boolean) in 4.9.7, topic lines from org.apache.rocketmq.
common.TopicConfig#encode): 4-byte big-endian lengths, the DataVersion JSON, the topic
count, one "name read write perm filterType" line per topic, the filter-server list JSON,
all through a DeflaterOutputStream (zlib, level 9; Java's stream deflates in 512-byte
writes, reproduced here with a compressobj fed in 512-byte pieces).
"""

from __future__ import annotations

import asyncio
import struct
import zlib
from typing import Any

import pytest

from ledgermq.clock import ManualClock
from ledgermq.errors import RemoteProtocolError
from ledgermq.namesrv import processors
from ledgermq.namesrv.kvconfig import KVConfig
from ledgermq.namesrv.routeinfo import RouteInfo
from ledgermq.protocol.codes import RequestCode, ResponseCode
from ledgermq.protocol.command import RemotingCommand
from ledgermq.protocol.register_body import (
    decode_compressed,
    decode_register_body,
    encode_compressed,
    parse_topic_config_line,
)
from ledgermq.protocol.route import DataVersion, RegisterBrokerBody, TopicConfig

VERSION_JSON = b'{"counter":3,"timestamp":1700000000000}'  # fastjson: fields in name order
LINES = [b"TopicA 8 8 6 SINGLE_TAG", b"%RETRY%group-1 1 1 6 SINGLE_TAG", b"OrderTopic 4 4 7 MULTI_TAG"]
FILTERS = b'["10.0.0.9:30000"]'


def java_layout(version: bytes = VERSION_JSON, lines: list[bytes] = LINES, filters: bytes = FILTERS) -> bytes:
    def chunk(b: bytes) -> bytes:
        return struct.pack(">i", len(b)) + b

    return chunk(version) + struct.pack(">i", len(lines)) + b"".join(chunk(x) for x in lines) + chunk(filters)


def java_deflate(raw: bytes) -> bytes:
    """DeflaterOutputStream(Deflater(BEST_COMPRESSION)): 512-byte writes, then finish()."""
    deflater = zlib.compressobj(9)
    out = b"".join(deflater.compress(raw[i : i + 512]) for i in range(0, len(raw), 512))
    return out + deflater.flush()


EXPECTED = RegisterBrokerBody(
    DataVersion(1_700_000_000_000, 3),
    {
        "TopicA": TopicConfig("TopicA", 8, 8, 6, "SINGLE_TAG"),
        "%RETRY%group-1": TopicConfig("%RETRY%group-1", 1, 1, 6, "SINGLE_TAG"),
        "OrderTopic": TopicConfig("OrderTopic", 4, 4, 7, "MULTI_TAG"),
    },
    ["10.0.0.9:30000"],
)


def test_a_java_laid_out_body_decodes() -> None:
    assert decode_compressed(java_deflate(java_layout())) == EXPECTED
    assert decode_register_body(java_deflate(java_layout()), compressed=True) == EXPECTED


def test_encoding_lays_the_bytes_out_as_java_does() -> None:
    encoded = encode_compressed(EXPECTED)
    assert zlib.decompress(encoded) == java_layout()
    assert encoded[:2] == b"\x78\xda"  # a zlib header at BEST_COMPRESSION, as Deflater(9) writes
    assert decode_compressed(encoded) == EXPECTED


def test_the_line_form_drops_sysflag_and_order_as_java_does() -> None:
    body = RegisterBrokerBody(DataVersion(1, 1), {"U": TopicConfig("U", 2, 2, 6, "SINGLE_TAG", 3, True)})
    assert decode_compressed(encode_compressed(body)).topic_configs["U"] == TopicConfig("U", 2, 2, 6)


def test_plain_json_bodies_still_decode() -> None:
    assert decode_register_body(EXPECTED.encode(), compressed=False) == EXPECTED
    assert decode_register_body(b"", compressed=True).topic_configs == {}  # no body: Java skips decoding


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (b"not zlib at all", "does not inflate"),
        (java_deflate(java_layout())[:-6], "truncated"),
        (zlib.compress(java_layout()[:-3]), "ends inside"),
        (zlib.compress(java_layout() + b"junk"), "after its end"),
        (zlib.compress(java_layout(lines=[b"Spaced name 1 1 6 SINGLE_TAG"])), "is not 'name read write perm"),
        (zlib.compress(java_layout(lines=[b"T 1 x 6 SINGLE_TAG"])), "writeQueueNums b'x' is not an integer"),
        (zlib.compress(java_layout(lines=[b"T 1 1 6 NO_SUCH"])), "no topic filter type"),
        (zlib.compress(java_layout(lines=[b"T 1 99999999999 6 SINGLE_TAG"])), "beyond a Java int"),
        (zlib.compress(java_layout(version=b"{nope")), "DataVersion"),
        (zlib.compress(java_layout(filters=b'{"a":1}')), "not a JSON array"),
        (zlib.compress(struct.pack(">i", 2) + b"{}" + struct.pack(">i", 1_000_000)), "too short"),
    ],
)
def test_corrupt_compressed_bodies_are_refused_clearly(data: bytes, problem: str) -> None:
    with pytest.raises(RemoteProtocolError, match=problem):
        decode_compressed(data)


def test_a_body_inflating_past_the_limit_is_refused() -> None:
    with pytest.raises(RemoteProtocolError, match="inflates past"):
        decode_compressed(zlib.compress(b"\0" * 10_000), max_inflated=1_000)


def test_java_topic_lines_tolerate_a_trailing_space_like_string_split() -> None:
    assert parse_topic_config_line(b"T 1 2 6 SINGLE_TAG ") == TopicConfig("T", 1, 2, 6)
    assert parse_topic_config_line(b"T +1 2 6 SINGLE_TAG") == TopicConfig("T", 1, 2, 6)  # Integer.parseInt
    for odd in (b"T 1_0 2 6 SINGLE_TAG", b"T \xd9\xa1 2 6 SINGLE_TAG", b"T - 2 6 SINGLE_TAG"):
        with pytest.raises(RemoteProtocolError):  # int() would take these; Java does not
            parse_topic_config_line(odd)


# -- the name server ---------------------------------------------------------------------------
def register(body: bytes, compressed: bool, crc: int | None = None) -> RemotingCommand:
    ext: dict[str, Any] = {
        "brokerAddr": "10.0.0.1:10911",
        "brokerId": 0,
        "brokerName": "broker-a",
        "clusterName": "DefaultCluster",
        "haServerAddr": "10.0.0.1:10912",
        "compressed": compressed,
        "bodyCrc32": zlib.crc32(body) & 0x7FFFFFFF if crc is None else crc,
    }
    return RemotingCommand.request(RequestCode.REGISTER_BROKER, ext, body)


def handle(state: processors.NamesrvState, cmd: RemotingCommand) -> RemotingCommand:
    ctx: Any = type("Ctx", (), {"connection": object(), "peer": "broker"})()
    result: RemotingCommand = asyncio.run(processors.PROCESSORS[cmd.code](state, ctx, cmd))
    return result


def fresh_state() -> processors.NamesrvState:
    return processors.NamesrvState(RouteInfo(), KVConfig(None), ManualClock())


def test_the_name_server_applies_a_compressed_registration() -> None:
    state = fresh_state()
    resp = handle(state, register(java_deflate(java_layout()), compressed=True))
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    assert state.routes.topic_list() == sorted(EXPECTED.topic_configs)
    assert state.routes.live["10.0.0.1:10911"].data_version == EXPECTED.data_version


def test_a_corrupt_compressed_registration_is_refused_and_changes_nothing() -> None:
    state = fresh_state()
    assert handle(state, register(EXPECTED.encode(), compressed=False)).code == ResponseCode.SUCCESS
    routes_before = {t: dict(q) for t, q in state.routes.topic_queues.items()}
    live_before = state.routes.live["10.0.0.1:10911"]
    bad = zlib.compress(java_layout(lines=[b"NewTopic 1 1 6 SINGLE_TAG", b"Broken line"]))
    resp = handle(state, register(bad, compressed=True))
    assert resp.code == ResponseCode.SYSTEM_ERROR
    assert resp.remark is not None and "is not 'name read write perm filterType'" in resp.remark
    assert {t: dict(q) for t, q in state.routes.topic_queues.items()} == routes_before
    assert state.routes.live["10.0.0.1:10911"] is live_before


def test_a_body_whose_crc_differs_is_refused() -> None:
    state = fresh_state()
    body = encode_compressed(EXPECTED)
    resp = handle(state, register(body, compressed=True, crc=(zlib.crc32(body) + 1) & 0x7FFFFFFF))
    assert resp.code == ResponseCode.SYSTEM_ERROR and resp.remark == "crc32 not match"
    assert state.routes.live == {}


def test_a_registration_keeps_the_topics_it_does_not_name() -> None:
    """RocketMQ 4.x upserts: an increment naming one topic leaves the others routed."""
    state = fresh_state()
    assert handle(state, register(EXPECTED.encode(), compressed=False)).code == ResponseCode.SUCCESS
    increment = RegisterBrokerBody(DataVersion(1_700_000_000_500, 4), {"New": TopicConfig("New", 2, 2)})
    assert handle(state, register(increment.encode(), compressed=False)).code == ResponseCode.SUCCESS
    assert state.routes.topic_list() == sorted([*EXPECTED.topic_configs, "New"])
