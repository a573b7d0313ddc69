"""A parallel-rebalance member for the crash test, run as a real process.

``fairstream run tests.support.shadow_member:app`` from the repository root.

Configured by the environment: ``FAIRSTREAM_BOOTSTRAP``, ``FAIRSTREAM_GROUP_ID``,
``FAIRSTREAM_INSTANCE_ID``, ``SHADOW_TOPIC``, ``SHADOW_SINK`` (a file the handler
appends ``value replay`` lines to, one write per record, so a SIGKILL loses no
line of a record already handled) and ``SHADOW_REPLAY_DELAY`` (seconds per
replayed record, so the test can kill the process mid-shadow).
"""

from __future__ import annotations

import os
from pathlib import Path

import anyio

from fairstream import App, ParallelRebalance, Record, SchedulerConfig

SINK = Path(os.environ["SHADOW_SINK"])
DELAY = float(os.environ.get("SHADOW_REPLAY_DELAY", "0"))

app = App(
    group_id=os.environ["FAIRSTREAM_GROUP_ID"],
    parallel_rebalance=ParallelRebalance(threshold=500),
    scheduler=SchedulerConfig(commit_interval=0.2, partition_quota=50, max_batch=100),
)


def _write(line: str) -> None:
    with SINK.open("a") as sink:
        sink.write(line)


@app.subscriber(os.environ["SHADOW_TOPIC"])
async def handle(record: Record[str]) -> None:
    _write(f"{record.value} {int(record.replay)}\n")  # done before the offset can advance
    if record.replay:
        await anyio.sleep(DELAY)
