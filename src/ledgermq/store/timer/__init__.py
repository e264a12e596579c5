"""Timer messages on disk (RocketMQ 5's timer wheel and timer log, RIP-43).

A message with a timer property is stored at once under ``rmq_sys_wheel_timer`` queue 0
(``intercept``: its real topic and queue in REAL_TOPIC / REAL_QID, its slot time in
TIMER_OUT_MS, which is also the consume-queue unit's tag code). ``TimerStore`` files each
such unit into the timer log (``timerlog/``, 52-byte units chained per slot) and the
timer wheel (``timerwheel``, one 32-byte slot per precision step over 14 days, a ring),
both memory-mapped, so nothing about a pending timer is held in the process's heap; its
progress (the next slot to deliver, how far into it, how much of the queue is filed) is
in ``config/timercheck``. Everything here is synchronous: the broker's timer service
(broker/timer/) runs it in a thread and writes the due messages through the broker.
"""
