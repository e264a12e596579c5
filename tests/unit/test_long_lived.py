"""``util.long_lived.freeze_long_lived``: what PySpark's per-task ``gc.collect()`` walks in a reused worker.

Run in a child interpreter: freezing is process-wide and the test process must keep its own collector as it is.
"""

from __future__ import annotations

import json
import subprocess
import sys

CHILD = r"""
import gc, json, time
import pyarrow, pyarrow.compute
import ledgermq.spark.reading
from ledgermq.util.long_lived import freeze_long_lived

def full_collection_walks():
    # objects a full collection examines: everything tracked outside the permanent generation
    return sum(len(gc.get_objects(generation=g)) for g in range(3))

before = full_collection_walks()
freeze_long_lived()
frozen = gc.get_freeze_count()
after = full_collection_walks()
freeze_long_lived()  # a second task in the same worker: nothing more is frozen
again = gc.get_freeze_count()
garbage = []
garbage.append(garbage)  # a cycle made by a later task is still collected
del garbage
collected = gc.collect()
print(json.dumps({"before": before, "frozen": frozen, "after": after, "again": again, "collected": collected}))
"""


def test_freeze_takes_the_imports_out_of_later_collections_once() -> None:
    out = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=120, check=True)
    r = json.loads(out.stdout.strip().splitlines()[-1])
    assert r["before"] > 20_000, r  # pyarrow and the client leave tens of thousands of tracked objects
    assert r["frozen"] >= r["before"] * 0.9, r
    assert r["after"] < 1_000, r  # what a full collection still walks
    assert r["again"] == r["frozen"], r
    assert r["collected"] >= 1, r
