"""In-process microbenchmark of request header decoding (not part of the test suite).

Run: ``PYTHONPATH=src python -m tests.protocol.headers_microbench``. Compares the typed
decode (protocol/header_codec.py) with the field-by-field reads the send and pull processors
made before it (commit 22ad5ed: the v2 key rename, validate_send_header, then each field read
again where used), for a SEND_MESSAGE_V2 as the Java client sends it and a PULL_MESSAGE.
"""

from __future__ import annotations

import timeit
from collections.abc import Callable

from ledgermq.protocol.codes import RequestCode
from ledgermq.protocol.command import RemotingCommand
from ledgermq.protocol.header_codec import wires
from ledgermq.protocol.headers import INT32, bool_field, field, int_field, opt_field
from ledgermq.protocol.headers_pull import PullMessageRequestHeader
from ledgermq.protocol.headers_send import V2_KEYS, SendMessageRequestHeader

V2_TO_V1 = {V2_KEYS[attr]: wire.key for attr, wire in wires(SendMessageRequestHeader) if attr in V2_KEYS}
SEND_EXT = {"a": "pg", "b": "TopicTest", "c": "TBW102", "d": "4", "e": "3", "f": "0", "g": "1700000000000",
            "h": "0", "i": "KEYS\x01k1\x02WAIT\x01true\x02", "j": "0", "k": "false", "m": "false"}  # fmt: skip
PULL_EXT = {"consumerGroup": "cg", "topic": "TopicTest", "queueId": "3", "queueOffset": "123456",
            "maxMsgNums": "32", "sysFlag": "3", "commitOffset": "123400", "suspendTimeoutMillis": "15000",
            "subVersion": "1700000000001", "subscription": "*", "expressionType": "TAG"}  # fmt: skip


def send_before(ext: dict[str, str]) -> object:
    cmd = RemotingCommand(RequestCode.SEND_MESSAGE_V2, ext_fields={V2_TO_V1.get(k, k): v for k, v in ext.items()})
    for name in ("producerGroup", "topic", "defaultTopic"):
        field(cmd, name)
    for name, bits in (("defaultTopicQueueNums", 32), ("queueId", 32), ("sysFlag", 32), ("bornTimestamp", 64),
                       ("flag", 32)):  # fmt: skip
        int_field(cmd, name, bits=bits)
    for name in ("reconsumeTimes", "maxReconsumeTimes"):
        int_field(cmd, name, 0, bits=INT32)
    bool_field(cmd, "batch")
    return (field(cmd, "topic"), int_field(cmd, "queueId", -1), opt_field(cmd, "properties"),
            int_field(cmd, "sysFlag", 0), int_field(cmd, "flag", 0), int_field(cmd, "bornTimestamp", 0),
            int_field(cmd, "reconsumeTimes", 0))  # fmt: skip


def send_after(ext: dict[str, str]) -> object:
    hdr = SendMessageRequestHeader.decode(RemotingCommand(RequestCode.SEND_MESSAGE_V2, ext_fields=ext))
    return (hdr.topic, hdr.queue_id, hdr.properties, hdr.sys_flag, hdr.flag, hdr.born_timestamp, hdr.reconsume_times)


def pull_before(ext: dict[str, str]) -> object:
    cmd = RemotingCommand(RequestCode.PULL_MESSAGE, ext_fields=ext)
    group, topic = field(cmd, "consumerGroup"), field(cmd, "topic")
    queue_id, offset = int_field(cmd, "queueId", bits=INT32), int_field(cmd, "queueOffset")
    max_msgs, sys_flag = int_field(cmd, "maxMsgNums", bits=INT32), int_field(cmd, "sysFlag", bits=INT32)
    for name in ("commitOffset", "suspendTimeoutMillis", "subVersion"):
        int_field(cmd, name)
    int_field(cmd, "sysFlag", 0)  # _subscription
    version = int_field(cmd, "subVersion", 0)
    commit = int_field(cmd, "commitOffset")
    return (group, topic, queue_id, offset, max_msgs, sys_flag, version, commit)


def pull_after(ext: dict[str, str]) -> object:
    hdr = PullMessageRequestHeader.decode(RemotingCommand(RequestCode.PULL_MESSAGE, ext_fields=ext))
    return (hdr.consumer_group, hdr.topic, hdr.queue_id, hdr.queue_offset, hdr.max_msg_nums, hdr.sys_flag,
            hdr.sub_version, hdr.commit_offset)  # fmt: skip


def best_us(
    fn: Callable[[dict[str, str]], object], ext: dict[str, str], number: int = 20_000, repeat: int = 7
) -> float:
    timer = timeit.Timer(lambda: fn(ext))
    return min(timer.repeat(repeat, number)) / number * 1e6


def main() -> None:
    assert send_before(SEND_EXT) == send_after(SEND_EXT)
    assert pull_before(PULL_EXT) == pull_after(PULL_EXT)
    for name, before, after, ext in (("SEND_MESSAGE_V2", send_before, send_after, SEND_EXT),
                                     ("PULL_MESSAGE", pull_before, pull_after, PULL_EXT)):  # fmt: skip
        b, a = best_us(before, ext), best_us(after, ext)
        print(f"{name:16} field-by-field {b:6.2f} us   typed decode {a:6.2f} us   {b / a:4.1f}x")


if __name__ == "__main__":
    main()
