"""Keep PySpark's per-task garbage collection off the long-lived objects of a Python worker.

A reused PySpark worker (``spark.python.worker.reuse``, the default) runs ``gc.collect()``
after every task (``pyspark.daemon``). With pyspark, pyarrow, the client and (when
installed) pandas imported, a worker holds ~84,000 long-lived objects that every one of
those full collections walks: 20-40 ms of CPU per task on the 2-core bench machine, which
is 0.1-0.3 us per row of a 150,000-row partition, for objects that never become garbage.

``freeze_long_lived()`` runs once per process, at the first task: one collection, then
``gc.freeze()`` moves every object alive at that point into the permanent generation,
which later collections skip. Objects the tasks create are collected as before; what the
first task leaves alive stays alive (a few objects, once per worker process).
"""

from __future__ import annotations

import gc

_frozen = False


def freeze_long_lived() -> None:
    """Freeze the objects alive now (the imports) out of later full collections; once per process."""
    global _frozen
    if _frozen:
        return
    _frozen = True
    gc.collect()
    gc.freeze()
