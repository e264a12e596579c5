"""Counts calls of chosen functions in a server process (bench-scripts/cpu_per_send.py --count).

WT_COUNT="ledgermq.ha.master:HAService.wake_writers,..." wraps each; every 0.2 s the counts
are written to WT_COUNT_DIR/<pid>.json. Names that do not exist (the other tree) are skipped.
"""

import os

if os.environ.get("WT_COUNT"):
    import atexit
    import collections
    import importlib
    import json
    import threading
    import time

    _counts: collections.Counter[str] = collections.Counter()
    _dir = os.environ["WT_COUNT_DIR"]

    def _wrap(owner, attr, key):
        orig = getattr(owner, attr)

        def counted(*a, **k):
            _counts[key] += 1
            return orig(*a, **k)

        setattr(owner, attr, counted)

    for spec in os.environ["WT_COUNT"].split(","):
        mod_name, _, path = spec.partition(":")
        try:
            obj = importlib.import_module(mod_name)
            parts = path.split(".")
            for p in parts[:-1]:
                obj = getattr(obj, p)
            _wrap(obj, parts[-1], spec)
        except (ImportError, AttributeError):
            pass

    def _dump():
        with open(os.path.join(_dir, f"{os.getpid()}.json"), "w") as f:
            json.dump(dict(_counts), f)

    def _loop():
        while True:
            time.sleep(0.2)
            _dump()

    threading.Thread(target=_loop, daemon=True).start()
    atexit.register(_dump)

if os.environ.get("LMQ_PROFILE_DIR"):
    import profiling  # noqa: F401  (SIGUSR1 starts a cProfile of the loop thread, SIGUSR2 writes it)
