"""What topic and group names may be (RocketMQ ``TopicValidator`` and ``Validators``, 4.9.7):
one definition for the client (before sending, and for its consumers' groups), the broker
(sends and topic admin) and the store (before a topic becomes a directory name under
consumequeue/).

Each of those still decides its own order of checks and its own error text, as the Java
code it follows does; what they share is the rule: 1 to ``TOPIC_MAX_LENGTH`` characters,
all of them matching ``TOPIC_NAME_PATTERN`` (use ``fullmatch``). The pattern admits only
ASCII, so for a name that matches, characters and UTF-8 bytes count the same, and the
limit is the record format's ``MAX_TOPIC_BYTES`` (a one-byte length field).
"""

from __future__ import annotations

import re
from typing import Final

TOPIC_MAX_LENGTH: Final = 127
TOPIC_NAME_PATTERN: Final = re.compile(r"[%|a-zA-Z0-9_-]+")

GROUP_MAX_LENGTH: Final = 255
GROUP_NAME_PATTERN: Final = TOPIC_NAME_PATTERN  # ``Validators.checkGroup`` uses the topic's character set

# TopicValidator.NOT_ALLOWED_SEND_TOPIC_SET: system topics that only the broker writes
NOT_ALLOWED_SEND_TOPICS: Final = frozenset(
    {
        "SCHEDULE_TOPIC_XXXX",
        "rmq_sys_wheel_timer",
        "RMQ_SYS_TRANS_HALF_TOPIC",
        "RMQ_SYS_TRANS_OP_HALF_TOPIC",
        "TRANS_CHECK_MAX_TIME_TOPIC",
        "SELF_TEST_TOPIC",
        "OFFSET_MOVED_EVENT",
    }
)
