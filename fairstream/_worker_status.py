"""One ``/health``, ``/ready`` and ``/metrics`` for the workers of ``fairstream run --workers N``.

Each worker serves the usual status endpoint (:func:`fairstream.serve_status`) on a
loopback socket its supervisor bound for it and handed down (``pass_fds``): no
port is picked and then raced for, and nothing outside the machine reaches it.
The supervisor asks every worker for its ``/health`` and ``/metrics`` every
:data:`POLL_INTERVAL` seconds and serves what they said, through the same
endpoint code, on ``--http-port``:

- ``/ready`` is 200 when every worker is ready (each has joined the group); a worker
  being restarted is not, so a rolling deploy waits for the whole pod.
- ``/health`` is 200 while no worker reports itself dead; a worker that is gone or
  not answering yet counts as starting (alive), because the supervisor restarts it:
  killing the pod for it would only restart every other worker too.
- ``/metrics`` is every worker's families, each sample with a ``worker="i"`` label
  (summing would hide the worker that lags or is stuck; Prometheus sums with
  ``sum without (worker)``), plus ``fairstream_worker_restarts_total{worker}``.

The worker side of the hand-over (:func:`worker_setup`) is here too, so one module
owns the whole protocol: the index and socket travel in two environment variables.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, final

import anyio
import structlog

from fairstream.runtime import Health

__all__ = [
    "POLL_INTERVAL",
    "WorkerSetup",
    "WorkersStatus",
    "aggregate_health",
    "merge_metrics",
    "worker_setup",
]

log = structlog.get_logger(__name__)

POLL_INTERVAL = 1.0
"""Seconds between two readings of the workers' status: what the supervisor serves is
at most this old."""

INDEX_ENV = "FS_SUPERVISOR_WORKER"
COUNT_ENV = "FS_SUPERVISOR_WORKERS"
PARENT_ENV = "FS_SUPERVISOR_PID"
STATUS_FD_ENV = "FS_SUPERVISOR_STATUS_FD"
"""The hand-over from supervisor to worker (not settings, so not FAIRSTREAM_*)."""

_STARTING = Health(alive=True, ready=False, state="starting")
"""What a worker that does not answer (yet) counts as."""


def aggregate_health(workers: Sequence[Health | None]) -> Health:
    """The pod's health from its workers' (``None``: not answering, so starting)."""
    each = [_STARTING if health is None else health for health in workers]
    states = {health.state for health in each}
    return Health(
        alive=all(health.alive for health in each),
        ready=bool(each) and all(health.ready for health in each),
        state=states.pop() if len(states) == 1 else "mixed",
        oldest_in_flight_seconds=max((h.oldest_in_flight_seconds for h in each), default=0.0),
    )


def _family(name: str, known: Mapping[str, Any]) -> str:
    """The family a sample belongs to: ``x_bucket``, ``x_sum``, ``x_count`` are ``x``'s."""
    for suffix in ("_bucket", "_sum", "_count", "_total", "_created"):
        if name.endswith(suffix) and name.removesuffix(suffix) in known:
            return name.removesuffix(suffix)
    return name


def _labelled(sample: str, worker: str) -> str:
    """``sample`` with ``worker="..."`` as its first label."""
    label = f'worker="{worker}"'
    name, brace, rest = sample.partition("{")
    if brace:
        return f"{name}{{{label}{'' if rest.startswith('}') else ','}{rest}"
    name, _, value = sample.partition(" ")
    return f"{name}{{{label}}} {value}"


def merge_metrics(texts: Mapping[int, str]) -> str:
    """The workers' Prometheus texts as one: a ``worker`` label on every sample.

    Each family keeps its ``# HELP`` and ``# TYPE`` once, followed by the samples
    of every worker (the text format wants a family's samples together).
    """
    headers: dict[str, list[str]] = {}
    samples: dict[str, list[str]] = {}
    for worker, text in sorted(texts.items()):
        current = ""
        for line in text.splitlines():
            if not line.strip():
                continue
            if line.startswith("#"):
                parts = line.split(maxsplit=3)
                if len(parts) >= 3 and parts[1] in ("HELP", "TYPE"):
                    current = parts[2]
                    seen = headers.setdefault(current, [])
                    samples.setdefault(current, [])
                    if line not in seen:
                        seen.append(line)
                continue
            name = line.partition("{")[0].partition(" ")[0]
            family = current if name.startswith(current) and current else _family(name, headers)
            headers.setdefault(family, [])
            samples.setdefault(family, []).append(_labelled(line, str(worker)))
    lines = [line for family in headers for line in (*headers[family], *samples[family])]
    return "\n".join(lines) + "\n" if lines else ""


