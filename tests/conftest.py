"""Shared fixtures: small stores in temporary directories, always shut down; and what keeps
every test honest: Hypothesis runs the same examples each time, Raft election jitter is
seeded, and an exception a background thread or asyncio task raised fails its test."""

from __future__ import annotations

import dataclasses
import gc
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

from ledgermq.clock import Clock
from ledgermq.config import StoreConfig
from ledgermq.raftio import driver as raft_driver
from ledgermq.store.message_store import MessageStore, open_message_store
from tests.background_errors import MARKER, BackgroundErrors, allow_list, collecting

# Every Hypothesis test draws the same examples on every run (seeded from the test's own
# name), so a failure reproduces and a pass is not luck. Example counts stay as each test
# sets them. No deadline and no too_slow health check: both measure the wall clock, which a
# loaded machine stretches; what a property test checks is the property.
# LEDGERMQ_HYPOTHESIS_PROFILE=explore draws fresh examples (for hunting, not for CI).
settings.register_profile(
    "deterministic",
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    print_blob=True,
)
settings.register_profile("explore", parent=settings.get_profile("deterministic"), derandomize=False)
settings.load_profile(os.environ.get("LEDGERMQ_HYPOTHESIS_PROFILE", "deterministic"))

RAFT_JITTER_SEED = 20240523
"""Seeds the election jitter of every Raft driver a test starts (each node's stream is
derived from this and its id), so the order in which nodes time out repeats run to run."""


def pytest_collection_finish(session: pytest.Session) -> None:
    """What exists once the tests are collected (modules, Hypothesis strategies) lives for the
    whole run: freeze it, so the collection each test's teardown runs (to hear about tasks
    whose exception nobody retrieved) only walks what the tests made."""
    gc.collect()
    gc.freeze()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{MARKER}(*exception_types, reason): this test provokes these exceptions in background "
        "threads or asyncio tasks on purpose; they do not fail it (tests/background_errors.py)",
    )


@pytest.fixture(autouse=True)
def background_errors(request: pytest.FixtureRequest) -> Iterator[BackgroundErrors]:
    """Fails the test at teardown if a thread or an asyncio task/callback raised an exception
    nobody handled (unless the test's ``allow_background_errors`` marker lists its type)."""
    errors = BackgroundErrors(allow_list(request.node))
    with collecting(errors):
        yield errors
    if errors.unexpected:
        pytest.fail(errors.report(), pytrace=False)


@pytest.fixture(autouse=True)
def seeded_raft_jitter() -> Iterator[None]:
    """Raft drivers started in this process draw election jitter from a seeded generator."""
    raft_driver.seed_election_jitter(RAFT_JITTER_SEED)
    yield
    raft_driver.seed_election_jitter(None)


# Small sizes so tests exercise segment rollover with a handful of messages.
SMALL = dict(
    mapped_file_size_commitlog=64 * 1024,
    mapped_file_size_consume_queue=20 * 64,
    max_hash_slot_num=64,
    max_index_num=256,
    flush_interval_commitlog_ms=50,
    flush_interval_consume_queue_ms=50,
    delete_commitlog_files_interval_ms=0,
)


def small_config(root: Path, **overrides: Any) -> StoreConfig:
    return StoreConfig(root_dir=str(root), **{**SMALL, **overrides})


@pytest.fixture
def store_factory(tmp_path: Path) -> Iterator[Callable[..., MessageStore]]:
    """``store_factory(**config_overrides, clock=..., root=...)`` -> a started MessageStore.

    Every store made here is shut down at the end of the test (if still running).
    """
    made: list[MessageStore] = []

    def make(*, root: Path | None = None, clock: Clock | None = None, **overrides: Any) -> MessageStore:
        cfg = small_config(root or tmp_path / "store", **overrides)
        kwargs: dict[str, Any] = {}
        if clock is not None:
            kwargs["clock"] = clock
        store = open_message_store(cfg, **kwargs)
        store.start()
        made.append(store)
        return store

    yield make
    for s in made:
        s.shutdown()


def with_config(cfg: StoreConfig, **changes: Any) -> StoreConfig:
    return dataclasses.replace(cfg, **changes)
