"""The rows the ``ledgermq`` source produces, as a Spark DDL string and the Arrow schema
Spark 4.2+ insists on (``to_arrow_schema(schema, timezone="UTC")`` exactly: int32 for INT,
``timestamp("us", tz="UTC")``, every field nullable, this order).

The columns follow spark-sql-kafka where the idea is the same (``key``, ``value``,
``topic``) and RocketMQ's ``MessageExt`` elsewhere:

==================  =====================  =================================================
column              type                   from
==================  =====================  =================================================
key                 string                 the KEYS property (space-separated keys), or null
value               binary                 the body (inflated when the producer compressed it)
topic               string                 the topic
broker              string                 the broker group (brokerName) of the queue
queueId             int                    the queue id within the broker group
queueOffset         bigint                 the message's offset in its queue
msgId               string                 UNIQ_KEY (the producer's id), else the offset id
tags                string                 the TAGS property, or null
properties          map<string,string>     every property the message carries
bornTimestamp       timestamp              when the producer made it
storeTimestamp      timestamp              when the broker stored it
reconsumeTimes      int                    how often it was redelivered (retry topics)
==================  =====================  =================================================
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    import pyarrow as pa

READ_COLUMNS: Final = (
    ("key", "STRING"),
    ("value", "BINARY"),
    ("topic", "STRING"),
    ("broker", "STRING"),
    ("queueId", "INT"),
    ("queueOffset", "BIGINT"),
    ("msgId", "STRING"),
    ("tags", "STRING"),
    ("properties", "MAP<STRING, STRING>"),
    ("bornTimestamp", "TIMESTAMP"),
    ("storeTimestamp", "TIMESTAMP"),
    ("reconsumeTimes", "INT"),
)

READ_DDL: Final = ", ".join(f"{name} {kind}" for name, kind in READ_COLUMNS)
COLUMN_NAMES: Final = tuple(name for name, _ in READ_COLUMNS)

# The sink's columns and the Spark types each accepts (by DataType.typeName()).
WRITE_COLUMNS: Final = {
    "topic": ("string",),
    "value": ("binary", "string"),
    "key": ("string", "binary"),
    "tags": ("string",),
    "properties": ("map",),
    "queueId": ("integer", "long", "short", "byte"),
}


def arrow_schema() -> pa.Schema:
    """The Arrow schema of every batch the reader yields."""
    import pyarrow as pa

    ts = pa.timestamp("us", tz="UTC")
    return pa.schema(
        [
            pa.field("key", pa.string()),
            pa.field("value", pa.binary()),
            pa.field("topic", pa.string()),
            pa.field("broker", pa.string()),
            pa.field("queueId", pa.int32()),
            pa.field("queueOffset", pa.int64()),
            pa.field("msgId", pa.string()),
            pa.field("tags", pa.string()),
            pa.field("properties", pa.map_(pa.string(), pa.string())),
            pa.field("bornTimestamp", ts),
            pa.field("storeTimestamp", ts),
            pa.field("reconsumeTimes", pa.int32()),
        ]
    )
