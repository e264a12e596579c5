"""The message property string: ``key 0x01 value 0x02 key 0x01 value``.

Java writes no trailing 0x02 and the C++ client writes one after every pair; both must
decode the same. Parsing follows ``MessageDecoder.string2messageProperties``: segments
shorter than 3 characters, empty keys and empty values are skipped.
"""

from __future__ import annotations

from collections.abc import Mapping

NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"

# Well-known keys (RocketMQ MessageConst) the store itself reads.
KEYS = "KEYS"
TAGS = "TAGS"
WAIT = "WAIT"
DELAY = "DELAY"
UNIQ_KEY = "UNIQ_KEY"
REAL_TOPIC = "REAL_TOPIC"
REAL_QID = "REAL_QID"
TRAN_MSG = "TRAN_MSG"
RETRY_TOPIC = "RETRY_TOPIC"
ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
CLUSTER = "CLUSTER"
MAX_OFFSET = "MAX_OFFSET"
MIN_OFFSET = "MIN_OFFSET"
# Transactional messages (RocketMQ 4.x MessageConst)
PGROUP = "PGROUP"
TRANSACTION_CHECK_TIMES = "TRANSACTION_CHECK_TIMES"
CHECK_IMMUNITY_TIME_IN_SECONDS = "CHECK_IMMUNITY_TIME_IN_SECONDS"
TRAN_PREPARED_QUEUE_OFFSET = "TRAN_PREPARED_QUEUE_OFFSET"
# Timer messages (RocketMQ 5 MessageConst, RIP-43; __STARTDELIVERTIME is Aliyun ONS's)
TIMER_DELIVER_MS = "TIMER_DELIVER_MS"
TIMER_DELAY_SEC = "TIMER_DELAY_SEC"
TIMER_DELAY_MS = "TIMER_DELAY_MS"
START_DELIVER_TIME = "__STARTDELIVERTIME"
TIMER_OUT_MS = "TIMER_OUT_MS"
TIMER_ENQUEUE_MS = "TIMER_ENQUEUE_MS"
TIMER_DEQUEUE_MS = "TIMER_DEQUEUE_MS"
TIMER_ROLL_TIMES = "TIMER_ROLL_TIMES"
TIMER_DEL_UNIQKEY = "TIMER_DEL_UNIQKEY"
TIMER_DELAY_LEVEL = "TIMER_DELAY_LEVEL"

KEY_SEPARATOR = " "


def encode_properties(props: Mapping[str, str]) -> str:
    """Java's form: pairs joined by 0x02, no trailing separator."""
    # A list, not a generator: join builds one anyway, and every put encodes its properties.
    return PROPERTY_SEPARATOR.join([f"{k}{NAME_VALUE_SEPARATOR}{v}" for k, v in props.items() if k and v is not None])


def decode_properties(text: str) -> dict[str, str]:
    props: dict[str, str] = {}
    if not text:
        return props
    for segment in text.split(PROPERTY_SEPARATOR):
        if len(segment) < 3:
            continue
        key, sep, value = segment.partition(NAME_VALUE_SEPARATOR)
        if sep and key and value:
            props[key] = value
    return props


def get_property(text: str, key: str) -> str | None:
    """One property without building the whole dict (the dispatch hot path).

    Agrees with ``decode_properties`` (and Java): the last non-empty value of a
    repeated key wins.
    """
    if not text:
        return None
    needle = key + NAME_VALUE_SEPARATOR
    end = len(text)
    while True:
        at = text.rfind(needle, 0, end)
        if at < 0:
            return None
        if at == 0 or text[at - 1] == PROPERTY_SEPARATOR:
            begin = at + len(needle)
            stop = text.find(PROPERTY_SEPARATOR, begin)
            value = text[begin:] if stop < 0 else text[begin:stop]
            if value:
                return value
        end = at + len(needle) - 1
