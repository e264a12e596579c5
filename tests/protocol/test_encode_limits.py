"""Encoders refuse what the format cannot carry with LocalProtocolError, never struct.error."""

from __future__ import annotations

import pytest

from ledgermq.errors import LocalProtocolError, PropertiesTooLargeError
from ledgermq.protocol.batch import BatchEntry, encode_batch
from ledgermq.protocol.message import encode_record


@pytest.mark.parametrize(
    "field",
    [
        {"queue_id": 2**31},
        {"flag": -(2**31) - 1},
        {"born_host": ("127.0.0.1", 2**31)},
        {"reconsume_times": 2**40},
        {"prepared_transaction_offset": 2**63},
    ],
)
def test_out_of_range_record_fields(field: dict[str, object]) -> None:
    with pytest.raises(LocalProtocolError, match="out of range"):
        encode_record(topic="T", body=b"x", **field)  # type: ignore[arg-type]


def test_too_large_properties_have_their_own_error() -> None:
    with pytest.raises(PropertiesTooLargeError):
        encode_record(topic="T", body=b"x", properties="k\x01" + "v" * 32767)
    with pytest.raises(PropertiesTooLargeError):
        encode_batch([BatchEntry(0, b"x", "k\x01" + "v" * 32767)])


def test_out_of_range_batch_flag() -> None:
    with pytest.raises(LocalProtocolError, match="out of range"):
        encode_batch([BatchEntry(2**31, b"x", "")])
