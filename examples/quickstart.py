"""The smallest fairstream service: JSON orders, one record at a time.

    fairstream broker &                      # or your own Kafka
    FAIRSTREAM_BOOTSTRAP=127.0.0.1:PORT fairstream run quickstart:app

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
