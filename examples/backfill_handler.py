"""An example backfill handler: re-index JSON orders, one JSON line per record.

Each Spark task calls the handler once per Kafka record, in offset order within a
chunk. This one decodes the value as JSON and appends a small summary to a
JSON-lines file per executor process under ``$BACKFILL_OUT`` (default: a
``fairstream-backfill-example`` folder in the temp directory), standing in for a
search index or a warehouse table. Set ``BACKFILL_OUT`` before starting the
command: executors inherit the environment of the process that starts Spark.

Run from the repository root, against a broker that has an ``orders`` topic::

    fairstream broker &                    # prints bootstrap=127.0.0.1:PORT
    fairstream backfill --bootstrap 127.0.0.1:PORT --group reindex --topics orders \\
        --handler examples.backfill_handler:handle --master 'local[2]'

``handle_async`` is the same with an ``async def``: fairstream awaits it in one
event loop per Spark task, so an async client can be kept per loop.
"""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
from pathlib import Path

from fairstream.spark import BackfillRecord


def _out_file() -> Path:
    folder = Path(
        os.environ.get("BACKFILL_OUT")
        or Path(tempfile.gettempdir()) / "fairstream-backfill-example"
    )
    folder.mkdir(parents=True, exist_ok=True)
    return folder / f"orders-{os.getpid()}.jsonl"


def summarize(record: BackfillRecord) -> dict[str, object]:
    """What gets indexed: the record's coordinates plus a few fields of the order."""
    try:
        order = json.loads(record.value) if record.value is not None else {}
    except ValueError:
        order = {}
    if not isinstance(order, dict):
        order = {}
    return {
        "topic": record.topic,
        "partition": record.partition,
        "offset": record.offset,
        "timestamp_ms": record.timestamp,
        "customer": order.get("customer"),
        "amount": order.get("amount"),
        "deleted": record.value is None,
    }


def handle(record: BackfillRecord) -> None:
    """Append the record's summary to this process's JSON-lines file."""
    with _out_file().open("a") as out:
        out.write(json.dumps(summarize(record)) + "\n")


async def handle_async(record: BackfillRecord) -> None:
    """The async flavour: yield to the task's event loop, then write as :func:`handle`."""
    await asyncio.sleep(0)
    handle(record)
