"""The timer settings, derived once from the store config (RocketMQ 5's rules applied)."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from ledgermq.config import StoreConfig

log = logging.getLogger(__name__)

DAY_SECS = 24 * 3600
TIMER_WHEEL_TTL_DAY = 7  # slots in the wheel: 7 days' worth at 1 s, whatever the precision
TIMER_BLANK_SLOTS = 60
PRECISIONS_MS = (100, 200, 500, 1000)


def round_precision(value: int) -> int:
    """RocketMQ's ``setTimerPrecisionMs``: the largest of 100/200/500/1000 not above the value
    (100 below it). A value that is not one of them is logged: the wheel's slot times and
    the files' meaning depend on it."""
    chosen = PRECISIONS_MS[0]
    for candidate in PRECISIONS_MS:
        if value >= candidate:
            chosen = candidate
    if chosen != value:
        log.warning("timerPrecisionMs=%d is not one of %s: using %d, as RocketMQ does", value, PRECISIONS_MS, chosen)
    return chosen


@dataclass(frozen=True, slots=True)
class TimerSettings:
    enabled: bool = True
    precision_ms: int = 1000
    max_delay_ms: int = 3 * DAY_SECS * 1000
    roll_window_slots: int = 2 * DAY_SECS
    flush_interval_ms: int = 1000
    intercept_delay_level: bool = False
    log_file_size: int = 100 * 1024 * 1024
    slots_total: int = TIMER_WHEEL_TTL_DAY * DAY_SECS

    @classmethod
    def from_store_config(cls, config: StoreConfig) -> TimerSettings:
        slots_total = TIMER_WHEEL_TTL_DAY * DAY_SECS
        window = config.timer_roll_window_slot
        if window > slots_total - TIMER_BLANK_SLOTS or window < 2:  # as TimerMessageStore's constructor
            window = slots_total - TIMER_BLANK_SLOTS
        return cls(
            enabled=config.timer_wheel_enable,
            precision_ms=round_precision(config.timer_precision_ms),
            max_delay_ms=config.timer_max_delay_sec * 1000,
            roll_window_slots=window,
            flush_interval_ms=config.timer_flush_interval_ms,
            intercept_delay_level=config.timer_intercept_delay_level,
            log_file_size=config.mapped_file_size_timer_log,
            slots_total=slots_total,
        )

    @property
    def roll_window_ms(self) -> int:
        return self.roll_window_slots * self.precision_ms

    def slot_of(self, time_ms: int) -> int:
        """The start of the precision step holding ``time_ms``."""
        return time_ms // self.precision_ms * self.precision_ms
