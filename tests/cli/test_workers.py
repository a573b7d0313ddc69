"""``fairstream run --workers N``: real worker processes under a real supervisor.

One topic on a noida of the test's own (static members outlive a killed worker
there), the supervisor started as users start it; a worker is killed with SIGKILL
and must come back under its static id, and SIGTERM must stop all with exit 0.
Every wait is bounded and the processes are killed if they overrun.

The worker killed is not the group's leader: on noida, a static *leader* that
rejoins re-plans the group but the other members are never told to rejoin, so
two members own the same partitions and the others' are not read (a broker quirk;
Kafka makes every member rejoin then).
"""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import anyio
import httpx
import pytest

from fairstream.testing import free_port
from tests.cli.test_status_port import _ready
from tests.conftest import Broker
from tests.support.kafka_helpers import committed, create_topic, produce

pytestmark = pytest.mark.broker

REPO = Path(__file__).parents[2]
LIMIT = 90  # seconds any one wait may take on a loaded machine


def _env(**extra: str) -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("FAIRSTREAM_")}
    return {**clean, "PYTHONPATH": str(REPO), **extra}


@contextmanager
def _supervisor(
    args: list[str], env: dict[str, str], stderr: Path, cwd: Path = REPO
) -> Iterator[subprocess.Popen[bytes]]:
    with stderr.open("w") as sink:
        process = subprocess.Popen(
            [sys.executable, "-m", "fairstream", "run", *args],
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=sink,
        )
    try:
        yield process
    finally:
        if process.poll() is None:
            process.kill()  # its workers get SIGTERM from the kernel (PR_SET_PDEATHSIG)
            process.wait()


def _handled(log: Path) -> list[tuple[int, str, str]]:
    """(pid, instance id, partition:offset) per handled record."""
    if not log.exists():
        return []
    rows = []
    for line in log.read_text().splitlines():
        pid, instance, where = line.split()
        rows.append((int(pid), instance, where))
    return rows


async def _until_handled(log: Path, count: int, process: subprocess.Popen[bytes]) -> None:
    with anyio.fail_after(LIMIT):
        while len({where for *_, where in _handled(log)}) < count:
            assert process.poll() is None, "the supervisor stopped"
            await anyio.sleep(0.1)


def _events(stderr: Path, event: str) -> list[str]:
    return [line for line in stderr.read_text().splitlines() if f'"event": "{event}"' in line]


async def _until_event(stderr: Path, event: str) -> None:
    with anyio.fail_after(LIMIT):
        while True:
            if _events(stderr, event):
                return
            await anyio.sleep(0.1)


async def test_two_workers_share_the_group_a_killed_one_comes_back_and_sigterm_stops_all(
    own_noida: Broker, tmp_path: Path
) -> None:
    topic, group = f"w-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    await create_topic(own_noida.bootstrap, topic, 4)
    log, stderr, port = tmp_path / "handled.log", tmp_path / "stderr.log", free_port()
    env = _env(
        WORKERS_TOPIC=topic,
        WORKERS_GROUP=group,
        WORKERS_INSTANCE="svc",
        WORKERS_LOG=str(log),
    )
    args = ["tests.cli.workers_app:app", "--workers", "2", "--bootstrap", own_noida.bootstrap]
    args += ["--http-port", str(port), "--http-host", "127.0.0.1", "--log-format", "json"]
    with _supervisor(args, env, stderr) as process:
        await _ready(port, process)
        await produce(own_noida.bootstrap, topic, [(i % 4, b"x") for i in range(40)])
        await _until_handled(log, 40, process)
        first = _handled(log)
        # Two processes, two static ids, each partition handled by one of them.
        assert {instance for _, instance, _ in first} == {"svc-0", "svc-1"}
        assert len({pid for pid, _, _ in first}) == 2
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
            metrics = (await client.get("/metrics")).text
        assert 'worker="0"' in metrics and 'worker="1"' in metrics
        assert 'fairstream_worker_restarts_total{worker="0"} 0' in metrics

        leader = _events(stderr, "assignment_planned")[-1]
        victim_id = "svc-0" if '"worker": 1' in leader else "svc-1"
        victim = next(pid for pid, instance, _ in first if instance == victim_id)
        os.kill(victim, signal.SIGKILL)
        await _until_event(stderr, "worker_restarting")
        await produce(own_noida.bootstrap, topic, [(i % 4, b"y") for i in range(40)])
        await _until_handled(log, 80, process)
        after = _handled(log)[len(first) :]
        # The restarted worker is a new process under the same static id.
        assert {pid for pid, instance, _ in after if instance == victim_id} - {victim}

        process.send_signal(signal.SIGTERM)
        with anyio.fail_after(LIMIT):
            code = await anyio.to_thread.run_sync(process.wait)
    assert code == 0, stderr.read_text()[-3000:]
    (restart,) = _events(stderr, "worker_restarting")
    assert f'"worker": {victim_id[-1]}' in restart and '"signal": "SIGKILL"' in restart
    assert len(_events(stderr, "worker_stopped")) == 2
    assert await committed(own_noida.bootstrap, group, topic, 4) == [20, 20, 20, 20]


