"""The client's raw-pull API: the stored-record format as public names.

``PullAPI.pull(..., decode=False)`` hands back a PULL_MESSAGE answer's body untouched
(``PullResult.raw``): stored records back to back, in RocketMQ 4.x's commit-log layout.
Code that reads those bytes itself (the Spark source decodes them column by column into
Arrow, far faster than building one ``MessageExt`` per message) needs the same format
facts the client decodes with. They live in ``protocol/``, which is not the client's public
surface; this module is, so such code depends on the client only and the protocol package
may be reorganised behind it.

* ``decode_record(buf, pos, check_crc=..., inflate=...)``: the record at ``pos`` as a
  ``MessageExt`` (``RemoteProtocolError`` on any inconsistency); ``decode_records`` for
  a whole body.
* ``MESSAGE_MAGIC_CODE``: the magic every stored record carries at bytes 4..8.
* The SYSFLAG bits that change a record's layout: ``BORNHOST_V6`` / ``STOREHOST_V6``
  (16-byte hosts instead of 4) and ``COMPRESSED`` (a zlib body).
* The record layout (``protocol.record_layout``): ``V4_FIELDS`` (where each header field
  of a record with IPv4 hosts sits), ``V4_HEAD`` (the fields a reader needs, in one
  ``unpack_from``), ``V4_BODY_POS``, ``V4_MIN_RECORD_SIZE``, ``TOTALSIZE``, and
  ``body_end(record)`` (where any record's body ends: its topic length byte).
* ``offset_msg_id(store_host, physical_offset)``: the offset message id (what
  ``MessageExt.offset_msg_id`` holds), for a record whose fields were read by hand.
* Property names (RocketMQ ``MessageConst``) a reader or writer looks up.
* ``check_subscribable(expression)``: a tag expression (``"*"``, ``"a || b"``) read as
  RocketMQ reads it (``TagExpression``: its tags and codes), refusing with
  ``TagExpressionError`` what a consumer's ``subscribe`` refuses; a reader that filters
  records by tag itself uses ``TagExpression.matches_tag``, as the client does.
"""

from __future__ import annotations

from ledgermq.protocol.message import MESSAGE_MAGIC_CODE, MessageRecord, body_end, decode_record, decode_records
from ledgermq.protocol.msgid import offset_msg_id
from ledgermq.protocol.properties import KEYS, TAGS, UNIQ_KEY
from ledgermq.protocol.record_layout import TOTALSIZE, V4_BODY_POS, V4_FIELDS, V4_HEAD, V4_MIN_RECORD_SIZE
from ledgermq.protocol.sysflag import BORNHOST_V6, COMPRESSED, STOREHOST_V6
from ledgermq.protocol.tag_expression import TagExpression, TagExpressionError, check_subscribable

MessageExt = MessageRecord

__all__ = [
    "BORNHOST_V6",
    "COMPRESSED",
    "KEYS",
    "MESSAGE_MAGIC_CODE",
    "STOREHOST_V6",
    "TAGS",
    "TOTALSIZE",
    "UNIQ_KEY",
    "V4_BODY_POS",
    "V4_FIELDS",
    "V4_HEAD",
    "V4_MIN_RECORD_SIZE",
    "MessageExt",
    "TagExpression",
    "TagExpressionError",
    "body_end",
    "check_subscribable",
    "decode_record",
    "decode_records",
    "offset_msg_id",
]
