"""Fixtures for the ACL process tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.acl.acl_cluster import acl_cluster
from tests.compat.cluster import Cluster


@pytest.fixture
def acl_broker(tmp_path: Path) -> Iterator[Cluster]:
    """A name server and an aclEnable=true broker (plain_acl.yml = ACL_YML), killed afterwards."""
    c = acl_cluster(tmp_path / "cluster")
    try:
        c.start()
        yield c
    finally:
        c.close()
