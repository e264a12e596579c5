"""Fixtures for the C++ client compatibility tests: a name server and a broker as real processes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.compat.cluster import Cluster


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    """A running name server + master broker (data and logs under tmp_path); every process killed afterwards."""
    c = Cluster(tmp_path / "cluster")
    try:
        c.start()
        yield c
    finally:
        c.close()