def restarts_text(restarts: Mapping[int, int]) -> str:
    """The supervisor's own family: restarts per worker since it started."""
    lines = [
        "# HELP fairstream_worker_restarts_total Worker processes restarted by the supervisor.",
        "# TYPE fairstream_worker_restarts_total counter",
    ]
    lines += [
        f'fairstream_worker_restarts_total{{worker="{worker}"}} {count}'
        for worker, count in sorted(restarts.items())
    ]
    return "\n".join(lines) + "\n"


async def _get(port: int, path: str) -> tuple[int, str]:
    """(status, body) of ``GET path`` on a worker's loopback status port."""
    async with await anyio.connect_tcp("127.0.0.1", port) as stream:
        await stream.send(f"GET {path} HTTP/1.1\r\nHost: worker\r\n\r\n".encode())
        answer = b""
        try:
            while True:
                answer += await stream.receive()
        except anyio.EndOfStream:
            pass
    head, _, body = answer.decode("utf-8", "replace").partition("\r\n\r\n")
    return int(head.split(" ", 2)[1]), body


@final
class WorkersStatus:
    """The workers' last reported status; what the supervisor's endpoint serves."""

    def __init__(self, workers: int) -> None:
        self.ports: dict[int, int | None] = dict.fromkeys(range(workers))
        self.restarts: dict[int, int] = dict.fromkeys(range(workers), 0)
        self._health: dict[int, Health | None] = dict.fromkeys(range(workers))
        self._metrics: dict[int, str] = {}

    def forget(self, worker: int, port: int | None = None) -> None:
        """Worker ``worker`` is gone (or restarted, now on ``port``): what it said is stale."""
        self.ports[worker] = port
        self._health[worker] = None
        self._metrics.pop(worker, None)

    def health(self) -> Health:
        return aggregate_health(list(self._health.values()))

    def metrics_text(self) -> str:
        return merge_metrics(self._metrics) + restarts_text(self.restarts)

    async def poll(self) -> None:
        """Read every worker's status every :data:`POLL_INTERVAL` seconds, until cancelled."""
        while True:
            async with anyio.create_task_group() as tasks:
                for worker, port in self.ports.items():
                    if port is not None:
                        tasks.start_soon(self._read, worker, port)
            await anyio.sleep(POLL_INTERVAL)

    async def _read(self, worker: int, port: int) -> None:
        try:
            with anyio.fail_after(POLL_INTERVAL * 2):
                _, health = await _get(port, "/health")
                _, metrics = await _get(port, "/metrics")
        except (
            OSError,
            TimeoutError,
            ValueError,
            TypeError,
            IndexError,
            anyio.BrokenResourceError,
        ):
            if self.ports.get(worker) == port:  # not answering (yet): starting, or dying
                self._health[worker] = None
            return
        if self.ports.get(worker) == port:  # still the same process
            self._health[worker] = Health(**json.loads(health))
            self._metrics[worker] = metrics


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerSetup:
    """What a worker process got from its supervisor."""

    index: int
    sock: socket.socket
    distinct_ids: bool
    """Several workers run: a static member's ``instance_id`` gets ``-<index>``."""

    def instance_id(self, instance_id: str | None) -> str | None:
        """This worker's static membership id: ``<instance_id>-<index>`` among several."""
        if instance_id is None or not self.distinct_ids:
            return instance_id
        return f"{instance_id}-{self.index}"


def worker_setup(environ: Mapping[str, str] | None = None) -> WorkerSetup | None:
    """The supervisor's hand-over when this process is one of its workers, else ``None``.

    Also asks Linux to send this process SIGTERM when its supervisor dies (killed
    with SIGKILL, say), so no worker lives on as an orphan member of the group.
    """
    env = os.environ if environ is None else environ
    if INDEX_ENV not in env or STATUS_FD_ENV not in env:
        return None
    if PARENT_ENV in env:
        _die_with_parent(int(env[PARENT_ENV]))
    return WorkerSetup(
        index=int(env[INDEX_ENV]),
        sock=socket.socket(fileno=int(env[STATUS_FD_ENV])),
        distinct_ids=int(env.get(COUNT_ENV, "1")) > 1,
    )


def _die_with_parent(parent: int) -> None:
    """PR_SET_PDEATHSIG (Linux); elsewhere an orphan worker is left to the operator."""
    import ctypes
    import ctypes.util
    import signal

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.prctl(1, int(signal.SIGTERM))  # 1: PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        log.debug("worker_parent_watch_unavailable")
        return
    if os.getppid() != parent:  # it died before the prctl call
        os.kill(os.getpid(), signal.SIGTERM)
