"""The FastAPI example, run by uvicorn, answering real HTTP while it consumes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import anyio
import httpx
import pytest

from fairstream.testing import free_port
from tests.conftest import Broker, TopicFactory
from tests.support.kafka_helpers import committed, produce

pytestmark = pytest.mark.broker

EXAMPLES = Path(__file__).parents[2] / "examples"


async def _get_until(client: httpx.AsyncClient, path: str, ok: object) -> httpx.Response:
    """Poll ``path`` until ``ok(response)`` holds (bounded by the caller's deadline)."""
    while True:
        try:
            response = await client.get(path)
            if ok(response):  # type: ignore[operator]
                return response
        except httpx.TransportError:
            pass
        await anyio.sleep(0.2)


async def test_health_and_stats_while_consuming(
    broker: Broker, make_topic: TopicFactory, group_id: str
) -> None:
    topic = await make_topic(partitions=3)
    port = free_port()
    env = {
        **os.environ,
        "FAIRSTREAM_BOOTSTRAP": broker.bootstrap,
        "FAIRSTREAM_GROUP_ID": group_id,
        "ORDERS_TOPIC": topic,
    }
    server = await anyio.open_process(
        [sys.executable, "-m", "uvicorn", "web_service:api", "--port", str(port)],
        cwd=EXAMPLES,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    async with server:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
            with anyio.fail_after(60):
                health = await _get_until(client, "/health", lambda r: r.status_code == 200)
                assert health.json() == {
                    "alive": True,
                    "ready": True,
                    "state": "running",
                    "oldest_in_flight_seconds": 0.0,  # nothing produced yet
                }
                await produce(
                    broker.bootstrap, topic, [(i % 3, b'{"amount": 2}') for i in range(300)]
                )
                body = (
                    await _get_until(
                        client, "/stats", lambda r: r.json()["totals"]["orders"] == 300
                    )
                ).json()
            assert body["totals"] == {"orders": 300, "amount": 600}
            partitions = body["consumer"]["partitions"]
            assert sorted(p["partition"] for p in partitions) == [0, 1, 2]
            assert sum(p["handled"] for p in partitions) == 300
            metrics = (await client.get("/metrics")).text
            assert f'fairstream_partition_handled_total{{group_id="{group_id}"' in metrics
        server.send_signal(signal.SIGTERM)
        with anyio.fail_after(30):
            await server.wait()
        assert server.stderr is not None
        stderr = (await server.stderr.receive()).decode()
    # uvicorn re-raises SIGTERM after a graceful shutdown, so -15 is a clean exit too.
    assert server.returncode in (0, -signal.SIGTERM), stderr
    assert await committed(broker.bootstrap, group_id, topic, 3) == [100, 100, 100]
