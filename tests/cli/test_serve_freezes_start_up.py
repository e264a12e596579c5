"""A server process freezes what start-up left alive out of later full collections.

Why it matters (util/long_lived.py): a full collection in a running broker walked ~80,000
start-up objects cold and held the event loop 240-400 ms. Run in a child interpreter:
freezing is process-wide, and the child stops itself with SIGTERM as an operator would.
"""

from __future__ import annotations

import json
import subprocess
import sys

CHILD = r"""
import asyncio, gc, json, os, signal
from ledgermq.cli.runtime import serve

seen = {}

async def start():
    seen["frozen_during_start"] = gc.get_freeze_count()
    def look():
        seen["frozen_after_start"] = gc.get_freeze_count()
        seen["walked_by_a_full_collection"] = sum(len(gc.get_objects(generation=g)) for g in range(3))
        os.kill(os.getpid(), signal.SIGTERM)
    asyncio.get_running_loop().call_later(0.05, look)

async def stop():
    seen["stopped"] = True

serve(start, stop)
print(json.dumps(seen))
"""


def test_serve_freezes_the_start_up_objects_once_started() -> None:
    out = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=120, check=True)
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen["stopped"] is True, seen
    assert seen["frozen_during_start"] == 0, seen  # nothing frozen before start-up is done
    assert seen["frozen_after_start"] > 10_000, seen  # the imports: click, the loop, the runtime (a broker: ~80,000)
    assert seen["walked_by_a_full_collection"] < seen["frozen_after_start"] / 10, seen
