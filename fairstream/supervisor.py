"""``fairstream run --workers N`` and ``--reload``: worker processes under one supervisor.

A Python process handles records on one core, so a CPU-bound handler scales by
processes: each worker is ``python -m fairstream run APP`` itself, a full member of
the group (its own consumer, its own partitions; the group's assignor spreads the
partitions over them as over any members). The supervisor only manages them:

- SIGINT and SIGTERM are forwarded to every worker (the first drains and commits,
  a second cancels the handlers, as for one process). Workers run in a session of
  their own, so a terminal's Ctrl-C reaches them once, through the supervisor, and
  a worker whose supervisor is killed is sent SIGTERM by the kernel (Linux).
- A worker that dies (killed, crashed, out of memory) is restarted after a backoff
  (:func:`restart_delay`), one ``worker_restarting`` event each. A worker that
  exits with status 2 failed for good (bad configuration, a handler failing under
  ``on_error='stop'``, the cluster unreachable): restarting it would fail the
  same way, so the others are stopped and the supervisor exits 2, once. A worker
  that exits 0 by itself (the app stopped) is not restarted.
- Static members get distinct ids: ``<instance_id>-<i>`` for worker ``i``.
- ``--http-port`` serves one status endpoint for all (:mod:`fairstream._worker_status`).
- ``--reload`` (one worker, for development) restarts the worker when a ``.py``
  file under the current directory changes, and waits for the next change when
  it exits, instead of backing off.

The exit status is 0 after a clean stop, else the first failure's.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import final

import anyio
import anyio.abc
import structlog

from fairstream._worker_status import (
    COUNT_ENV,
    INDEX_ENV,
    PARENT_ENV,
    STATUS_FD_ENV,
    WorkerSetup,
    WorkersStatus,
    worker_setup,
)
from fairstream.errors import ConfigError, describe
from fairstream.runtime import serve_status

__all__ = [
    "GAVE_UP",
    "Supervision",
    "WorkerSetup",
    "restart_delay",
    "supervise",
    "worker_command",
    "worker_setup",
]

log = structlog.get_logger(__name__)

GAVE_UP = 2
"""A worker's exit status when it failed for good (the CLI's status for a FairstreamError)."""

_BACKOFF_FIRST = 0.5
_BACKOFF_MAX = 30.0
_HEALTHY_AFTER = 60.0
"""Seconds up after which a worker's death is counted as the first in a row again."""


def restart_delay(deaths_in_a_row: int) -> float:
    """Seconds before restarting a worker: 0.5 s, doubling per death in a row, to 30 s."""
    return float(min(_BACKOFF_MAX, _BACKOFF_FIRST * 2 ** max(deaths_in_a_row - 1, 0)))


@dataclass(frozen=True, slots=True, kw_only=True)
class Supervision:
    """What to run: ``command`` are the worker's arguments after ``python -m fairstream``."""

    command: tuple[str, ...]
    workers: int = 1
    http_host: str = "0.0.0.0"
    http_port: int | None = None
    reload: bool = False
    watch: str = "."

    def __post_init__(self) -> None:
        if self.workers < 1:
            raise ConfigError(
                "--workers", self.workers, "must be 1 or more", "give the number of processes"
            )
        if self.reload and self.workers > 1:
            raise ConfigError(
                "--reload",
                f"--workers {self.workers}",
                "restarts one worker on code changes and is for development only",
                "drop --workers (or --reload)",
            )


def supervise(supervision: Supervision) -> int:
    """Run the workers until they stop; the exit status (0: a clean stop)."""
    return anyio.run(_Supervisor(supervision).run)


