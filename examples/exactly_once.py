r"""Exactly-once consume-transform-produce: each order's enriched copy appears once.

    fairstream topic create orders --partitions 4
    fairstream topic create orders-enriched --partitions 4
    fairstream run exactly_once:app
    seq 20 | sed 's/.*/{"n": &, "total": &0}/' | fairstream produce orders -

With ``processing="exactly_once"`` what the handler publishes and the group's offset
for the record commit in one Kafka transaction (every 100 ms), so a reader with
``isolation_level="read_committed"`` sees each order's enriched copy exactly once,
even if the app is killed (``kill -9``) and restarted mid-stream. A side effect
outside Kafka (an HTTP call) would still happen at least once. Environment:
FAIRSTREAM_BOOTSTRAP, FAIRSTREAM_GROUP_ID (default ``enrich``), ORDERS_TOPIC (default
``orders``), ENRICHED_TOPIC (default ``orders-enriched``).
"""

from __future__ import annotations

import os
from typing import Any

from fairstream import App, Record

app = App(group_id=os.environ.get("FAIRSTREAM_GROUP_ID", "enrich"), processing="exactly_once")
ENRICHED = os.environ.get("ENRICHED_TOPIC", "orders-enriched")


@app.subscriber(os.environ.get("ORDERS_TOPIC", "orders"))
async def enrich(record: Record[dict[str, Any]]) -> None:
    order = record.value
    await app.publish(ENRICHED, {**order, "vip": order.get("total", 0) > 100}, key=record.key)
