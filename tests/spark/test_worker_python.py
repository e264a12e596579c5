"""The local session's worker interpreter imports pyspark from site-packages even with Spark's
``pyspark.zip`` first on its ``PYTHONPATH``, and keeps every other entry."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.spark.worker_python import worker_python

pytest.importorskip("pyspark", reason="pyspark is not installed (the 'spark' extra)")


def test_pyspark_zip_is_left_out_and_the_rest_kept(tmp_path: Path) -> None:
    import pyspark

    home = Path(pyspark.__file__).parent
    zipped = home / "python" / "lib" / "pyspark.zip"
    assert zipped.exists(), "the wheel no longer ships pyspark.zip: worker_python may be needless"
    other = tmp_path / "other"
    other.mkdir()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(zipped), str(other)]))
    probe = "import os, sys, pyspark; print(pyspark.__file__); print(os.environ['PYTHONPATH']); print(sys.prefix)"
    out = subprocess.run(
        [str(worker_python(tmp_path)), "-c", probe], env=env, capture_output=True, text=True, timeout=120, check=True
    ).stdout.splitlines()
    assert out == [pyspark.__file__, str(other), sys.prefix]
