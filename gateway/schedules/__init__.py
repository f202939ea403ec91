"""Schedules: ScheduleService on the gateway's port and the scheduler every gateway replica runs.

`timing.py` reads a schedule's clock (cron in a time zone, an interval, one time) with
croniter; `scheduler.py` claims due ticks exactly once across replicas and drives each run's
turn to its outcome; `servicer.py` is the public API. The records live in the sessions
service (services/sessions/schedules). docs/schedules.md tells the whole story.
"""
