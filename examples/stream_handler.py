"""An example handler for ``fairstream stream``: count clicks per page, one line per record.

The streaming query calls the handler once per Kafka record in the executors (the
same contract as ``fairstream backfill``, a :class:`~fairstream.spark.BackfillRecord`).
This one appends ``partition offset page`` to a file per executor process under
``$STREAM_OUT`` (default: a ``fairstream-stream-example`` folder in the temp
directory), standing in for a counter store. Records arrive at least once: a batch
cut short by a failure is read again from the checkpoint, so a real sink should be
idempotent per ``(topic, partition, offset)``.

Run from the repository root against a broker with a ``clicks`` topic::

    fairstream broker &                    # prints bootstrap=127.0.0.1:PORT
    export FAIRSTREAM_BOOTSTRAP=127.0.0.1:PORT
    fairstream topic create clicks --partitions 4
    printf '%s\n' home cart home checkout | fairstream produce clicks -
    fairstream stream --group clicks-pipeline --topics clicks \\
        --handler examples.stream_handler:handle --checkpoint /tmp/ck-clicks \\
        --max-records 20000 --master 'local[2]'
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from fairstream.spark import BackfillRecord


def handle(record: BackfillRecord) -> None:
    folder = Path(
        os.environ.get("STREAM_OUT") or Path(tempfile.gettempdir()) / "fairstream-stream-example"
    )
    folder.mkdir(parents=True, exist_ok=True)
    page = (record.value or b"").decode(errors="replace")[:40] or "-"
    with open(folder / f"clicks-{os.getpid()}.txt", "a") as out:
        out.write(f"{record.partition} {record.offset} {page}\n")
