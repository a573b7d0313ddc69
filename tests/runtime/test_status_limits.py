"""``serve_status``'s bounds on real loopback sockets: a connection cap that closes the
oldest, a read and a write timeout.

The app is never started (its ``/health`` answers 503, state ``created``): what is
under test is the server's connection handling, which does not look at the consumer.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, MutableMapping
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

import anyio
import anyio.abc
import httpx
import pytest
from structlog.testing import capture_logs

from fairstream import App, ConfigError, serve_status
from fairstream.testing import free_port


@asynccontextmanager
async def _serving(**limits: Any) -> AsyncIterator[int]:
    port = free_port()
    app = App(bootstrap="127.0.0.1:1", group_id="status-limits")
    async with anyio.create_task_group() as tasks:
        await tasks.start(partial(serve_status, app, host="127.0.0.1", port=port, **limits))
        yield port
        tasks.cancel_scope.cancel()


async def _closed_by_server(stream: anyio.abc.SocketStream) -> int:
    """Read until the server closes the connection; the bytes it sent."""
    received = 0
    with anyio.fail_after(10):
        try:
            while True:
                received += len(await stream.receive())
        except (anyio.EndOfStream, anyio.BrokenResourceError):
            return received


async def test_beyond_the_cap_the_oldest_connections_close_and_a_probe_is_answered() -> None:
    # A read timeout far above the test's waits: only the cap can close them.
    async with _serving(max_connections=4, read_timeout=600) as port:
        idle = [await anyio.connect_tcp("127.0.0.1", port) for _ in range(20)]
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
            health = await client.get("/health")
        assert health.status_code == 503
        assert health.json()["state"] == "created"
        # 20 idle and the probe: the 17 oldest made room, none of them got an answer.
        for stream in idle[:17]:
            assert await _closed_by_server(stream) == 0
        for stream in idle:
            await stream.aclose()


async def test_a_connection_without_a_whole_request_is_closed_after_the_read_timeout() -> None:
    async with (
        _serving(read_timeout=0.2) as port,
        await anyio.connect_tcp("127.0.0.1", port) as stream,
    ):
        await stream.send(b"GET /health HTTP/1.1\r\n")  # no blank line: not done
        assert await _closed_by_server(stream) == 0


async def test_a_client_that_does_not_read_its_answer_is_let_go_after_the_write_timeout() -> None:
    body = "x" * 50_000_000  # far more than the loopback socket buffers hold
    gave_up = anyio.Event()

    def note(_: object, __: str, entry: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
        if entry.get("waiting_for") == "reader":
            gave_up.set()
        return entry

    with capture_logs(processors=[note]) as logs:
        async with (
            _serving(metrics=lambda: body, write_timeout=0.2) as port,
            await anyio.connect_tcp("127.0.0.1", port) as stream,
        ):
            await stream.send(b"GET /metrics HTTP/1.1\r\n\r\n")
            with anyio.fail_after(10):
                await gave_up.wait()  # before reading a byte: the server stopped sending
            assert await _closed_by_server(stream) < len(body)
    timed_out = [entry for entry in logs if entry["event"] == "status_connection_timed_out"]
    assert timed_out == [
        {
            "event": "status_connection_timed_out",
            "waiting_for": "reader",
            "seconds": 0.2,
            "log_level": "debug",
        }
    ]


async def test_a_request_that_fails_is_logged_and_the_next_one_answered() -> None:
    def broken() -> str:
        raise RuntimeError("collector bug")

    with capture_logs() as logs:
        async with (
            _serving(metrics=broken) as port,
            httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client,
        ):
            with pytest.raises(httpx.RemoteProtocolError):
                await client.get("/metrics")
            health = await client.get("/health")
    assert health.status_code == 503
    failed = [entry for entry in logs if entry["event"] == "status_request_failed"]
    assert failed == [
        {
            "event": "status_request_failed",
            "error": "RuntimeError: collector bug",
            "log_level": "error",
        }
    ]


@pytest.mark.parametrize(
    ("limit", "message"),
    [
        ({"max_connections": 0}, "max_connections=0: must be > 0"),
        ({"read_timeout": 0.0}, "read_timeout=0.0: must be > 0"),
        ({"write_timeout": -1.0}, "write_timeout=-1.0: must be > 0"),
    ],
)
async def test_a_limit_that_is_not_positive_is_a_config_error(
    limit: dict[str, float], message: str
) -> None:
    app = App(bootstrap="127.0.0.1:1", group_id="status-limits")
    with pytest.raises(ConfigError, match=message):
        await serve_status(app, port=free_port(), **limit)  # type: ignore[arg-type]
