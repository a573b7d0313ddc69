"""Bad configuration fails at start with one clear line, never a traceback.

``fairstream run`` is run as a real process on the reliability sink app with one
setting broken at a time; the same errors are checked in-process, where a user's
own ``main`` would meet them.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from fairstream import App, ConfigError, ParallelRebalance, Record, SchedulerConfig
from fairstream.testing import free_port
from tests.conftest import Broker

pytestmark = pytest.mark.reliability

REPO = Path(__file__).parents[2]


def _run(
    bootstrap: str | None, tmp_path: Path, **settings: str
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "FAIRSTREAM_BOOTSTRAP"}
    env.update({"SINK_PATH": str(tmp_path / "sink"), "SINK_TOPIC": "orders", **settings})
    command = [sys.executable, "-m", "fairstream", "run", "tests.reliability.sink_app:build"]
    if bootstrap is not None:
        command += ["--bootstrap", bootstrap]
    return subprocess.run(
        command, cwd=REPO, env=env, capture_output=True, text=True, timeout=60, check=False
    )


def _assert_one_clear_line(result: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("fairstream run: error: ")
    for needle in needles:
        assert needle in lines[0]


@pytest.mark.parametrize(
    ("settings", "needles"),
    [
        pytest.param(
            {"SINK_ASSIGNOR": "fastest"},
            ("assignor='fastest'", "choose one of range, roundrobin, sticky, fair, lag"),
            id="unknown-assignor",
        ),
        pytest.param(
            {"SINK_THRESHOLD": "-1", "SINK_PARALLEL_REBALANCE": "1"},
            ("parallel_rebalance.threshold=-1", "must be >= 0"),
            id="negative-threshold",
        ),
    ],
)
def test_invalid_setting_exits_2_with_one_line(
    tmp_path: Path, settings: dict[str, str], needles: tuple[str, ...]
) -> None:
    # An unreachable address on purpose: the setting must fail before any connect.
    _assert_one_clear_line(_run(f"127.0.0.1:{free_port()}", tmp_path, **settings), *needles)


def test_missing_bootstrap_exits_2_naming_the_fix(tmp_path: Path) -> None:
    _assert_one_clear_line(
        _run(None, tmp_path), "no Kafka bootstrap address", "FAIRSTREAM_BOOTSTRAP"
    )


@pytest.mark.broker
def test_missing_topic_exits_2_naming_it(noida: Broker, tmp_path: Path) -> None:
    result = _run(noida.bootstrap, tmp_path, SINK_TOPIC="no-such-topic-here")
    _assert_one_clear_line(result, "['no-such-topic-here']", "not found on the cluster")


def test_unreachable_bootstrap_exits_2_without_traceback(tmp_path: Path) -> None:
    bootstrap = f"127.0.0.1:{free_port()}"
    result = _run(bootstrap, tmp_path)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert "fairstream run: error: cannot reach the Kafka cluster" in result.stderr
    assert bootstrap in result.stderr


def test_unreachable_bootstrap_leaks_no_unclosed_clients(tmp_path: Path) -> None:
    result = _run(f"127.0.0.1:{free_port()}", tmp_path)
    assert result.returncode == 2
    assert "Unclosed AIOKafka" not in result.stderr, result.stderr


def test_unreachable_bootstrap_is_one_stderr_line(tmp_path: Path) -> None:
    result = _run(f"127.0.0.1:{free_port()}", tmp_path)
    _assert_one_clear_line(result, "cannot reach the Kafka cluster")


# --- the same, in-process ------------------------------------------------------------


@pytest.mark.parametrize(
    ("build", "message"),
    [
        pytest.param(
            lambda: App(bootstrap="127.0.0.1:1", group_id="g", assignor="fastest"),
            "unknown assignment strategy",
            id="unknown-assignor",
        ),
        pytest.param(
            lambda: App(
                bootstrap="127.0.0.1:1",
                group_id="g",
                parallel_rebalance=ParallelRebalance(threshold=-5),
            ),
            "parallel_rebalance.threshold=-5: must be >= 0",
            id="negative-threshold",
        ),
        pytest.param(
            lambda: SchedulerConfig(partition_quota=-1),
            "partition_quota=-1: must be > 0",
            id="negative-quota",
        ),
        pytest.param(
            lambda: SchedulerConfig(revoke_timeout=-0.5),
            "revoke_timeout=-0.5: must be >= 0",
            id="negative-revoke-timeout",
        ),
        pytest.param(
            lambda: SchedulerConfig(max_batch=5_000),
            "max_batch=5000: exceeds max_buffered_records=2000",
            id="batch-above-buffer",
        ),
        pytest.param(
            lambda: App(bootstrap="127.0.0.1:1", group_id="g").subscriber("t", max_batch=3_000),
            "max_batch=3000: exceeds max_buffered_records=2000",
            id="subscriber-batch-above-buffer",
        ),
    ],
)
def test_invalid_settings_raise_config_error_when_built(build: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        build()  # type: ignore[operator]


@pytest.mark.broker
async def test_missing_topic_raises_config_error_from_run(noida: Broker, group_id: str) -> None:
    app = App(bootstrap=noida.bootstrap, group_id=group_id, instance_id="missing-0")

    @app.subscriber("no-such-topic-in-process")
    async def handle(record: Record[bytes]) -> None: ...

    with anyio.fail_after(30), pytest.raises(ConfigError, match="not found on the cluster"):
        await app.run()
