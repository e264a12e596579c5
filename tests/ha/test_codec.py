"""The HA stream codec: golden bytes (docs/formats.md §5.5), incremental decoding, caps."""

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
    frame_buffers,
    scan_frames,
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


# -- the fast paths: frames cut for one sendmsg, frames found in one pass -------------------


def test_frame_buffers_cut_a_window_into_batch_sized_frames() -> None:
    data = bytes(range(256)) * 40  # 10,240 bytes
    bufs = frame_buffers(1 << 33, data, 4096)
    assert len(bufs) == 6  # three frames: 4096, 4096, 2048
    headers, bodies = bufs[0::2], bufs[1::2]
    assert [bytes(h) for h in headers] == [
        encode_header((1 << 33) + i * 4096, n) for i, n in enumerate((4096, 4096, 2048))
    ]
    assert all(isinstance(b, memoryview) for b in bodies)  # views of the window, no copies
    assert b"".join(bufs) == b"".join(encode_frame((1 << 33) + i, data[i : i + 4096]) for i in range(0, 10240, 4096))
    assert frame_buffers(0, b"", 4096) == []
    assert b"".join(frame_buffers(7, b"abc", 32768)) == encode_frame(7, b"abc")


def test_frame_buffers_refuse_bad_batches_and_offsets() -> None:
    with pytest.raises(LocalProtocolError):
        frame_buffers(0, b"x", 0)
    with pytest.raises(LocalProtocolError):
        frame_buffers(0, b"x", MAX_FRAME_BODY + 1)
    with pytest.raises(LocalProtocolError):
        frame_buffers(-1, b"x", 10)


def test_scan_frames_finds_every_frame_of_a_chunk_in_place() -> None:
    stream = bytearray(b"??" + encode_frame(100, b"abc") + encode_frame(103, b"") + encode_frame(103, b"defgh"))
    frames, pos, error = scan_frames(stream, 2, len(stream), 1024)
    assert error == "" and pos == len(stream)
    assert [(off, bytes(stream[start : start + size])) for off, start, size in frames] == [
        (100, b"abc"),
        (103, b""),
        (103, b"defgh"),
    ]


def test_scan_frames_stops_before_a_partial_frame() -> None:
    whole = encode_frame(0, b"a" * 10) + encode_frame(10, b"b" * 10)
    for cut in range(len(whole) + 1):
        frames, pos, error = scan_frames(whole, 0, cut, 1024)
        assert error == ""
        complete = 0 if cut < 22 else 1 if cut < 44 else 2
        assert len(frames) == complete
        assert pos == 22 * complete  # where the partial frame (if any) starts


def test_scan_frames_keeps_the_frames_before_a_bad_header() -> None:
    good = encode_frame(0, b"x" * 8) + encode_frame(8, b"y" * 8)
    for bad, why in ((encode_header(16, 100), "100 bytes"), (bytes.fromhex("800000000000001000000001"), "negative")):
        stream = good + bad + b"z" * 100
        frames, pos, error = scan_frames(stream, 0, len(stream), 64)
        assert [f[0] for f in frames] == [0, 8] and pos == len(good)
        assert why in error
        # the bad header is refused as soon as its 12 bytes are in, before any body byte
        assert scan_frames(good + bad, 0, len(good) + HEADER_SIZE, 64)[2]
        assert not scan_frames(good + bad, 0, len(good) + HEADER_SIZE - 1, 64)[2]
