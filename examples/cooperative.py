"""Cooperative rebalancing (KIP-429): what a member keeps, it reads on through a rebalance.

    fairstream broker --port 9092 &              # or your own Kafka
    export FAIRSTREAM_BOOTSTRAP=127.0.0.1:9092
    fairstream topic create orders --partitions 8
    FAIRSTREAM_INSTANCE_ID=a fairstream run cooperative:app &   # from examples/
    FAIRSTREAM_INSTANCE_ID=b fairstream run cooperative:app &
    FAIRSTREAM_INSTANCE_ID=c fairstream run cooperative:app

When ``c`` joins, ``a`` and ``b`` go on handling the partitions they keep; the ones
that move to ``c`` are revoked (committed) by their owner and assigned to ``c`` one
rebalance later: watch the ``cooperative_assignment`` events (``kept``, ``revoked``,
``added``). A stable ``FAIRSTREAM_INSTANCE_ID`` per member (static membership) gets
a restarted member its partitions back at once.
"""

from __future__ import annotations

import os

import structlog

from fairstream import App, Record

log = structlog.get_logger()

app = App(
    group_id=os.environ.get("FAIRSTREAM_GROUP_ID", "orders"),
    assignor="sticky",  # or "lag": the strategies that keep partitions with their owners
    cooperative=True,
)


@app.subscriber(os.environ.get("ORDERS_TOPIC", "orders"))
async def handle(record: Record[bytes]) -> None:
    log.info("order", partition=record.partition, offset=record.offset)
