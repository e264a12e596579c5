"""Tests of the PySpark source and sink (``ledgermq.spark``)."""
