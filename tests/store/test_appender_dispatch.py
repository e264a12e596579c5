"""The appender's end-of-turn dispatch (``MessageStore.dispatch_appended``) against the
reput thread's own pass.

A broker answers a send before its loop reads the next request, and dispatches what the
turn appended at the turn's end: a client that got SEND_OK and then pulls finds the
message. The reput thread still polls (every 50 ms) for what an appender left. When its
pass holds the dispatch lock at the moment the turn ends, the appender waits for it and
then dispatches the rest itself; returning with nothing dispatched (as it once did) let a
pull overtake the send it followed.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

from ledgermq.store.dispatch import DispatchRequest
from ledgermq.store.message_input import MessageInput
from ledgermq.store.message_store import MessageStore, open_message_store
from ledgermq.store.reput import PASS_WAIT_S, DispatchService
from tests.conftest import small_config

HOST = ("127.0.0.1", 10911)
TOPIC = "T"


def test_the_appender_waits_for_the_threads_pass_then_dispatches_what_it_appended(tmp_path: Path) -> None:
    store = open_message_store(small_config(tmp_path / "s"), store_host=HOST)
    store.start()
    reput = store.reput
    assert reput is not None
    in_pass = threading.Event()
    release = threading.Event()

    def hold_the_first(req: DispatchRequest) -> None:
        """Called under the dispatch lock: keeps the thread's pass going until released."""
        if req.queue_offset == 0 and threading.current_thread() is not threading.main_thread():
            in_pass.set()
            assert release.wait(30.0), "the test never released the reput thread"

    try:
        store.add_dispatch_hook(hold_the_first)
        store.set_appender_dispatches(True)
        store.put_message(MessageInput(topic=TOPIC, body=b"first"))
        reput.wakeup()  # the thread's pass takes the first record and stops in the hook
        assert in_pass.wait(30.0), "the reput thread never dispatched the first record"
        store.put_message(MessageInput(topic=TOPIC, body=b"second"))

        seen: list[tuple[dict[tuple[str, int], int], int]] = []

        def end_of_turn() -> None:
            grown = store.dispatch_appended()
            seen.append((grown, store.max_offset_in_queue(TOPIC, 0)))

        turn = threading.Thread(target=end_of_turn)
        turn.start()
        turn.join(0.5)  # well within the appender's bound (reput.PASS_WAIT_S)
        # The appender is still waiting for the pass: nothing came back without the record.
        assert seen == [], seen
        release.set()
        turn.join(30.0)
        assert not turn.is_alive()
        grown, readable_up_to = seen[0]
        assert readable_up_to == 2  # both records readable when the turn's dispatch returned
        # Whoever dispatched the second record announces it: the thread's pass (which may
        # go on past the first) to its listeners, the turn in what it returns.
        assert grown in ({}, {(TOPIC, 0): 2}), grown
    finally:
        release.set()
        store.shutdown()


def _store_with_an_undispatched_record(tmp_path: Path) -> tuple[MessageStore, DispatchService]:
    store = open_message_store(small_config(tmp_path / "s"), store_host=HOST)
    store.start()
    reput = store.reput
    assert reput is not None
    store.set_appender_dispatches(True)
    return store, reput


def _end_of_turn_in_a_thread(
    store: MessageStore, seen: list[tuple[dict[tuple[str, int], int], int]]
) -> threading.Thread:
    def end_of_turn() -> None:
        grown = store.dispatch_appended()
        seen.append((grown, store.max_offset_in_queue(TOPIC, 0)))

    turn = threading.Thread(target=end_of_turn)
    turn.start()
    return turn


def test_the_appender_waits_for_a_pass_that_has_the_lock_but_no_mark_of_its_own(tmp_path: Path) -> None:
    """The lock held as the thread's pass holds it, with nothing else said: the instants
    just after a pass takes the lock and just before it lets go. The appender waits, then
    dispatches (it once gave up there and answered first)."""
    store, reput = _store_with_an_undispatched_record(tmp_path)
    try:
        with reput.lock:
            store.put_message(MessageInput(topic=TOPIC, body=b"one"))
            seen: list[tuple[dict[tuple[str, int], int], int]] = []
            turn = _end_of_turn_in_a_thread(store, seen)
            turn.join(0.5)  # well within the appender's bound (reput.PASS_WAIT_S)
            assert seen == [], seen
        turn.join(30.0)
        assert not turn.is_alive()
        grown, readable_up_to = seen[0]
        assert readable_up_to == 1  # readable when the turn's dispatch returned
        assert grown in ({}, {(TOPIC, 0): 1}), grown  # by the turn, or by the thread's pass it waited for
    finally:
        store.shutdown()


def test_the_appender_leaves_its_records_to_the_thread_behind_a_long_hold(tmp_path: Path) -> None:
    """Repair, re-derivation and truncation announce a long hold: the appender's loop does
    not stall behind them; the thread dispatches once the hold ends."""
    store, reput = _store_with_an_undispatched_record(tmp_path)
    try:
        with reput.holding_long():
            store.put_message(MessageInput(topic=TOPIC, body=b"one"))
            seen: list[tuple[dict[tuple[str, int], int], int]] = []
            started = time.monotonic()
            turn = _end_of_turn_in_a_thread(store, seen)
            turn.join(30.0)
            assert not turn.is_alive()
            assert seen == [({}, 0)]  # nothing dispatched under the hold...
            assert time.monotonic() - started < PASS_WAIT_S / 2  # ...and no wait for it
        assert reput.wait_for(store.max_phy_offset, 30.0)
        assert store.max_offset_in_queue(TOPIC, 0) == 1
    finally:
        store.shutdown()
