"""Child processes that do not outlive their parent.

Benchmarks and ``cluster up`` start name servers and brokers as children; if the parent
is killed (a test timeout, kill -9) they would keep running and keep their ports. On
Linux the kernel can send the child SIGTERM when its parent dies (PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import ctypes
import signal
import sys

_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """``preexec_fn`` for subprocess.Popen: SIGTERM this child when its parent exits."""
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
        except OSError:
            pass
