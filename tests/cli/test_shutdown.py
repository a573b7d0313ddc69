"""How ``fairstream run`` ends: signals, and handlers that raise what is not an error.

Real processes on a real broker: a hang here is what users would see as a pod that
never terminates, so every wait is bounded and the process is killed if it overruns.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import anyio
import pytest

from tests.conftest import Broker, TopicFactory
from tests.support.kafka_helpers import committed, produce

pytestmark = pytest.mark.broker

REPO = Path(__file__).parents[2]


def _spawn(broker: Broker, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "fairstream", "run", "tests.cli.exit_app:app"],
        cwd=REPO,
        env={**os.environ, "FAIRSTREAM_BOOTSTRAP": broker.bootstrap, **env},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


async def _wait(process: subprocess.Popen[str], limit: float) -> tuple[int, str]:
    try:
        with anyio.fail_after(limit):
            await anyio.to_thread.run_sync(process.wait)
    finally:
        if process.poll() is None:
            process.kill()
    _, stderr = process.communicate()
    return process.returncode, stderr


def _lines(log: Path, kind: str) -> list[str]:
    if not log.exists():
        return []
    return [line.split()[1] for line in log.read_text().splitlines() if line.startswith(kind)]


async def _until(log: Path, kind: str, count: int, process: subprocess.Popen[str]) -> None:
    with anyio.fail_after(60):
        while len(_lines(log, kind)) < count:
            assert process.poll() is None, process.communicate()[1][-3000:]
            await anyio.sleep(0.05)


@pytest.mark.parametrize(
    ("kind", "code", "message"),
    [
        ("keyboard", 130, None),
        ("exit3", 3, None),
        ("custom", 2, "fairstream run: error: handler raised Abort on "),
    ],
)
async def test_handler_raising_a_base_exception_commits_and_exits(
    broker: Broker,
    make_topic: TopicFactory,
    group_id: str,
    tmp_path: Path,
    kind: str,
    code: int,
    message: str | None,
) -> None:
    topic = await make_topic(partitions=1)
    await produce(broker.bootstrap, topic, [(0, b"x")] * 20)
    log = tmp_path / "exit.log"
    env = {
        "EXIT_TOPIC": topic,
        "EXIT_GROUP": group_id,
        "EXIT_LOG": str(log),
        "EXIT_RAISE": kind,
        "EXIT_AT": "7",
    }
    returncode, stderr = await _wait(_spawn(broker, env), 60)
    assert returncode == code, stderr[-3000:]
    assert stderr.count('"event": "handler_aborted"') == 1, stderr[-3000:]
    assert "Traceback" not in stderr
    if message is not None:
        assert message in stderr
    # Everything before the record that raised was handled and committed; it was not.
    assert _lines(log, "end") == [f"0:{i}" for i in range(7)]
    assert await committed(broker.bootstrap, group_id, topic, 1) == [7]


async def test_sigterm_starts_no_new_record_and_commits_what_finished(
    broker: Broker, make_topic: TopicFactory, group_id: str, tmp_path: Path
) -> None:
    topic = await make_topic(partitions=4)
    await produce(broker.bootstrap, topic, [(i % 4, b"x") for i in range(400)])
    log = tmp_path / "exit.log"
    env = {"EXIT_TOPIC": topic, "EXIT_GROUP": group_id, "EXIT_LOG": str(log), "EXIT_DELAY": "0.2"}
    process = _spawn(broker, env)
    await _until(log, "end", 8, process)
    started_before = len(_lines(log, "start"))
    process.send_signal(signal.SIGTERM)
    returncode, stderr = await _wait(process, 30)
    assert returncode == 0, stderr[-3000:]
    started_after = len(_lines(log, "start")) - started_before
    # At most one record per handler slot was between our count and the signal.
    assert started_after <= 4, f"{started_after} handler calls started after SIGTERM"
    # Every started record finished, and the group is exactly at what finished.
    ended = _lines(log, "end")
    assert sorted(ended) == sorted(_lines(log, "start"))
    per_partition = Counter(int(where.split(":")[0]) for where in ended)
    assert await committed(broker.bootstrap, group_id, topic, 4) == [
        per_partition.get(p) or None for p in range(4)
    ]


async def test_second_sigterm_cancels_what_is_in_hand_and_commits_what_finished(
    broker: Broker, make_topic: TopicFactory, group_id: str, tmp_path: Path
) -> None:
    topic = await make_topic(partitions=1)
    await produce(broker.bootstrap, topic, [(0, b"x")] * 20)
    log = tmp_path / "exit.log"
    env = {
        "EXIT_TOPIC": topic,
        "EXIT_GROUP": group_id,
        "EXIT_LOG": str(log),
        "EXIT_DELAY": "120",  # longer than shutdown_timeout: only a second signal ends it
        "EXIT_SLOW_FROM": "5",
    }
    process = _spawn(broker, env)
    await _until(log, "start", 6, process)
    process.send_signal(signal.SIGTERM)
    await anyio.sleep(1.0)
    assert process.poll() is None, "the first signal must wait for the record in hand"
    process.send_signal(signal.SIGTERM)
    returncode, stderr = await _wait(process, 20)
    assert returncode == 0, stderr[-3000:]
    assert '"event": "shutdown_forced"' in stderr
    assert _lines(log, "end") == [f"0:{i}" for i in range(5)]
    assert await committed(broker.bootstrap, group_id, topic, 1) == [5]
