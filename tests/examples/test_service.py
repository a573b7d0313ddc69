"""examples/service.py under ``fairstream run``: results published, hooks and listeners
in their order, from start to a SIGTERM stop."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import uuid
from typing import Any

import anyio
import pytest

from tests.conftest import Broker
from tests.examples.test_examples import EXAMPLES, _env
from tests.support.kafka_helpers import create_topic, produce_keyed, read_all


async def _events(stderr: Any, until: str, count: int) -> list[dict[str, Any]]:
    """JSON events from ``stderr`` until ``count`` events named ``until`` (or its end)."""
    events: list[dict[str, Any]] = []
    buffered = b""
    async for chunk in stderr:
        buffered += chunk
        *lines, buffered = buffered.split(b"\n")
        events.extend(json.loads(line) for line in lines)
        if sum(e["event"] == until for e in events) >= count:
            break
    return events


@pytest.mark.broker
async def test_the_service_publishes_receipts_and_runs_its_hooks_in_order(
    noida: Broker, group_id: str
) -> None:
    orders, receipts = f"orders-{uuid.uuid4().hex[:10]}", f"receipts-{uuid.uuid4().hex[:10]}"
    await create_topic(noida.bootstrap, orders, 1)
    await create_topic(noida.bootstrap, receipts, 1)
    sent = [
        (0, b"alice", b'{"id": 1, "amount": "12.50"}'),
        (0, b"bob", b'{"id": 2, "amount": "0"}'),
        (0, b"carol", b'{"id": 3, "amount": "3"}'),
    ]
    await produce_keyed(noida.bootstrap, orders, sent)
    env = _env(FAIRSTREAM_BOOTSTRAP=noida.bootstrap, FAIRSTREAM_GROUP_ID=group_id)
    process = await anyio.open_process(
        [sys.executable, "-m", "fairstream", "run", "service:app"],
        cwd=EXAMPLES,
        env=env | {"ORDERS_TOPIC": orders, "RECEIPTS_TOPIC": receipts},
        stderr=subprocess.PIPE,
    )
    async with process:
        with anyio.fail_after(60):
            events = await _events(process.stderr, "order_billed", 2)
            process.send_signal(signal.SIGTERM)
            events += await _events(process.stderr, "service_stopped", 1)
            assert await process.wait() == 0

    names = [e["event"] for e in events]
    mine = ["service_started", "order_billed", "partition_billed", "service_stopped"]
    assert [n for n in names if n in mine] == [
        "service_started",
        "order_billed",
        "order_billed",
        "partition_billed",
        "service_stopped",
    ]
    assert names.index("service_started") < names.index("consumer_started")
    assert names.index("consumer_stopped") < names.index("service_stopped")
    (billed,) = [e for e in events if e["event"] == "partition_billed"]
    assert (billed["partition"], billed["orders"]) == (0, 2)
    got = await read_all(noida.bootstrap, receipts, 1, 2)
    assert [(r.key, json.loads(r.value)) for r in got] == [  # type: ignore[attr-defined]
        (b"alice", {"order": 1, "amount": "12.50"}),
        (b"carol", {"order": 3, "amount": "3"}),
    ]
