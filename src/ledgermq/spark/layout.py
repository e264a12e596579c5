"""The stored record's IPv4 header as the Arrow decoder reads it.

Both decoder paths read the same fixed layout: the per-record loop (``columnar``) unpacks
it with ``V4``, the vectorised path (``arrow_kernels``) gathers ``FIELDS`` out of many
headers at once. Keeping the two descriptions side by side is what keeps them in step.
Records with an IPv6 host have a longer header and are decoded by the general decoder.
"""

from __future__ import annotations

import struct
from typing import Final

# IPv4 born and store hosts: total, magic, [crc queueId flag], queueOffset, physicalOffset,
# sysflag, bornTimestamp, [bornHost], storeTimestamp, storeHost ip, port, reconsumeTimes,
# [preparedTransactionOffset], bodyLength; the body starts at byte 88.
V4: Final = struct.Struct(">ii12xqqiq8xq4sii8xi")
V4_BODY: Final = V4.size
MIN_TOTAL: Final = V4_BODY + 3  # an empty body, a topic length byte, a properties length
TOTAL: Final = struct.Struct(">i")

# The header fields the vectorised path gathers: (name, offset in the record, width), in the
# order their bytes are laid out (8-byte fields first so every slice stays aligned). Numbers
# are gathered byte-reversed (little-endian); the store host is kept as stored (ip, port).
FIELDS: Final = (
    ("qoff", 20, 8),
    ("phys", 28, 8),
    ("born", 40, 8),
    ("store", 56, 8),
    ("host", 64, 8),
    ("magic", 4, 4),
    ("sysflag", 36, 4),
    ("recon", 72, 4),
    ("blen", 84, 4),
)
