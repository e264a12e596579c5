"""The calling-thread admission of the blocking facade's async sends: in order, bounded by
the producer's limits, woken by a close."""

from __future__ import annotations

import threading
import time

from ledgermq.client.sync.async_handoff import Admission, ThreadAdmission
from ledgermq.clock import SYSTEM_CLOCK


def _waiting(adm: ThreadAdmission, n: int) -> None:
    deadline = time.monotonic() + 20
    while len(adm._waiters) < n:
        assert time.monotonic() < deadline, "the thread never started waiting"
        time.sleep(0.005)


def _acquire_in_thread(adm: ThreadAdmission, size: int, timeout: float, out: list[str]) -> threading.Thread:
    t = threading.Thread(target=lambda: out.append(adm.acquire(size, timeout)))
    t.start()
    return t


def test_a_waiting_send_is_not_passed_by_smaller_ones_asking_later() -> None:
    adm = ThreadAdmission(max_count=10, max_bytes=100, clock=SYSTEM_CLOCK)
    assert adm.acquire(60, 1.0) == Admission.GRANTED
    big: list[str] = []
    t = _acquire_in_thread(adm, 60, 30.0, big)  # 60 + 60 > 100: waits
    _waiting(adm, 1)
    # 10 more bytes would fit, but the 60-byte send asked first
    assert adm.acquire(10, 0.2) == Admission.TIMED_OUT
    adm.release(60)
    t.join(20)
    assert big == [Admission.GRANTED] and (adm.count, adm.bytes) == (1, 60)
    assert adm.acquire(10, 0.0) == Admission.GRANTED  # nobody waits now


def test_count_limit_and_a_send_bigger_than_the_byte_budget() -> None:
    adm = ThreadAdmission(max_count=2, max_bytes=100, clock=SYSTEM_CLOCK)
    assert adm.acquire(500, 0.0) == Admission.GRANTED  # alone in flight, it goes
    assert adm.acquire(1, 0.0) == Admission.TIMED_OUT  # 501 bytes would be over
    adm.release(500)
    assert adm.acquire(1, 0.0) == adm.acquire(1, 0.0) == Admission.GRANTED
    assert adm.acquire(1, 0.0) == Admission.TIMED_OUT  # two in flight: the count limit


def test_close_wakes_the_waiting_and_refuses_later_callers() -> None:
    adm = ThreadAdmission(max_count=1, max_bytes=100, clock=SYSTEM_CLOCK)
    assert adm.acquire(1, 0.0) == Admission.GRANTED
    out: list[str] = []
    t = _acquire_in_thread(adm, 1, 60.0, out)
    _waiting(adm, 1)
    adm.close()
    t.join(20)
    assert out == [Admission.CLOSED] and not adm._waiters
    assert adm.acquire(1, 0.0) == Admission.CLOSED
