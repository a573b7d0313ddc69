"""Producer to consumer in one script: publish ten orders, handle them, print a summary.

    fairstream broker --port 9092 &                # or your own Kafka
    export FAIRSTREAM_BOOTSTRAP=127.0.0.1:9092
    fairstream topic create orders --partitions 3
    python produce_and_consume.py

A plain aiokafka producer writes the records and a fairstream App consumes them (inside
a handler, ``await app.publish(...)`` uses the App's own producer); the script exits
once it has handled every order it published. Each run tags its orders, so records left
in the topic by earlier runs are handled but not counted.
Environment: FAIRSTREAM_BOOTSTRAP, ORDERS_TOPIC (default ``orders``),
FAIRSTREAM_GROUP_ID (default ``produce-and-consume``).
"""

from __future__ import annotations

import json
import os
import uuid
from typing import Any

import anyio
from aiokafka import AIOKafkaProducer

from fairstream import App, Record, logs

TOPIC = os.environ.get("ORDERS_TOPIC", "orders")
ORDERS = 10
RUN = uuid.uuid4().hex[:8]

app = App(group_id=os.environ.get("FAIRSTREAM_GROUP_ID", "produce-and-consume"))
amounts: dict[int, int] = {}
all_handled = anyio.Event()


@app.subscriber(TOPIC)
async def handle(record: Record[dict[str, Any]]) -> None:
    order = record.value
    if order.get("run") != RUN:
        return  # an order from an earlier run
    amounts[order["n"]] = order["amount"]  # a redelivered record counts once
    if len(amounts) == ORDERS:
        all_handled.set()


async def publish_orders() -> None:
    """Any Kafka producer will do; this is aiokafka's, which fairstream builds on."""
    producer = AIOKafkaProducer(bootstrap_servers=app.bootstrap)
    await producer.start()
    try:
        for n in range(ORDERS):
            order = {"run": RUN, "n": n, "amount": 10 * n}
            # The key picks the partition: one customer's orders stay in order.
            await producer.send(TOPIC, json.dumps(order).encode(), key=b"customer-%d" % (n % 3))
        await producer.flush()
    finally:
        await producer.stop()


async def main() -> None:
    async with app:  # consumes in the background until the block ends
        await publish_orders()
        with anyio.fail_after(60):
            await all_handled.wait()
    print(f"handled {len(amounts)} orders of run {RUN}, {sum(amounts.values())} in total")


if __name__ == "__main__":
    logs.configure("auto", "WARNING")  # fairstream's events to stderr; stdout stays ours
    anyio.run(main)
