"""Timer message delivery (RocketMQ 5's timer dequeue services): the broker side.

``TimerService`` files rmq_sys_wheel_timer's queue into the on-disk wheel on every broker
(store/timer/), and on the master (DLedger leader; started and stopped with mastership
where the delay-level service is) writes each due message to its real topic through the
broker's writer. ``convert`` builds those messages from the stored records.
"""
