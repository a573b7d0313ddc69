r"""Key-ordered concurrency: hundreds of I/O-bound records in flight, each key in order.

    fairstream topic create orders --partitions 4
    fairstream run key_ordered:app
    for c in $(seq 0 9); do
        seq 10 | sed 's/.*/{"n": &}/' | fairstream produce orders - --key c$c
    done

The handler waits on I/O (a stand-in for an HTTP call: 50 ms). With the default
``ordering="partition"`` a partition has one record in flight, so four partitions
handle 80 records/s; with ``ordering="key"`` every key (here: the customer) has one,
so records of different customers run side by side, even of one partition, while
each customer's orders stay in the order they were produced. Environment:
FAIRSTREAM_BOOTSTRAP, FAIRSTREAM_GROUP_ID (default ``order-sync``), ORDERS_TOPIC
(default ``orders``).
"""

from __future__ import annotations

import os
from typing import Any

import anyio
import structlog

from fairstream import App, Record, SchedulerConfig

log = structlog.get_logger()

app = App(
    group_id=os.environ.get("FAIRSTREAM_GROUP_ID", "order-sync"),
    scheduler=SchedulerConfig(ordering="key", concurrency=256),
)


@app.subscriber(os.environ.get("ORDERS_TOPIC", "orders"))
async def sync_order(record: Record[dict[str, Any]]) -> None:
    await anyio.sleep(0.05)  # e.g. await http.post(...): the next order of this key waits
    customer = record.key.decode() if record.key else None
    log.info("order_synced", customer=customer, n=record.value.get("n"))
