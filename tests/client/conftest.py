"""Every client test starts with an empty rate-limited log, so a condition another test
logged a moment ago is not suppressed here."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ledgermq.util.ratelog import limited


@pytest.fixture(autouse=True)
def _fresh_rate_limited_log() -> Iterator[None]:
    limited.clear()
    yield
    limited.clear()
