"""Command-line entry points (``ledgermq ...``)."""
