"""Child process for metadata crash tests: apply numbered changes, print each acknowledged one.

Usage: python metadata_writer.py CONFIG_DIR KIND COUNT
Prints ``ack N`` once change N returned (it counts as saved), ``done`` after a clean close.
COUNT 0: go on until killed (at most ``UNTIL_KILLED_S``; then ``gave up``, no ``done``), so
a test that SIGKILLs the writer after some acknowledgements never finds it already done.
Failpoints come from LEDGERMQ_FAILPOINTS (e.g. "metadata_log.after_snapshot=exit@2").
"""

from __future__ import annotations

import itertools
import sys
import time
from pathlib import Path

from ledgermq.failpoints import arm_from_env
from tests.broker.metadata_ops import apply, open_manager

UNTIL_KILLED_S = 120.0


def main() -> None:
    config_dir, kind, count = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    arm_from_env()
    manager = open_manager(kind, config_dir)
    manager.load()
    if kind == "topics":
        manager.persist()  # as BrokerApp.start does: a compaction before the first change
    give_up = time.monotonic() + UNTIL_KILLED_S
    for i in range(count) if count else itertools.count():
        if not count and time.monotonic() > give_up:
            print("gave up", flush=True)
            return
        apply(kind, manager, i)
        print(f"ack {i}", flush=True)
    manager.close()
    print("done", flush=True)


if __name__ == "__main__":
    main()
