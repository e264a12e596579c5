"""Shared fixtures: small stores in temporary directories, always shut down."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ledgermq.clock import Clock
from ledgermq.config import StoreConfig
from ledgermq.store.message_store import MessageStore

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
        store = MessageStore(cfg, **kwargs)
        store.start()
        made.append(store)
        return store

    yield make
    for s in made:
        s.shutdown()


def with_config(cfg: StoreConfig, **changes: Any) -> StoreConfig:
    return dataclasses.replace(cfg, **changes)
