"""The app ``benchmarks/workers.py`` runs under ``fairstream run --workers N``.

A CPU-bound handler: ``BENCH_LOOPS`` iterations of a pure-Python loop per record
(the benchmark calibrates it to about 1 ms), then the time it finished, appended
to ``BENCH_LOG`` (one file per process, so no two processes share a write).
"""

from __future__ import annotations

import os
import time

from fairstream import App, Record, SchedulerConfig

app = App(
    group_id=os.environ.get("BENCH_GROUP", "workers-bench"),
    scheduler=SchedulerConfig(commit_interval=1.0),
)
_loops = int(os.environ.get("BENCH_LOOPS", "20000"))
_log: list[int] = []  # opened at the first record: importing this module writes nothing


def spin(loops: int) -> int:
    """Pure Python work that holds the GIL (the stand-in for parsing, scoring, ...)."""
    total = 0
    for i in range(loops):
        total += i * i % 7
    return total


@app.subscriber(os.environ.get("BENCH_TOPIC", "workers-bench"))
async def handle(record: Record[bytes]) -> None:
    spin(_loops)
    if not _log:
        path = f"{os.environ.get('BENCH_LOG', 'workers-bench')}.{os.getpid()}"
        _log.append(os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644))
    os.write(_log[0], f"{time.time()}\n".encode())
