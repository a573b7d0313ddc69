"""A real Spark standalone cluster on 127.0.0.1: one master and one-core workers.

Started from the pyspark installation with its ``spark-class`` launcher, exactly as
the README's cluster section says (``org.apache.spark.deploy.master.Master`` and
``org.apache.spark.deploy.worker.Worker``), for each test that asks. The workers of
:func:`standalone` start executors with this interpreter and this checkout on
``PYTHONPATH``, so fairstream is importable there without installing a wheel on the
"cluster"; those of :func:`bare_standalone` have neither, as a cluster of machines
that never saw fairstream: a job must bring it (``spark-submit --archives``).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyspark
import pytest

SPARK_HOME = Path(pyspark.__file__).parent
"""The Spark distribution that pip's pyspark carries (``bin/``, ``jars/``, ``python/lib``)."""
SPARK_CLASS = SPARK_HOME / "bin" / "spark-class"
REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Cluster:
    master: str
    """``spark://127.0.0.1:PORT``, for ``--master``."""
    workers: int


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _alive_workers(ui_port: int) -> int:
    """Workers the master's web UI lists as alive; 0 while the UI cannot say yet.

    A master still starting may answer ``/json/`` with its HTML page (seen once in
    CI): that is "not yet", like a refused connection, not a failure.
    """
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{ui_port}/json/", timeout=2) as page:
            state = json.load(page)
    except (OSError, ValueError):
        return 0
    return sum(1 for w in state.get("workers", ()) if w.get("state") == "ALIVE")


@contextlib.contextmanager
def start_cluster(logs: Path, workers: int = 2, *, checkout: bool = True) -> Iterator[Cluster]:
    """A master and ``workers`` one-core workers (1 GiB each) until the block ends.

    Shared with ``benchmarks/spark_stream_scale.py``, which compares one worker with two.
    With ``checkout`` the executors run this interpreter with the checkout on their
    path; without, the daemons get no ``PYTHONPATH`` or ``PYSPARK_PYTHON`` at all.

    :raises RuntimeError: the cluster did not come up within 90 s (with the logs' tails).
    """
    port, ui_port = _free_port(), _free_port()
    env = {
        **{k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYSPARK_PYTHON")},
        "SPARK_LOCAL_IP": "127.0.0.1",
    }
    if checkout:
        env["PYSPARK_PYTHON"] = sys.executable
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    master = f"spark://127.0.0.1:{port}"
    commands = [
        [
            *("org.apache.spark.deploy.master.Master", "--host", "127.0.0.1"),
            *("--port", str(port), "--webui-port", str(ui_port)),
        ],
        *(
            [
                *("org.apache.spark.deploy.worker.Worker", master, "--host", "127.0.0.1"),
                *("--cores", "1", "--memory", "1g", "--webui-port", "0"),
                *("--work-dir", str(logs / f"work-{i}")),
            ]
            for i in range(workers)
        ),
    ]
    processes: list[subprocess.Popen[bytes]] = []
    try:
        for i, command in enumerate(commands):
            with open(logs / f"daemon-{i}.log", "wb") as log:
                processes.append(
                    subprocess.Popen(
                        [str(SPARK_CLASS), *command], env=env, stdout=log, stderr=subprocess.STDOUT
                    )
                )
            if i == 0:  # workers register with the master: wait until it listens
                _wait_for_port(port, processes[0], logs / "daemon-0.log")
        deadline = time.monotonic() + 90
        while _alive_workers(ui_port) < workers:
            if time.monotonic() > deadline or any(p.poll() is not None for p in processes):
                tails = "".join(
                    (logs / f"daemon-{i}.log").read_text()[-800:] for i in range(len(commands))
                )
                raise RuntimeError(f"the standalone cluster did not come up: {tails}")
            time.sleep(0.5)
        yield Cluster(master=master, workers=workers)
    finally:
        for process in reversed(processes):
            process.terminate()
        for process in processes:
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()


def _wait_for_port(port: int, process: subprocess.Popen[bytes], log: Path) -> None:
    """Until something listens on ``port`` (the master, started by ``process``).

    :raises RuntimeError: the master exited, or did not listen within 90 s.
    """
    deadline = time.monotonic() + 90
    while True:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
            return
        if process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the standalone master did not start: {log.read_text()[-800:]}")
        time.sleep(0.2)


@pytest.fixture
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """Master + two workers (1 core, 1 GiB each); stopped after the test, not left
    idling (three JVMs) beside the next tests on that worker."""
    try:
        cluster = start_cluster(tmp_path_factory.mktemp("spark-cluster"))
        with cluster as started:
            yield started
    except RuntimeError as exc:
        pytest.fail(str(exc))


@pytest.fixture
def bare_standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """Master + one worker whose executors find no fairstream (nor this interpreter's
    packages) unless the job ships them; stopped after the test."""
    try:
        cluster = start_cluster(tmp_path_factory.mktemp("bare-cluster"), 1, checkout=False)
        with cluster as started:
            yield started
    except RuntimeError as exc:
        pytest.fail(str(exc))
