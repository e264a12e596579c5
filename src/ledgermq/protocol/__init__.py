"""Sans-I/O codecs for RocketMQ 4.x formats: bytes in, values out, no sockets, no files."""
