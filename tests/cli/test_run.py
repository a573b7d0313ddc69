"""``fairstream run``: a real process, real signals, real exit codes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import anyio
import httpx
import pytest

from fairstream.testing import free_port
from tests.conftest import Broker, TopicFactory
from tests.support.kafka_helpers import committed, produce

EXAMPLES = Path(__file__).parents[2] / "examples"


def _spawn(*args: str, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "fairstream", *args],
        cwd=EXAMPLES,
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.broker
async def test_sigterm_drains_commits_and_exits_zero(
    broker: Broker, make_topic: TopicFactory, group_id: str
) -> None:
    topic = await make_topic(partitions=2)
    await produce(broker.bootstrap, topic, [(i % 2, b'{"amount": %d}' % i) for i in range(200)])
    env = {"FAIRSTREAM_GROUP_ID": group_id, "QUICKSTART_TOPIC": topic}
    port = free_port()
    process = _spawn(
        "run",
        "quickstart:app",
        "--bootstrap",
        broker.bootstrap,
        "--http-port",
        str(port),
        env=env,
    )
    try:
        with anyio.fail_after(60):
            while await committed(broker.bootstrap, group_id, topic, 2) != [100, 100]:
                assert process.poll() is None, process.communicate()[1]
                await anyio.sleep(0.2)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
            ready = await client.get("/ready")
            metrics = await client.get("/metrics")
            missing = await client.get("/nowhere")
        assert ready.status_code == 200 and ready.json()["state"] == "running"
        assert 'fairstream_partition_handled_total{group_id="' in metrics.text
        assert "# TYPE fairstream_partition_lag gauge" in metrics.text
        # prometheus_client is installed (dev extra): its collector serves the histogram.
        assert 'fairstream_handler_seconds_bucket{group_id="' in metrics.text
        assert missing.status_code == 404
        process.send_signal(signal.SIGTERM)
        await anyio.to_thread.run_sync(process.wait, 30)
    finally:
        process.kill()
        _, stderr = process.communicate()
    assert process.returncode == 0, stderr
    assert '"event": "shutdown_requested"' in stderr
    assert '"event": "consumer_stopped"' in stderr


def _run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fairstream", *args],
        cwd=EXAMPLES,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("no_such_module:app", "module 'no_such_module' was not found"),
        ("quickstart:nothing", "has no attribute 'nothing'"),
        ("quickstart", "is not of the form module:attribute"),
        ("quickstart:handle", "is an async function, not a fairstream App"),
        ("quickstart:log", "not a fairstream App"),
    ],
)
def test_bad_app_spec_is_one_clear_line(spec: str, message: str) -> None:
    result = _run_cli("run", spec, "--bootstrap", "127.0.0.1:1")
    assert result.returncode == 2
    assert message in result.stderr
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("bootstrap", ["localhost:abc", "localhost:99999", ":9092", "a:1,b:x"])
def test_malformed_bootstrap_is_one_line_exit_2(bootstrap: str) -> None:
    result = _run_cli("run", "quickstart:app", "--bootstrap", bootstrap)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr.startswith(f"fairstream run: error: --bootstrap={bootstrap!r}: ")
    assert "is not HOST:PORT" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_malformed_bootstrap_from_the_environment_is_one_line_exit_2() -> None:
    result = _run_cli("run", "quickstart:app", env={"FAIRSTREAM_BOOTSTRAP": "localhost:abc"})
    assert result.returncode == 2
    assert "'localhost:abc' is not HOST:PORT" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(
    "dependency",
    [
        pytest.param("fs_nowhere", id="prefix-of-the-module-name"),
        pytest.param("fs_nowhere_else.client", id="unrelated-package"),
    ],
)
def test_app_importing_a_missing_package_names_that_package(
    tmp_path: Path, dependency: str
) -> None:
    # The case: redis_sink.py imports redis, and 'redis_sink' starts with 'redis'.
    (tmp_path / "fs_nowhere_sink.py").write_text(
        f"import {dependency}\nfrom fairstream import App\napp = App(group_id='g')\n"
    )
    result = subprocess.run(
        [sys.executable, "-m", "fairstream", "run", "fs_nowhere_sink:app", "--bootstrap", "h:1"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    missing = dependency.split(".")[0]
    assert result.returncode == 2, result.stderr
    assert f"module 'fs_nowhere_sink' imports '{missing}', which is not installed" in result.stderr
    assert "was not found" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_unreachable_bootstrap_exits_2_without_traceback() -> None:
    result = _run_cli("run", "quickstart:app", "--bootstrap", f"127.0.0.1:{free_port()}")
    assert result.returncode == 2
    assert "cannot reach the Kafka cluster" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.broker
def test_missing_topic_exits_2_naming_it(broker: Broker) -> None:
    env = {"QUICKSTART_TOPIC": "no-such-topic-anywhere"}
    result = _run_cli("run", "quickstart:app", "--bootstrap", broker.bootstrap, env=env)
    assert result.returncode == 2
    assert "no-such-topic-anywhere" in result.stderr
    assert "not found on the cluster" in result.stderr
    assert "Traceback" not in result.stderr


def test_unknown_assignor_is_a_config_error() -> None:
    from fairstream import App, ConfigError, ParallelRebalance

    with pytest.raises(ConfigError, match="unknown assignment strategy; choose one of"):
        App(bootstrap="127.0.0.1:9092", group_id="g", assignor="fastest")
    with pytest.raises(ConfigError, match=r"parallel_rebalance\.threshold=-1: must be >= 0"):
        ParallelRebalance(threshold=-1)
