"""A tiny HTTP status endpoint for apps that do not live in a web framework.

``fairstream run --http-port P`` serves ``/metrics`` (Prometheus text format:
``fairstream.prometheus`` when ``prometheus_client`` is installed, else the
dependency-free ``app.metrics_text()``), ``/health`` (200 while the consumer runs)
and ``/ready`` (200 once it has joined its group), each answering 503 otherwise.
Services built on FastAPI or Starlette expose ``app.health()`` and
``app.metrics_text()`` through their own routes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
from collections.abc import Callable

import anyio
import anyio.abc
import structlog

from fairstream.runtime._app import App

__all__ = ["serve_status"]

log = structlog.get_logger(__name__)

_REASONS = {200: "OK", 404: "Not Found", 405: "Method Not Allowed", 503: "Service Unavailable"}


def _route(app: App, metrics: Callable[[], str], method: str, path: str) -> tuple[int, str, str]:
    """(status, content type, body) for one request line."""
    if method != "GET":
        return 405, "text/plain", "only GET\n"
    health = app.health()
    if path == "/metrics":
        return 200, "text/plain; version=0.0.4", metrics()
    if path in ("/health", "/ready"):
        ok = health.alive if path == "/health" else health.ready
        return (200 if ok else 503), "application/json", json.dumps(dataclasses.asdict(health))
    return 404, "text/plain", "try /metrics, /health or /ready\n"


async def _answer(app: App, metrics: Callable[[], str], stream: anyio.abc.SocketStream) -> None:
    async with stream:
        request = b""
        with anyio.move_on_after(5):
            while b"\r\n\r\n" not in request and len(request) < 8192:
                request += await stream.receive()
        method, _, rest = request.decode("latin-1").partition(" ")
        path = rest.partition(" ")[0].partition("?")[0]
        status, content_type, body = _route(app, metrics, method, path)
        payload = body.encode()
        head = (
            f"HTTP/1.1 {status} {_REASONS[status]}\r\nContent-Type: {content_type}\r\n"
            f"Content-Length: {len(payload)}\r\nConnection: close\r\n\r\n"
        )
        await stream.send(head.encode() + payload)


async def serve_status(
    app: App,
    *,
    port: int,
    host: str = "127.0.0.1",
    metrics: Callable[[], str] | None = None,
    task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Serve the status endpoint until cancelled.

    ``metrics`` makes the ``/metrics`` body (``app.metrics_text`` by default; the CLI
    passes ``fairstream.prometheus.metrics_text`` when ``prometheus_client`` is there).
    """
    render = metrics or app.metrics_text
    listener = await anyio.create_tcp_listener(local_host=host, local_port=port)
    log.info("status_endpoint_started", host=host, port=port)
    task_status.started()

    async def handle(stream: anyio.abc.SocketStream) -> None:
        # A client that hangs up early is not our problem.
        with contextlib.suppress(anyio.EndOfStream, anyio.BrokenResourceError, OSError):
            await _answer(app, render, stream)

    async with listener:
        await listener.serve(handle)
