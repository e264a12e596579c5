"""The interpreter the local SparkSession's Python workers run: this one, importing pyspark from
site-packages rather than from the ``pyspark.zip`` Spark puts first on their ``PYTHONPATH``.

Both are the same pyspark (the wheel ships the zip beside the package), but a zip import
compiles every module again in every new process: importing the streaming source's runner
took 1.4-1.7 s of CPU and 13.3 s of wall time from the zip against 0.6-0.7 s and 4-8 s from
site-packages (load average 11, two cores, alternated runs). Spark gives that runner a fixed
10 s to connect back (``queries.py``): from the zip it missed them at that load, so restarting
the query would not have helped; from site-packages it usually starts in time.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

SCRIPT = """#!/bin/sh
# this interpreter, with pyspark.zip taken out of PYTHONPATH (tests/spark/worker_python.py)
set -f
IFS=:
kept=
for entry in $PYTHONPATH; do
  case "$entry" in
    */pyspark.zip) ;;
    *) kept="${kept:+$kept:}$entry" ;;
  esac
done
PYTHONPATH=$kept
export PYTHONPATH
exec %s "$@"
"""


def worker_python(directory: Path) -> Path:
    """A script in ``directory`` (for ``PYSPARK_PYTHON``) that runs this interpreter with
    ``pyspark.zip`` taken out of ``PYTHONPATH``."""
    script = directory / "python"
    script.write_text(SCRIPT % shlex.quote(sys.executable))
    script.chmod(0o755)
    return script
