"""The compiled frame decoder (ledgermq/_recordc.c, ``decode_frame``) against the Python
decoder it stands in for: for any frame (JSON headers with fields of every JSON type,
extFields with numbers, booleans and nulls as the C++ client sends them, headers that are
not JSON or not an object, binary ROCKETMQ headers, truncated frames, unknown serialize
types), the two must build equal commands, field by field and type by type, or raise the
same error with the same text.
"""

from __future__ import annotations

import struct
from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ledgermq.protocol import command as C
from ledgermq.protocol.codes import SerializeType
from tests.store.test_batch_records_c import needs_c

FIELDS = ("code", "opaque", "flag", "language", "version", "remark", "ext_fields", "body", "serialize_type")

_SCALAR = st.one_of(
    st.integers(-(2**40), 2**40),
    st.sampled_from([0, 1, 310, 2**63, -1]),
    st.text(max_size=6),
    st.sampled_from(["JAVA", "CPP", "PYTHON", "12", "x", ""]),
    st.booleans(),
    st.none(),
    st.floats(allow_nan=False, allow_infinity=False),
)
_VALUE = st.one_of(_SCALAR, st.lists(_SCALAR, max_size=2), st.dictionaries(st.text(max_size=3), _SCALAR, max_size=2))


@st.composite
def json_headers(draw: st.DrawFn) -> bytes:
    doc: dict[str, Any] = {}
    for key in ("code", "opaque", "flag", "language", "version", "remark", "serializeTypeCurrentRPC"):
        pick = draw(st.integers(0, 9))
        if pick == 0:
            continue  # absent
        if pick < 9:  # the usual type
            doc[key] = draw(st.text(max_size=8) if key in ("language", "remark") else st.integers(0, 2**31))
        else:
            doc[key] = draw(_VALUE)
    pick = draw(st.integers(0, 5))
    if pick < 3:
        doc["extFields"] = draw(st.dictionaries(st.text(max_size=4), st.text(max_size=8), max_size=5))
    elif pick == 3:
        doc["extFields"] = draw(st.dictionaries(st.text(max_size=4), _SCALAR, max_size=4))
    elif pick == 4:
        doc["extFields"] = draw(_VALUE)
    raw = orjson.dumps(doc)
    if draw(st.integers(0, 9)) == 0:
        return draw(st.sampled_from([b"[1, 2]", b"{", b"", b"null", b'"x"', b"\xff\xfe", raw[: len(raw) // 2]]))
    return raw


@st.composite
def frames(draw: st.DrawFn) -> bytes:
    kind = draw(st.integers(0, 9))
    body = draw(st.binary(max_size=40))
    if kind == 0:  # a binary header, as the C++ client may send
        cmd = C.RemotingCommand(
            draw(st.integers(0, 400)),
            draw(st.integers(0, 2**31 - 1)),
            draw(st.integers(0, 3)),
            remark=draw(st.one_of(st.none(), st.text(max_size=5))),
            ext_fields=draw(st.dictionaries(st.text(max_size=4), st.text(max_size=6), max_size=3)),
            body=body,
            serialize_type=SerializeType.ROCKETMQ,
        )
        return cmd.encode()[4:]
    header = draw(json_headers())
    serialize = draw(st.sampled_from([0, 0, 0, 0, 1, 2, 7]))
    header_len = len(header) + draw(st.sampled_from([0, 0, 0, 0, 1, 100]))  # some claim more than they hold
    frame = struct.pack(">i", (serialize << 24) | header_len) + header + body
    if draw(st.integers(0, 9)) == 0:
        frame = frame[: draw(st.integers(0, len(frame)))]
    return frame


def _outcome(decode: Any, payload: Any) -> tuple[str, Any]:
    try:
        cmd = decode(payload)
    except Exception as exc:
        return type(exc).__name__, str(exc)
    return "ok", [(type(getattr(cmd, f)), getattr(cmd, f)) for f in FIELDS]


@needs_c
@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(frames())
def test_the_compiled_decoder_answers_as_the_python_one(payload: bytes) -> None:
    assert C.decode_command is not C.python_decode_command
    want = _outcome(C.python_decode_command, payload)
    assert _outcome(C.decode_command, payload) == want
    assert _outcome(C.decode_command, memoryview(payload)) == want
    assert _outcome(C.decode_command, bytearray(payload)) == want


@needs_c
def test_a_request_as_clients_send_it_is_decoded_in_c() -> None:
    """The usual frame never reaches the Python decoder."""
    cmd = C.RemotingCommand(310, 7, 0, "JAVA", ext_fields={"a": "pg", "b": "T"}, body=b"payload")
    payload = cmd.encode()[4:]
    compiled = C.decode_command
    calls: list[object] = []
    spy = type(compiled)(compiled.func, *compiled.args[:4], lambda p: calls.append(p) or C.python_decode_command(p))  # type: ignore[attr-defined]
    got = spy(payload)
    assert calls == []
    assert (got.code, got.opaque, got.language, got.ext_fields, got.body) == (
        310,
        7,
        "JAVA",
        {"a": "pg", "b": "T"},
        b"payload",
    )
