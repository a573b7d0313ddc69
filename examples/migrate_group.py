"""Migrating a group: a fairstream App joins a group a plain aiokafka consumer owns.

    fairstream broker --port 9092 &                # or your own Kafka
    export FAIRSTREAM_BOOTSTRAP=127.0.0.1:9092
    fairstream topic create payments --partitions 4
    python migrate_group.py

The plain consumer stands for the pods you run today (aiokafka's default strategy,
``roundrobin``; librdkafka and Java offer ``range`` and ``roundrobin`` too). The App
offers ``["lag", "roundrobin", "range"]``: it joins under ``roundrobin``, the one
protocol both sides offer, and once the last plain member has left, the group runs
``fairstream-lag`` (on Kafka and noida; tansu keeps the first protocol, README
"Migrating an existing group"). Every record is handled, by one side or the other.
Environment: FAIRSTREAM_BOOTSTRAP, PAYMENTS_TOPIC (default ``payments``),
FAIRSTREAM_GROUP_ID (default ``migrate-group``), FAIRSTREAM_INSTANCE_ID (the pod
name; on noida, give one: it never evicts a dynamic member's old id).
"""

from __future__ import annotations

import json
import os
import uuid
from typing import Any

import anyio
import anyio.abc
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from fairstream import App, Record, logs

TOPIC = os.environ.get("PAYMENTS_TOPIC", "payments")
GROUP = os.environ.get("FAIRSTREAM_GROUP_ID", "migrate-group")
RECORDS = 400
RUN = uuid.uuid4().hex[:8]

# The new deployment: lag first, then what the old pods speak.
app = App(group_id=GROUP, assignor=["lag", "roundrobin", "range"])
handled: dict[str, set[int]] = {"plain": set(), "fairstream": set()}


@app.subscriber(TOPIC)
async def handle(record: Record[dict[str, Any]]) -> None:
    if record.value.get("run") == RUN:  # records of earlier runs are not counted
        handled["fairstream"].add(record.value["n"])


async def produce(numbers: range) -> int:
    """Send the numbered records; returns the topic's partition count."""
    producer = AIOKafkaProducer(bootstrap_servers=app.bootstrap)
    await producer.start()
    try:
        for n in numbers:
            await producer.send(TOPIC, json.dumps({"run": RUN, "n": n}).encode())
        await producer.flush()
        return len(await producer.partitions_for(TOPIC))
    finally:
        await producer.stop()


async def old_pod(
    leave: anyio.Event, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
) -> None:
    """Today's consumer: plain aiokafka, committing what it handled, until told to leave.

    It reports itself started once it holds its partitions, as today's pods do before
    a new deployment begins: two members joining a new group at once race, and the
    broker may settle the group with one of them holding nothing.
    """
    consumer = AIOKafkaConsumer(
        TOPIC, bootstrap_servers=app.bootstrap, group_id=GROUP, enable_auto_commit=False
    )
    await consumer.start()
    try:
        holding = False
        while not leave.is_set():
            batches = await consumer.getmany(timeout_ms=200)
            if not holding and consumer.assignment():
                holding = True
                task_status.started()
            for records in batches.values():
                for record in records:
                    value = json.loads(record.value or b"{}")
                    if value.get("run") == RUN:
                        handled["plain"].add(value["n"])
            if batches:
                await consumer.commit()
    finally:
        await consumer.stop()  # commits nothing more, leaves the group


async def wait_for(condition: Any) -> None:
    # The group changes on the broker's schedule: look every 100 ms, for a minute at most.
    with anyio.fail_after(60):
        while not condition():  # noqa: ASYNC110
            await anyio.sleep(0.1)


async def main() -> None:
    leave = anyio.Event()
    async with anyio.create_task_group() as tasks:
        await tasks.start(old_pod, leave)  # today's group, its partitions held
        async with app:  # the first new pod joins
            await wait_for(lambda: app.stats().protocol is not None)
            shared = app.stats().protocol
            partitions = await produce(range(RECORDS // 2))
            leave.set()  # the last old pod goes: the App takes every partition
            await wait_for(lambda: len(app.stats().partitions) == partitions)
            await produce(range(RECORDS // 2, RECORDS))
            await wait_for(lambda: len(handled["plain"] | handled["fairstream"]) == RECORDS)
            after = app.stats().protocol
    print(
        f"handled {len(handled['plain'] | handled['fairstream'])} of {RECORDS} records "
        f"(old pod {len(handled['plain'])}, fairstream {len(handled['fairstream'])}); "
        f"protocol while shared: {shared}, after: {after}"
    )


if __name__ == "__main__":
    logs.configure("auto", "WARNING")  # fairstream's events to stderr; stdout stays ours
    anyio.run(main)
