"""Keep full garbage collections off the objects a process keeps for its whole life.

CPython's full (oldest-generation) collection walks every tracked object. Most of them in
our processes are the imports and start-up state (modules, functions, classes, config):
~80,000 objects that never become garbage. Walked cold, while the store streams hundreds of
MiB of segments through the CPU's caches, one full collection in a broker took 240-400 ms
of the event loop's thread (measured with ``gc.callbacks`` and ``perf`` under
``ledgermq bench timers``, where such a pause made one timer step in thirty start 100+ ms
late); after a freeze the same collection took under 1 ms. A reused PySpark worker runs
``gc.collect()`` after every task (``pyspark.daemon``): 20-40 ms each over the same kind of
objects.

``freeze_long_lived()`` runs one collection, then ``gc.freeze()`` moves every object alive
at that point into the permanent generation, which later collections skip. Objects made
later are collected as before; what is alive at the freeze stays alive (it was meant to).
Servers call it once start-up is done (cli/runtime.py); a Spark worker at its first task.
"""

from __future__ import annotations

import gc

_frozen = False


def freeze_long_lived() -> None:
    """Freeze the objects alive now out of later full collections; once per process."""
    global _frozen
    if _frozen:
        return
    _frozen = True
    gc.collect()
    gc.freeze()