async def test_a_worker_failing_for_good_stops_all_once_with_its_status(
    own_noida: Broker, tmp_path: Path
) -> None:
    stderr = tmp_path / "stderr.log"
    env = _env(WORKERS_TOPIC=f"missing-{uuid.uuid4().hex[:8]}", WORKERS_LOG=str(tmp_path / "x"))
    args = ["tests.cli.workers_app:app", "--workers", "3", "--bootstrap", own_noida.bootstrap]
    args += ["--log-format", "json"]
    with _supervisor(args, env, stderr) as process:
        with anyio.fail_after(LIMIT):
            code = await anyio.to_thread.run_sync(process.wait)
    text = stderr.read_text()
    assert code == 2, text[-3000:]
    assert not _events(stderr, "worker_restarting")
    assert 1 <= len(_events(stderr, "worker_failed")) <= 3
    assert "Traceback" not in text


_RELOAD_APP = """
import os

from fairstream import App, Record

VERSION = {version!r}
app = App(group_id=os.environ["WORKERS_GROUP"])


@app.subscriber(os.environ["WORKERS_TOPIC"])
async def handle(record: Record[bytes]) -> None:
    with open(os.environ["WORKERS_LOG"], "a") as log:
        log.write(f"{{os.getpid()}} {{VERSION}} {{record.offset}}\\n")
"""


@pytest.mark.skipif(
    importlib.util.find_spec("watchfiles") is None,
    reason="--reload needs the reload extra (watchfiles), not installed here",
)
async def test_reload_restarts_the_app_when_its_code_changes(
    own_noida: Broker, tmp_path: Path
) -> None:
    topic, group = f"r-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    await create_topic(own_noida.bootstrap, topic, 1)
    code, log, stderr = tmp_path / "reload_app.py", tmp_path / "handled.log", tmp_path / "err"
    code.write_text(_RELOAD_APP.format(version="v1"))
    env = _env(WORKERS_TOPIC=topic, WORKERS_GROUP=group, WORKERS_LOG=str(log))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    args = ["reload_app:app", "--reload", "--bootstrap", own_noida.bootstrap]
    args += ["--log-format", "json"]
    with _supervisor(args, env, stderr, cwd=tmp_path) as process:
        await produce(own_noida.bootstrap, topic, [(0, b"x")])
        await _until_handled(log, 1, process)
        code.write_text(_RELOAD_APP.format(version="v2"))
        await _until_event(stderr, "reload_files_changed")
        await produce(own_noida.bootstrap, topic, [(0, b"x")])
        await _until_handled(log, 2, process)
        process.send_signal(signal.SIGTERM)
        with anyio.fail_after(LIMIT):
            exit_code = await anyio.to_thread.run_sync(process.wait)
    assert exit_code == 0, stderr.read_text()[-3000:]
    (first, pid_1), (second, pid_2) = [(v, pid) for pid, v, _ in _handled(log)]
    assert (first, second) == ("v1", "v2") and pid_1 != pid_2
    assert not _events(stderr, "worker_restarting")  # a reload is not a death
