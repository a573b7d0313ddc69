"""``@app.publisher``: a handler's return value published, keyed like its input, before
the input's offset is committed."""

from __future__ import annotations

import json
from typing import Any

import anyio
import pydantic
import pytest

from fairstream import (
    App,
    ConfigError,
    DeadLetterPolicy,
    HandlerError,
    Record,
    RetryPolicy,
    SchedulerConfig,
)
from tests.conftest import Broker, TopicFactory
from tests.support.backends import QUICK_JOIN, Backend
from tests.support.kafka_helpers import committed, produce, read_all

QUICK = SchedulerConfig(commit_interval=0.1)


class Receipt(pydantic.BaseModel):
    order: int
    total: float


async def test_a_returned_value_is_published_with_the_input_key_either_order(
    backend: Backend, group_id: str
) -> None:
    orders, refunds = await backend.create_topic(1), await backend.create_topic(1)
    receipts, credits = await backend.create_topic(1), await backend.create_topic(1)
    await backend.produce(orders, [(0, b'{"n": %d}' % n) for n in range(4)], key=b"alice")
    await backend.produce(refunds, [(0, b'{"n": %d}' % n) for n in range(4)], key=b'{"id": "bob"}')
    app = backend.app(group_id=group_id, scheduler=QUICK)
    done = {orders: anyio.Event(), refunds: anyio.Event()}

    @app.publisher(receipts)  # above the subscriber
    @app.subscriber(orders)
    async def receipt(record: Record[dict[str, int]]) -> Receipt | None:
        if record.offset == 3:
            done[orders].set()
        n = record.value["n"]
        return None if n == 1 else Receipt(order=n, total=n * 1.5)  # None: nothing sent

    @app.subscriber(refunds)  # above the publisher; the key reaches the handler decoded
    @app.publisher(credits)
    async def credit(record: Record[dict[str, int], dict[str, str]]) -> dict[str, Any]:
        if record.offset == 3:
            done[refunds].set()
        return {"n": record.value["n"], "customer": record.key["id"]}

    async with app:
        with anyio.fail_after(30):
            for event in done.values():
                await event.wait()

    sent = await backend.read_all(receipts, 1, expected=3)
    assert [(r.key, json.loads(r.value)) for r in sent] == [
        (b"alice", {"order": n, "total": n * 1.5}) for n in (0, 2, 3)
    ]
    sent = await backend.read_all(credits, 1, expected=4)
    # The key as it was sent, not the handler's decoded dict encoded again.
    assert [(r.key, json.loads(r.value)) for r in sent] == [
        (b'{"id": "bob"}', {"n": n, "customer": "bob"}) for n in range(4)
    ]
    assert await backend.committed(group_id, orders, 1) == [4]
    assert await backend.committed(group_id, refunds, 1) == [4]


async def test_a_result_the_broker_refuses_is_never_committed_past(
    broker: Broker, make_topic: TopicFactory, group_id: str
) -> None:
    orders, receipts = await make_topic(1), await make_topic(1)
    await produce(broker.bootstrap, orders, [(0, b"%d" % n) for n in range(3)])
    app = App(
        bootstrap=broker.bootstrap,
        group_id=group_id,
        scheduler=QUICK,
        consumer=QUICK_JOIN,
        retry=RetryPolicy(attempts=2, backoff=0.01),
        dead_letter=DeadLetterPolicy(on_error="stop"),
    )

    @app.publisher(receipts)
    @app.subscriber(orders)
    async def receipt(record: Record[bytes]) -> bytes:
        # Offset 1's result is over the producer's 1 MiB limit: an error that will not pass.
        return b"x" * 2_000_000 if record.offset == 1 else b"ok %d" % record.offset

    with pytest.raises(HandlerError) as failed:
        async with app:
            with anyio.fail_after(30):
                await anyio.sleep_forever()

    assert (failed.value.offset, failed.value.attempts) == (1, 2)
    assert "MessageSizeTooLarge" in str(failed.value.__cause__)
    assert [r.value for r in await read_all(broker.bootstrap, receipts, 1, 1)] == [b"ok 0"]  # type: ignore[attr-defined]
    assert await committed(broker.bootstrap, group_id, orders, 1) == [1]


def test_a_batch_handler_cannot_publish_its_result_in_either_order() -> None:
    app = App(bootstrap="127.0.0.1:9", group_id="g")

    async def batch(records: list[Record[bytes]]) -> list[bytes]:
        return [r.value for r in records]

    with pytest.raises(ConfigError, match="cannot publish the result of batch handler"):
        app.publisher("out")(app.subscriber("in", batch=True)(batch))
    with pytest.raises(ConfigError, match="cannot publish the result of batch handler"):
        app.subscriber("in2", batch=True)(app.publisher("out")(batch))
    with pytest.raises(ConfigError, match="needs a topic name"):
        app.publisher("")
