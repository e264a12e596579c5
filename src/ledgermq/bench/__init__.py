"""Benchmarks behind ``ledgermq bench``; every figure comes with a baseline from the same run."""
