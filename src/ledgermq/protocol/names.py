"""What a topic name may be (RocketMQ ``TopicValidator``, 4.9.7): one definition for the
client (before sending), the broker (sends and topic admin) and the store (before a
topic becomes a directory name under consumequeue/).

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
