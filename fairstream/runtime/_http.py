"""A tiny HTTP status endpoint for apps that do not live in a web framework.

``fairstream run --http-port P`` serves ``/metrics`` (Prometheus text format:
``fairstream.prometheus`` when ``prometheus_client`` is installed, else the
dependency-free ``app.metrics_text()``), ``/health`` (200 while the consumer runs)
and ``/ready`` (200 once it has joined its group), each answering 503 otherwise.
Services built on FastAPI or Starlette expose ``app.health()`` and
``app.metrics_text()`` through their own routes.

The port may face a hostile network (it binds every interface under ``fairstream
run``), and it shares the process and its file-descriptor limit with the consumer:
so connections are capped and timed out, and no error of the server leaves it.
"""

from __future__ import annotations

import dataclasses
import errno
import json
import socket
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Protocol, final

import anyio
import anyio.abc
import anyio.streams.stapled
import structlog

from fairstream.errors import ConfigError, describe
from fairstream.runtime._app import Health

__all__ = ["StatusSource", "serve_status"]

log = structlog.get_logger(__name__)

_LOG_INTERVAL = 60.0  # seconds between two status_accept_failed events at most
_RETRY_PAUSE = 0.5  # seconds before accepting again when no connection can be closed
_OUT_OF_FILES = (errno.EMFILE, errno.ENFILE)  # the process's limit, the system's


class StatusSource(Protocol):
    """What the endpoint reports on: an :class:`~fairstream.App`, or the supervisor
    of ``fairstream run --workers N`` speaking for its workers."""

    def health(self) -> Health: ...
    def metrics_text(self) -> str: ...


_REASONS = {200: "OK", 404: "Not Found", 405: "Method Not Allowed", 503: "Service Unavailable"}


def _route(
    app: StatusSource, metrics: Callable[[], str], method: str, path: str
) -> tuple[int, str, str]:
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


async def _answer(
    app: StatusSource,
    metrics: Callable[[], str],
    stream: anyio.abc.SocketStream,
    *,
    read_timeout: float,
    write_timeout: float,
) -> None:
    request = b""
    with anyio.move_on_after(read_timeout) as reading:
        while b"\r\n\r\n" not in request and len(request) < 8192:
            request += await stream.receive()
    if reading.cancelled_caught:  # idle or too slow: close it, it holds a file descriptor
        log.debug("status_connection_timed_out", waiting_for="request", seconds=read_timeout)
        return
    method, _, rest = request.decode("latin-1").partition(" ")
    path = rest.partition(" ")[0].partition("?")[0]
    status, content_type, body = _route(app, metrics, method, path)
    payload = body.encode()
    head = (
        f"HTTP/1.1 {status} {_REASONS[status]}\r\nContent-Type: {content_type}\r\n"
        f"Content-Length: {len(payload)}\r\nConnection: close\r\n\r\n"
    )
    with anyio.move_on_after(write_timeout) as writing:  # a client that does not read
        await stream.send(head.encode() + payload)
    if writing.cancelled_caught:
        log.debug("status_connection_timed_out", waiting_for="reader", seconds=write_timeout)


_Answer = Callable[[anyio.abc.SocketStream], Awaitable[None]]


@final
class _Connections:
    """The open connections, oldest first: a new one beyond the cap closes the oldest.

    Closing the oldest, not refusing the newest, is what keeps probes answered under
    a flood: a probe sends its request as it connects and is answered at once, while
    the connections that crowd it out are the ones that sent nothing.
    """

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._open: dict[anyio.CancelScope, anyio.Event] = {}  # scope -> closed

    def __len__(self) -> int:
        return len(self._open)

    def add(self) -> tuple[anyio.CancelScope, anyio.Event]:
        scope, closed = anyio.CancelScope(), anyio.Event()
        self._open[scope] = closed
        if len(self._open) > self._limit:
            self.close_oldest()
        return scope, closed

    def close_oldest(self) -> anyio.Event | None:
        """Cancel the oldest connection; the event is set once its socket is closed."""
        if not self._open:
            return None
        scope = next(iter(self._open))
        scope.cancel()
        return self._open.pop(scope)

    async def serve(
        self,
        stream: anyio.abc.SocketStream,
        answer: _Answer,
        scope: anyio.CancelScope,
        closed: anyio.Event,
    ) -> None:
        try:
            async with stream:
                with scope:
                    await answer(stream)
        except (anyio.EndOfStream, anyio.BrokenResourceError, OSError):
            pass  # the client hung up: not our problem
        except Exception as exc:  # a bug answering one request must not end the app
            log.error("status_request_failed", error=describe(exc))
        finally:
            self._open.pop(scope, None)
            closed.set()


