"""The HA stream codec: golden bytes (ROCKETMQ-FACTS §5.5), incremental decoding, caps."""

from __future__ import annotations

import pytest

from ledgermq.errors import LocalProtocolError
from ledgermq.ha.codec import (
    HEADER_SIZE,
    MAX_FRAME_BODY,
    REPORT_SIZE,
    FrameDecoder,
    HAProtocolError,
    ReportDecoder,
    TransferFrame,
    encode_frame,
    encode_header,
    encode_report,
)


def test_golden_report_is_8_byte_big_endian() -> None:
    assert REPORT_SIZE == 8
    assert encode_report(0) == bytes(8)
    assert encode_report(0x0102030405060708) == bytes.fromhex("0102030405060708")
    assert encode_report(1 << 30) == bytes.fromhex("0000000040000000")


def test_golden_header_is_offset_then_size() -> None:
    assert HEADER_SIZE == 12
    assert encode_header(0x40000000, 32768) == bytes.fromhex("000000004000000000008000")
    assert encode_frame(65536, b"abc") == bytes.fromhex("000000000001000000000003") + b"abc"
    assert encode_frame(7) == bytes.fromhex("000000000000000700000000")  # heartbeat


@pytest.mark.parametrize("bad", [-1, 1 << 63])
def test_report_out_of_range_is_refused(bad: int) -> None:
    with pytest.raises(LocalProtocolError):
        encode_report(bad)


def test_header_caps() -> None:
    with pytest.raises(LocalProtocolError):
        encode_header(-5, 0)
    with pytest.raises(LocalProtocolError):
        encode_header(0, MAX_FRAME_BODY + 1)


def test_report_decoder_byte_by_byte() -> None:
    stream = encode_report(5) + encode_report(1 << 40) + encode_report(0)
    dec = ReportDecoder()
    got: list[int] = []
    for i in range(len(stream)):
        got += dec.feed(stream[i : i + 1])
        assert dec.buffered == (i + 1) % 8
    assert got == [5, 1 << 40, 0]


def test_report_decoder_any_split() -> None:
    stream = b"".join(encode_report(v) for v in range(1, 20))
    for cut in range(len(stream)):
        dec = ReportDecoder()
        assert dec.feed(stream[:cut]) + dec.feed(stream[cut:]) == list(range(1, 20))


def test_report_decoder_rejects_negative() -> None:
    with pytest.raises(HAProtocolError):
        ReportDecoder().feed(b"\xff" * 8)


def test_frame_decoder_byte_by_byte() -> None:
    frames = [TransferFrame(0, b"x" * 100), TransferFrame(100, b""), TransferFrame(100, bytes(range(256)) * 3)]
    stream = b"".join(encode_frame(f.offset, f.body) for f in frames)
    dec = FrameDecoder(max_body=1024)
    got: list[TransferFrame] = []
    for i in range(len(stream)):
        got += dec.feed(stream[i : i + 1])
    assert got == frames
    assert dec.buffered == 0
    assert got[1].is_heartbeat and not got[0].is_heartbeat
    assert got[2].end == 100 + 768


def test_frame_decoder_whole_stream_and_partial_tail() -> None:
    stream = encode_frame(10, b"abc") + encode_frame(13, b"defg") + encode_frame(17, b"hi")[:-1]
    dec = FrameDecoder()
    assert dec.feed(stream) == [TransferFrame(10, b"abc"), TransferFrame(13, b"defg")]
    assert dec.buffered == HEADER_SIZE + 1
    assert dec.feed(b"i") == [TransferFrame(17, b"hi")]


def test_frame_decoder_body_cap_checked_on_the_header() -> None:
    dec = FrameDecoder(max_body=16)
    assert dec.feed(encode_frame(0, b"a" * 16)) == [TransferFrame(0, b"a" * 16)]
    with pytest.raises(HAProtocolError, match="17 bytes"):
        dec.feed(encode_header(16, 17))  # refused before any body byte arrives


@pytest.mark.parametrize(
    "header",
    [bytes.fromhex("0000000000000000ffffffff"), bytes.fromhex("800000000000000000000000")],
    ids=["negative-size", "negative-offset"],
)
def test_frame_decoder_rejects_garbage_headers(header: bytes) -> None:
    with pytest.raises(HAProtocolError):
        FrameDecoder().feed(header)


def test_frame_decoder_max_body_bounds() -> None:
    with pytest.raises(ValueError):
        FrameDecoder(max_body=0)
    with pytest.raises(ValueError):
        FrameDecoder(max_body=MAX_FRAME_BODY + 1)
