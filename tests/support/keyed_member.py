"""A key-ordered member for the SIGKILL test, run as a real process.

``fairstream run tests.support.keyed_member:app`` from the repository root.

Configured by the environment: ``FAIRSTREAM_BOOTSTRAP``, ``FAIRSTREAM_GROUP_ID``,
``FAIRSTREAM_INSTANCE_ID``, ``KEYED_TOPIC``, ``KEYED_SINK`` (a file the handler
appends each finished value to, one write per record, so a SIGKILL loses no line
of a finished record) and ``KEYED_OFFSET_MAP`` (``0``: commit the watermark only).
The first record of every fifth key is slow (5 s), so each partition's watermark
stays behind it while the other keys finish above it, as it does with real I/O.
"""

from __future__ import annotations

import os
from pathlib import Path

import anyio

from fairstream import App, Record, SchedulerConfig

SINK = Path(os.environ["KEYED_SINK"])

app = App(
    group_id=os.environ["FAIRSTREAM_GROUP_ID"],
    scheduler=SchedulerConfig(
        ordering="key",
        concurrency=256,
        commit_interval=0.1,
        offset_map=os.environ.get("KEYED_OFFSET_MAP", "1") == "1",
    ),
)


def _write(line: str) -> None:
    with SINK.open("a") as sink:
        sink.write(line)


@app.subscriber(os.environ["KEYED_TOPIC"])
async def handle(record: Record[str]) -> None:
    key, seq = record.value.split(":")
    await anyio.sleep(5 if int(key[1:]) % 5 == 0 and seq == "0" else 0.1)
    _write(f"{record.value}\n")  # before the offset can be finished
