"""examples/observability.py as its docstring runs it: middleware, spans and /metrics."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import anyio
import httpx
import pytest

pytest.importorskip("opentelemetry.sdk", reason="the otel extra is not installed")
pytest.importorskip("prometheus_client", reason="the prometheus extra is not installed")

from aiokafka import AIOKafkaProducer

from fairstream.testing import free_port
from tests.conftest import Broker
from tests.support.kafka_helpers import create_topic, read_all

EXAMPLES = Path(__file__).parents[2] / "examples"
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"


def _spawn(settings: dict[str, str], port: int) -> subprocess.Popen[str]:
    """``fairstream run observability:app --http-port PORT`` in examples/, output piped."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAIRSTREAM_")}
    return subprocess.Popen(
        [sys.executable, "-m", "fairstream", "run", "observability:app", "--http-port", str(port)],
        cwd=EXAMPLES,
        env=env | settings,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


async def test_the_example_logs_maps_errors_traces_and_serves_metrics(
    noida: Broker, group_id: str
) -> None:
    topic = f"orders-{uuid.uuid4().hex[:10]}"
    await create_topic(noida.bootstrap, topic, 1)
    port = free_port()
    process = _spawn(
        {
            "FAIRSTREAM_BOOTSTRAP": noida.bootstrap,
            "FAIRSTREAM_GROUP_ID": group_id,
            "FAIRSTREAM_LOG_FORMAT": "json",
            "ORDERS_TOPIC": topic,
        },
        port,
    )
    try:
        producer = AIOKafkaProducer(bootstrap_servers=noida.bootstrap)
        await producer.start()
        try:
            traceparent = f"00-{TRACE_ID}-{PARENT_ID}-01".encode()
            await producer.send_and_wait(
                topic, b'{"amount": 5}', partition=0, headers=[("traceparent", traceparent)]
            )
            await producer.send_and_wait(topic, b'{"note": "no amount"}', partition=0)
        finally:
            await producer.stop()
        with anyio.fail_after(60):
            # The second record is dead-lettered after the first was handled.
            (dead,) = await read_all(noida.bootstrap, f"{topic}.dlq", 1, 1)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
            metrics = (await client.get("/metrics")).text
        process.send_signal(signal.SIGTERM)
        await anyio.to_thread.run_sync(process.wait, 30)
    finally:
        process.kill()
        stdout, stderr = process.communicate()
    assert process.returncode == 0, stderr

    # The middleware mapped the KeyError, so the dead letter says what was wrong.
    headers = dict(dead.headers)  # type: ignore[attr-defined]
    assert headers["fairstream.error.type"] == b"InvalidOrder"
    assert headers["fairstream.error.message"] == b"missing field 'amount'"
    # It logged every call: one for the good record, two attempts for the bad one.
    calls = [e for e in map(json.loads, stderr.splitlines()) if e["event"] == "handler_call"]
    assert len(calls) == 3
    # A span per call on standard output, the first a child of the producer's context.
    spans = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    assert [s["name"] for s in spans] == [f"process {topic}"] * 3
    assert spans[0]["context"]["trace_id"] == f"0x{TRACE_ID}"
    assert spans[0]["parent_id"] == f"0x{PARENT_ID}"
    # The group is the one --group-id / FAIRSTREAM_GROUP_ID set, read from the app.
    assert spans[0]["attributes"]["messaging.consumer.group.name"] == group_id
    assert [s["status"]["status_code"] for s in spans] == ["UNSET", "ERROR", "ERROR"]
    # /metrics comes from prometheus_client, histogram included.
    assert f'fairstream_dead_letters_total{{group_id="{group_id}"}} 1.0' in metrics
    assert f'fairstream_handler_seconds_count{{group_id="{group_id}"}} 2.0' in metrics
