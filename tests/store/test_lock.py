"""One store per directory, and the abort marker that tells a crash from a clean stop.

RocketMQ (4.9.7 ``DefaultMessageStore``): ``<root>/lock`` is locked for the store's
lifetime so a second broker on the same directory fails to start; ``<root>/abort`` is
created at start and deleted by a clean shutdown, so finding it at start means the last
run died and recovery must be the abnormal kind.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ledgermq.errors import StoreError, StoreLockedError
from ledgermq.store.message_input import MessageInput
from ledgermq.store.message_store import open_message_store
from ledgermq.store.results import GetStatus, PutStatus
from tests.conftest import small_config

CHILD_TIMEOUT = 30

# Child-process preamble: a store on argv[1] with the test sizes.
_PREAMBLE = textwrap.dedent(
    """
    import os, sys
    from ledgermq.config import StoreConfig
    from ledgermq.errors import StoreLockedError
    from ledgermq.store.message_input import MessageInput
    from ledgermq.store.message_store import MessageStore, open_message_store
    cfg = StoreConfig(
        root_dir=sys.argv[1],
        mapped_file_size_commitlog=64 * 1024,
        mapped_file_size_consume_queue=20 * 64,
        max_hash_slot_num=64,
        max_index_num=256,
    )
    store = open_message_store(cfg)
    """
)

OPEN_AND_CLOSE = _PREAMBLE + textwrap.dedent(
    """
    try:
        store.start()
    except StoreLockedError as exc:
        print("LOCKED", exc, flush=True)
        sys.exit(3)
    print("OPENED", flush=True)
    store.shutdown()
    """
)

PUT_AND_DIE = _PREAMBLE + textwrap.dedent(
    """
    store.start()
    r = store.put_message(MessageInput(topic="LockTopic", body=b"outlives its writer"))
    assert r.ok, r
    print("PUT", r.append.wrote_offset, flush=True)
    os._exit(0)  # no shutdown: threads, lock and abort marker are left as a crash leaves them
    """
)


def run_child(script: str, root: Path) -> subprocess.CompletedProcess[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", script, str(root)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    try:
        out, err = proc.communicate(timeout=CHILD_TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def test_a_second_store_in_the_same_process_is_refused(store_factory, tmp_path: Path) -> None:
    root = tmp_path / "store"
    first = store_factory()
    second = open_message_store(small_config(root))
    with pytest.raises(StoreLockedError) as info:
        second.start()
    text = str(info.value)
    assert str(root) in text and "in use" in text
    assert isinstance(info.value, StoreError)
    assert not second.running

    # The refused opener changed nothing: the first store keeps its lock and its marker.
    assert (root / "abort").exists()
    assert first.put_message_sync(MessageInput(topic="LockTopic", body=b"x")).status is PutStatus.PUT_OK
    with pytest.raises(StoreLockedError):
        open_message_store(small_config(root)).start()


def test_a_second_process_is_refused_while_the_first_holds_the_store(store_factory, tmp_path: Path) -> None:
    root = tmp_path / "store"
    first = store_factory()
    child = run_child(OPEN_AND_CLOSE, root)
    assert child.returncode == 3, (child.stdout, child.stderr)
    assert child.stdout.startswith("LOCKED")
    assert str(root) in child.stdout and "in use" in child.stdout
    assert first.running

    first.shutdown()
    child = run_child(OPEN_AND_CLOSE, root)
    assert child.returncode == 0, (child.stdout, child.stderr)
    assert child.stdout.strip() == "OPENED"


def test_abort_marker_exists_while_running_and_a_clean_shutdown_removes_it(store_factory, tmp_path: Path) -> None:
    root = tmp_path / "store"
    store = store_factory()
    assert (root / "abort").exists()
    assert (root / "lock").exists()
    assert store.recovery is not None and not store.recovery.abnormal  # a fresh directory
    store.shutdown()
    assert not (root / "abort").exists()

    again = store_factory()
    assert again.recovery is not None and not again.recovery.abnormal
    assert (root / "abort").exists()


def test_a_process_that_dies_leaves_the_abort_marker_and_the_next_start_is_abnormal(
    store_factory, tmp_path: Path
) -> None:
    root = tmp_path / "store"
    child = run_child(PUT_AND_DIE, root)
    assert child.returncode == 0, (child.stdout, child.stderr)
    word, offset = child.stdout.split()
    assert word == "PUT"
    assert (root / "abort").exists()

    # The dead process's lock went with it; the abort marker did not.
    store = store_factory()
    assert store.recovery is not None and store.recovery.abnormal
    assert store.wait_dispatched(timeout=5)
    got = store.get_message("LockTopic", 0, 0, 32)
    assert got.status is GetStatus.FOUND
    assert len(got.messages) == 1
    rec = store.look_message_by_offset(int(offset))
    assert rec is not None and rec == got.messages[0]

    store.shutdown()
    assert not (root / "abort").exists()
    clean = store_factory()
    assert clean.recovery is not None and not clean.recovery.abnormal


def test_shutdown_releases_the_lock(store_factory, tmp_path: Path) -> None:
    root = tmp_path / "store"
    store = store_factory()
    assert store.put_message(MessageInput(topic="LockTopic", body=b"kept")).ok
    store.shutdown()
    reopened = open_message_store(small_config(root))
    try:
        reopened.start()
        assert reopened.wait_dispatched(timeout=5)
        assert reopened.max_offset_in_queue("LockTopic", 0) == 1
    finally:
        reopened.shutdown()
    # ... and so does a second shutdown of the same object (a no-op), and a context manager.
    store.shutdown()
    with open_message_store(small_config(root)) as third:
        assert third.running
    with open_message_store(small_config(root)) as fourth:
        assert fourth.running


def test_a_failed_start_releases_the_lock(tmp_path: Path) -> None:
    root = tmp_path / "store"
    (root / "commitlog").mkdir(parents=True)
    bad = root / "commitlog" / f"{0:020d}"
    bad.write_bytes(b"\0" * 1000)  # not the configured segment size: start-up must stop
    store = open_message_store(small_config(root))
    with pytest.raises(StoreError, match="segment size"):
        store.start()
    assert not store.running

    bad.unlink()
    retry = open_message_store(small_config(root))
    try:
        retry.start()
        assert retry.running
    finally:
        retry.shutdown()
    assert not (root / "abort").exists()
    assert os.path.exists(root / "lock")
