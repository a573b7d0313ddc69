"""A handler that fails for some records, and a consumer of its dead-letter topic.

    fairstream topic create orders --partitions 3
    fairstream run dead_letters:app &                # creates orders.dlq at start
    fairstream run dead_letters:dead_letters &
    fairstream produce orders '{"amount": -5}'       # retried twice, then dead-lettered

``app`` retries a failing record (here: a negative amount) with backoff, then
publishes it to ``orders.dlq`` with its key, value and headers plus the error and
where it came from, commits and moves on. ``dead_letters`` is a second App, in its own
group, that reads those records: alert, store them for a fix, or replay them later.
Environment: FAIRSTREAM_BOOTSTRAP, ORDERS_TOPIC (default ``orders``).
"""

from __future__ import annotations

import os
from typing import Any

import structlog

from fairstream import App, DeadLetterPolicy, Record, RetryPolicy

log = structlog.get_logger()

TOPIC = os.environ.get("ORDERS_TOPIC", "orders")


app = App(
    group_id="orders",
    retry=RetryPolicy(attempts=2, backoff=0.1),
    dead_letter=DeadLetterPolicy(on_error="dead_letter", topic_suffix=".dlq"),
)


@app.subscriber(TOPIC)
async def handle(record: Record[dict[str, Any]]) -> None:
    if record.value.get("amount", 0) < 0:
        raise ValueError(f"negative amount {record.value['amount']}")
    log.info("order_received", amount=record.value["amount"])


dead_letters = App(group_id="orders-dead-letters")


@dead_letters.subscriber(f"{TOPIC}.dlq")
async def inspect(record: Record[bytes]) -> None:
    headers = {name: value.decode() for name, value in record.headers}
    # The value is the original bytes; never log it (it may hold personal data).
    log.warning(
        "dead_letter_received",
        error_type=headers.get("fairstream.error.type"),
        error=headers.get("fairstream.error.message"),
        source_topic=headers.get("fairstream.source.topic"),
        source_partition=int(headers.get("fairstream.source.partition", -1)),
        source_offset=int(headers.get("fairstream.source.offset", -1)),
        attempts=int(headers.get("fairstream.attempts", 0)),
    )