async def _accept(
    listener: anyio.abc.SocketListener,
    connections: _Connections,
    answer: _Answer,
    tasks: anyio.abc.TaskGroup,
) -> None:
    """Accept connections for ever; a failure to accept is logged and waited out.

    ``accept()`` fails with ``EMFILE`` when the process is out of file descriptors
    (the consumer's own sockets count against the same limit): closing the oldest
    connection frees one. Any other failure, or one with no connection to close,
    is retried after a pause.
    """
    failures, quiet_until = 0, 0.0
    while True:
        try:
            stream = await listener.accept()
        except Exception as exc:
            failures += 1
            if anyio.current_time() >= quiet_until:  # one event a minute at most
                log.warning(
                    "status_accept_failed",
                    error=describe(exc),
                    failures=failures,
                    open_connections=len(connections),
                )
                failures, quiet_until = 0, anyio.current_time() + _LOG_INTERVAL
            out_of_files = isinstance(exc, OSError) and exc.errno in _OUT_OF_FILES
            closed = connections.close_oldest() if out_of_files else None
            if closed is None:
                await anyio.sleep(_RETRY_PAUSE)
            else:
                await closed.wait()
        else:
            tasks.start_soon(connections.serve, stream, answer, *connections.add())


async def serve_status(
    app: StatusSource,
    *,
    port: int = 0,
    host: str = "127.0.0.1",
    metrics: Callable[[], str] | None = None,
    max_connections: int = 64,
    read_timeout: float = 5.0,
    write_timeout: float = 5.0,
    sock: socket.socket | None = None,
    task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Serve the status endpoint until cancelled; nothing a client does ends it.

    ``metrics`` makes the ``/metrics`` body (``app.metrics_text`` by default; the CLI
    passes ``fairstream.prometheus.metrics_text`` when ``prometheus_client`` is there).
    At most ``max_connections`` are open at once (a new one closes the oldest); a
    connection that sends no full request within ``read_timeout`` seconds, or does not
    take its answer within ``write_timeout``, is closed. Failing to accept (out of
    file descriptors) or to answer is logged and served through, never raised, so
    the status port cannot take the consumer beside it down.

    ``sock``, a listening socket, is served instead of ``host:port``: a worker of
    ``fairstream run --workers N`` serves the one its supervisor bound for it.

    :raises ConfigError: a limit is not positive, or it cannot listen on
        ``host:port`` (the port is taken or out of range, or the host is no address
        of this machine).
    """
    for field, value in (
        ("max_connections", max_connections),
        ("read_timeout", read_timeout),
        ("write_timeout", write_timeout),
    ):
        if value <= 0:
            raise ConfigError(field, value, "must be > 0")
    try:
        if sock is None:
            listener = await anyio.create_tcp_listener(local_host=host, local_port=port)
        else:
            listener = anyio.streams.stapled.MultiListener(
                [await anyio.abc.SocketListener.from_socket(sock)]
            )
            host, port = sock.getsockname()[:2]
    except (OSError, OverflowError) as exc:
        raise ConfigError(
            "status endpoint",
            f"{host}:{port}",
            f"cannot listen there: {describe(exc)}",
            "give a free port and an address of this machine "
            "(fairstream run: --http-port, --http-host)",
        ) from exc
    log.info("status_endpoint_started", host=host, port=port)
    task_status.started()
    answer = partial(
        _answer,
        app,
        metrics or app.metrics_text,
        read_timeout=read_timeout,
        write_timeout=write_timeout,
    )
    connections = _Connections(max_connections)
    async with listener, anyio.create_task_group() as tasks:
        for one in listener.listeners:
            # create_tcp_listener's listeners are socket listeners: accept() is theirs.
            assert isinstance(one, anyio.abc.SocketListener)
            tasks.start_soon(_accept, one, connections, answer, tasks)