@final
class _Supervisor:
    def __init__(self, supervision: Supervision) -> None:
        self._plan = supervision
        self._status = WorkersStatus(supervision.workers)
        self._processes: dict[int, anyio.abc.Process] = {}
        self._stop = anyio.Event()
        self._failure = 0
        self._changed = anyio.Event()
        self._reloading: set[int] = set()

    async def run(self) -> int:
        plan = self._plan
        # Bound before anything starts, so a taken port is one ConfigError, exit 2.
        status = None if plan.http_port is None else _listen(plan.http_host, plan.http_port)
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(self._forward_signals)
            if status is not None:
                tasks.start_soon(partial(serve_status, self._status, sock=status))
                tasks.start_soon(self._status.poll)
            if plan.reload:
                tasks.start_soon(self._watch)
            log.info("supervisor_started", workers=plan.workers, pid=os.getpid())
            async with anyio.create_task_group() as workers:
                for worker in range(plan.workers):
                    workers.start_soon(self._keep, worker)
            tasks.cancel_scope.cancel()
        log.info("supervisor_stopped", exit_code=self._failure)
        return self._failure

    def _stop_all(self, signum: signal.Signals = signal.SIGTERM) -> None:
        self._stop.set()
        for process in self._processes.values():
            if process.returncode is None:
                process.send_signal(signum)

    async def _forward_signals(self) -> None:
        with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async for signum in signals:
                log.info("shutdown_requested", signal=signal.Signals(signum).name)
                self._stop_all(signal.Signals(signum))

    async def _start(self, worker: int) -> anyio.abc.Process:
        """Start worker ``worker``, with a loopback status socket bound for it."""
        listener = socket.create_server(("127.0.0.1", 0))
        try:
            env = {
                **os.environ,
                INDEX_ENV: str(worker),
                COUNT_ENV: str(self._plan.workers),
                PARENT_ENV: str(os.getpid()),
                STATUS_FD_ENV: str(listener.fileno()),
            }
            process = await anyio.open_process(
                [sys.executable, "-m", "fairstream", *self._plan.command],
                stdin=subprocess.DEVNULL,
                stdout=None,
                stderr=None,
                env=env,
                pass_fds=[listener.fileno()],
                start_new_session=True,
            )
            self._status.forget(worker, listener.getsockname()[1])
        finally:
            listener.close()  # the worker has its own copy
        log.info("worker_started", worker=worker, pid=process.pid)
        return process

    async def _keep(self, worker: int) -> None:
        """Run worker ``worker``, restarting it when it dies, until the supervisor stops."""
        deaths = 0
        while not self._stop.is_set():
            process = self._processes[worker] = await self._start(worker)
            if self._stop.is_set():  # a signal came while it started
                process.send_signal(signal.SIGTERM)
            started = anyio.current_time()
            code = await process.wait()
            del self._processes[worker]
            self._status.forget(worker)
            if self._stop.is_set():
                log.info("worker_stopped", worker=worker, pid=process.pid, exit_code=code)
                return
            if worker in self._reloading:
                self._reloading.discard(worker)
                log.info("worker_reloaded", worker=worker, pid=process.pid, exit_code=code)
                continue
            if self._plan.reload:
                log.warning("worker_exited", worker=worker, exit_code=code, waiting_for="a change")
                await self._changed.wait()
                continue
            if code == 0:
                log.info("worker_stopped", worker=worker, pid=process.pid, exit_code=code)
                return
            if code == GAVE_UP:
                log.error("worker_failed", worker=worker, pid=process.pid, exit_code=code)
                self._failure = self._failure or code
                self._stop_all()
                return
            up = anyio.current_time() - started
            deaths = 1 if up >= _HEALTHY_AFTER else deaths + 1
            delay = restart_delay(deaths)
            self._status.restarts[worker] += 1
            log.warning(
                "worker_restarting",
                worker=worker,
                pid=process.pid,
                exit_code=code,
                signal=signal.Signals(-code).name if code < 0 else None,
                up_seconds=round(up, 1),
                restart_in=delay,
                deaths_in_a_row=deaths,
            )
            with anyio.move_on_after(delay):
                await self._stop.wait()

    async def _watch(self) -> None:
        """``--reload``: restart the worker when a watched ``.py`` file changes."""
        import watchfiles

        async for changes in watchfiles.awatch(
            self._plan.watch, watch_filter=watchfiles.PythonFilter(), stop_event=self._stop
        ):
            files = sorted({path for _, path in changes})
            log.info("reload_files_changed", files=files[:5], changed=len(files))
            self._changed.set()
            self._changed = anyio.Event()
            for worker, process in self._processes.items():
                self._reloading.add(worker)
                process.send_signal(signal.SIGTERM)


def _listen(host: str, port: int) -> socket.socket:
    """The supervisor's status socket on ``host:port``.

    :raises ConfigError: the port is taken or out of range, or the host is no
        address of this machine.
    """
    try:
        return socket.create_server((host, port), reuse_port=False)
    except (OSError, OverflowError) as exc:
        raise ConfigError(
            "--http-port",
            f"{host}:{port}",
            f"cannot listen there: {describe(exc)}",
            "give a free port and an address of this machine (--http-host)",
        ) from exc


def worker_command(
    app: str,
    *,
    bootstrap: str | None,
    options: Sequence[tuple[str, str | None]],
) -> tuple[str, ...]:
    """A worker's ``fairstream`` arguments: ``run APP`` and the options that were given."""
    command = ["run", app]
    if bootstrap:
        command += ["--bootstrap", bootstrap]
    for flag, value in options:
        if value is not None:
            command += [flag, value]
    return tuple(command)
