"""ledgermq: a highly available message broker, wire- and disk-compatible with RocketMQ 4.x."""

__version__ = "0.1.0"
