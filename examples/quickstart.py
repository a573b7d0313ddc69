"""The smallest fairstream service: JSON orders, one record at a time.

    fairstream broker --port 9092 &              # or your own Kafka
    export FAIRSTREAM_BOOTSTRAP=127.0.0.1:9092
    fairstream topic create orders --partitions 3
    fairstream run quickstart:app &
    fairstream produce orders '{"amount": 42}'

Settings come from the environment so the same file runs anywhere:
FAIRSTREAM_BOOTSTRAP, FAIRSTREAM_GROUP_ID (default ``quickstart``) and
QUICKSTART_TOPIC (default ``orders``).
"""

from __future__ import annotations

import os
from typing import Any

import structlog

from fairstream import App, Record

log = structlog.get_logger()

app = App(group_id=os.environ.get("FAIRSTREAM_GROUP_ID", "quickstart"), assignor="lag")


@app.subscriber(os.environ.get("QUICKSTART_TOPIC", "orders"))
async def handle(record: Record[dict[str, Any]]) -> None:
    # topic, partition and offset are added to this event by fairstream.logs.
    log.info("order_received", amount=record.value.get("amount"))
