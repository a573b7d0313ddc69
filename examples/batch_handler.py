r"""A batch handler: up to 500 records per call, from several partitions, each in order.

    fairstream topic create clicks --partitions 4
    fairstream run batch_handler:app
    seq 1000 | sed 's/.*/{"page": "\/home", "n": &}/' | fairstream produce clicks -

Batches suit work with a per-call cost (a database round trip, a bulk index request):
the handler gets ``list[Record]`` built by the fair scheduler, so one partition's
backlog cannot fill every batch. Offsets are committed after the whole batch returns;
if it raises, the batch is retried and then each record goes to the dead-letter
policy. Environment: FAIRSTREAM_BOOTSTRAP, FAIRSTREAM_GROUP_ID (default
``click-counter``), CLICKS_TOPIC (default ``clicks``).
"""

from __future__ import annotations

import os
from collections import Counter
from typing import Any

import structlog

from fairstream import App, Record

log = structlog.get_logger()

app = App(group_id=os.environ.get("FAIRSTREAM_GROUP_ID", "click-counter"))


@app.subscriber(os.environ.get("CLICKS_TOPIC", "clicks"), batch=True, max_batch=500)
async def count_clicks(records: list[Record[dict[str, Any]]]) -> None:
    pages = Counter(record.value.get("page", "?") for record in records)
    partitions = sorted({record.partition for record in records})
    # One write per batch instead of one per record, e.g. an UPSERT of the counts.
    log.info("clicks_counted", records=len(records), pages=dict(pages), partitions=partitions)
