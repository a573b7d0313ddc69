"""The app ``fairstream run --workers N`` runs in the supervisor tests.

Configured from the environment: ``WORKERS_TOPIC``, ``WORKERS_GROUP``,
``WORKERS_INSTANCE`` (the static member id the workers suffix with ``-<i>``) and
``WORKERS_LOG``, a file that gets ``<pid> <instance_id> <partition>:<offset>`` per
record, written before the handler returns.
"""

from __future__ import annotations

import os

from fairstream import App, Record, SchedulerConfig

app = App(
    group_id=os.environ.get("WORKERS_GROUP", "workers"),
    instance_id=os.environ.get("WORKERS_INSTANCE") or None,
    scheduler=SchedulerConfig(commit_interval=0.2),
)
_log = os.environ.get("WORKERS_LOG", "workers.log")


@app.subscriber(os.environ.get("WORKERS_TOPIC", "workers"))
async def handle(record: Record[bytes]) -> None:
    line = f"{os.getpid()} {app.instance_id} {record.partition}:{record.offset}\n"
    fd = os.open(_log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)
