"""The entry point of a chaos child process: arm LEDGERMQ_FAILPOINTS, then run ``ledgermq``.

``python -m ledgermq.cli.chaos_child -v broker -c broker.properties``: the ``ledgermq`` command
line, with the failpoints of the environment armed first (the broker command itself does
not arm them), so a chaos layout can fill a broker's disk by creating a flag file.
"""

from __future__ import annotations

from ledgermq.cli.main import main
from ledgermq.failpoints import arm_from_env


def run() -> None:
    arm_from_env()
    main()


if __name__ == "__main__":
    run()
