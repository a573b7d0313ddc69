"""``fairstream broker``: one line with the address, a real broker, a clean stop."""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import anyio
import pytest
from aiokafka.admin import AIOKafkaAdminClient

from fairstream.testing import ENGINES


@pytest.mark.parametrize("engine", sorted(ENGINES))
async def test_prints_bootstrap_serves_kafka_and_cleans_up_on_sigterm(engine: str) -> None:
    process = await anyio.open_process(
        [sys.executable, "-m", "fairstream", "--log-level", "INFO", "broker", "--engine", engine],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    async with process:
        assert process.stdout is not None and process.stderr is not None
        output = b""
        with anyio.fail_after(30):
            while not output.endswith(b"\n"):
                output += await process.stdout.receive()
        line = output.decode()
        assert line.startswith("bootstrap=127.0.0.1:") and line.endswith("\n")
        bootstrap = line.strip().removeprefix("bootstrap=")

        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
        await admin.start()
        try:
            assert isinstance(await admin.list_topics(), list)
        finally:
            await admin.close()

        process.send_signal(signal.SIGTERM)
        with anyio.fail_after(30):
            assert await process.wait() == 0
        stderr = b"".join([chunk async for chunk in process.stderr])
    events = [json.loads(line) for line in stderr.decode().splitlines()]
    started = next(e for e in events if e["event"] == "broker_started")
    assert started["bootstrap"] == bootstrap
    assert not await anyio.Path(started["data_dir"]).exists(), "the data dir was left behind"
    assert any(e["event"] == "broker_stopped" for e in events)
