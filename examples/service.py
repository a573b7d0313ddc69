"""A service as FastStream users write one: results published, lifecycle hooks, rebalance
listeners.

    fairstream topic create orders --partitions 3
    fairstream topic create receipts --partitions 3
    fairstream run service:app &
    fairstream produce orders --key alice '{"id": 1, "amount": "12.50"}'
    fairstream produce orders --key bob '{"id": 2, "amount": "0"}'     # free: no receipt

``bill`` returns a ``Receipt``: ``@app.publisher`` sends it to ``receipts``, as JSON,
with the order's key, and the order's offset is committed only once the broker has the
receipt. ``None`` sends nothing. The hooks run under ``fairstream run``, ``app.run()``,
``async with app`` and ``FastAPI(lifespan=app.lifespan)`` alike; the listeners keep a
count per partition, and log it when the partition leaves (after its offsets were
committed). Needs pydantic. Environment: FAIRSTREAM_BOOTSTRAP, FAIRSTREAM_GROUP_ID
(default ``billing``), ORDERS_TOPIC (default ``orders``), RECEIPTS_TOPIC (default
``receipts``).
"""

from __future__ import annotations

import os
from decimal import Decimal

import structlog
from aiokafka import TopicPartition
from pydantic import BaseModel

from fairstream import App, Record

log = structlog.get_logger()

app = App(group_id=os.environ.get("FAIRSTREAM_GROUP_ID", "billing"))
billed: dict[int, int] = {}  # orders billed per partition this member owns


class Order(BaseModel):
    id: int
    amount: Decimal


class Receipt(BaseModel):
    order: int
    amount: Decimal


@app.on_startup
async def connect() -> None:
    log.info("service_started")  # open a pool, warm a cache: before any record


@app.on_partitions_assigned
async def start_counting(partitions: list[TopicPartition]) -> None:
    billed.update({tp.partition: 0 for tp in partitions})


@app.publisher(os.environ.get("RECEIPTS_TOPIC", "receipts"))
@app.subscriber(os.environ.get("ORDERS_TOPIC", "orders"))
async def bill(record: Record[Order]) -> Receipt | None:
    order = record.value
    if order.amount == 0:
        return None  # nothing to publish
    billed[record.partition] += 1
    log.info("order_billed", id=order.id)
    return Receipt(order=order.id, amount=order.amount)


@app.on_partitions_revoked
async def report(partitions: list[TopicPartition]) -> None:
    for tp in partitions:
        log.info("partition_billed", partition=tp.partition, orders=billed.pop(tp.partition, 0))


@app.on_shutdown
async def disconnect() -> None:
    log.info("service_stopped")  # close the pool: the last commit is done
