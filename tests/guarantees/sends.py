"""Raw SEND_MESSAGE_V2 requests with opaques the test picks, and the read-back check that
an answer names the stored message that was sent under its opaque (in-process brokers)."""

from __future__ import annotations

from ledgermq.protocol import properties as P
from ledgermq.protocol.codes import RequestCode, ResponseCode
from ledgermq.protocol.command import RemotingCommand
from ledgermq.protocol.message import decode_record, decode_records
from ledgermq.protocol.msgid import decode_offset_msg_id
from ledgermq.store.message_store import MessageStore
from ledgermq.store.results import GetStatus

BORN = 1_700_000_000_000
QUEUES = 4
BODY_SIZE = 120


def body_for(tag: str, n: int) -> bytes:
    """A body unique to (tag, n), always BODY_SIZE bytes, so every record has the same size."""
    head = f"{tag}-{n:06d}|".encode()
    return (head + b"x" * BODY_SIZE)[:BODY_SIZE]


def send_request(topic: str, n: int, body: bytes, opaque: int, *, wait: bool = True) -> RemotingCommand:
    """A SEND_MESSAGE_V2 as the Java client makes it; WAIT=false asks not to wait for the store."""
    props = P.encode_properties({"TAGS": "G", "UNIQ_KEY": f"{opaque:032X}", "WAIT": "true" if wait else "false"})
    header = {"a": "pg", "b": topic, "c": "TBW102", "d": QUEUES, "e": n % QUEUES, "f": 0, "g": BORN, "h": 0,
              "i": props, "j": 0, "k": "false", "m": "false"}  # fmt: skip
    return RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, header, body, opaque=opaque)


def stored_end(store: MessageStore, port: int, request: RemotingCommand, response: RemotingCommand) -> int:
    """Check a SEND_OK names the message sent under its opaque; return the record's end offset.

    The msgId must point at a record holding the request's body, topic and queue, and the
    queue offset in the answer must lead (through the consume queue) to that same record
    (the caller waits for the store to dispatch first).
    """
    assert response.code == ResponseCode.SUCCESS, response
    assert response.opaque == request.opaque
    ext = response.ext_fields
    host, offset = decode_offset_msg_id(ext["msgId"])
    assert host == ("127.0.0.1", port), host
    raw = store.look_message_by_offset(offset)
    assert raw is not None, f"no record at {offset}"
    rec = decode_record(raw)
    topic = request.ext_fields["b"]
    assert (rec.topic, rec.body) == (topic, request.body), f"opaque {request.opaque}: msgId names another message"
    assert rec.properties.get(P.UNIQ_KEY) == P.decode_properties(request.ext_fields["i"])[P.UNIQ_KEY]
    queue_id, queue_offset = int(ext["queueId"]), int(ext["queueOffset"])
    assert (rec.queue_id, rec.queue_offset) == (queue_id, queue_offset), (rec.queue_id, rec.queue_offset, ext)
    got = store.get_message(topic, queue_id, queue_offset, 1)
    assert got.status is GetStatus.FOUND, got.status
    [via_queue] = decode_records(b"".join(got.messages))
    assert via_queue.physical_offset == offset and via_queue.body == request.body
    return offset + rec.store_size
