"""cProfile of a server's loop thread on demand (bench-scripts/produce_cpu.py --profile).

Imported by sitecustomize.py when LMQ_PROFILE_DIR is set: SIGUSR1 starts a fresh profile,
SIGUSR2 stops it and writes LMQ_PROFILE_DIR/<pid>.prof. The handlers run on the main
thread, which is the event loop's, so the profile covers the loop thread only (the flush
and reput threads are not in it). Timed by the thread's CPU clock (``time.thread_time``),
not the wall clock: on a loaded host a wall clock charges a system call that wakes another
process with the time until this one runs again.
"""

import cProfile
import os
import signal
import time

_profile: list[cProfile.Profile] = []


def _start(_signum, _frame):
    profile = cProfile.Profile(time.thread_time)
    _profile[:] = [profile]
    profile.enable()


def _stop(_signum, _frame):
    if not _profile:
        return
    profile = _profile.pop()
    profile.disable()
    profile.dump_stats(os.path.join(os.environ["LMQ_PROFILE_DIR"], f"{os.getpid()}.prof"))


signal.signal(signal.SIGUSR1, _start)
signal.signal(signal.SIGUSR2, _stop)
