"""Configuration does what it says: FAIRSTREAM_* variables, options on either side of the
command, --version, clean one-line errors."""

from __future__ import annotations

import importlib.metadata
import json
import os
import pty
import re
import signal
import subprocess
import sys
from pathlib import Path

import anyio
import anyio.abc
import pytest
from aiokafka.errors import KafkaConnectionError

from fairstream import App, ConfigError
from fairstream.config import from_env
from fairstream.errors import describe
from fairstream.testing import free_port
from tests.conftest import Broker, TopicFactory

REPO = Path(__file__).parents[2]


def _fairstream(
    *args: str, env: dict[str, str] | None = None, cwd: Path = REPO
) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("FAIRSTREAM_")}
    return subprocess.run(
        [sys.executable, "-m", "fairstream", *args],
        cwd=cwd,
        env={**clean, **(env or {})},
        capture_output=True,
        text=True,
        timeout=120,
    )


# --- the Configuration page's table is the list of variables ------------------------------------


def _documented_variables() -> set[str]:
    text = (REPO / "docs" / "getting-started" / "configuration.md").read_text()
    return set(re.findall(r"^\| `(FAIRSTREAM_[A-Z_]+)`", text, re.M))


def test_every_variable_read_is_in_the_configuration_table_and_back() -> None:
    documented = _documented_variables()
    assert documented, "no table in docs/getting-started/configuration.md"
    environ = {name: "x" for name in documented} | {"FAIRSTREAM_UNKNOWN": "x"}
    read = {f"FAIRSTREAM_{key.upper()}" for key in from_env(environ)}
    assert read == documented
    mentioned = {
        name
        for path in (REPO / "fairstream").rglob("*.py")
        for name in re.findall(r"FAIRSTREAM_[A-Z_]+[A-Z]", path.read_text())
    }
    assert mentioned <= documented, "the code names variables the table does not list"


def test_instance_id_and_bootstrap_apply_to_an_app_that_does_not_set_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("FAIRSTREAM_BOOTSTRAP", "kafka:9092")
    monkeypatch.setenv("FAIRSTREAM_INSTANCE_ID", "pod-3")
    app = App(group_id="g")
    assert (app.bootstrap, app.instance_id) == ("kafka:9092", "pod-3")
    app = App(group_id="g", bootstrap="other:9092", instance_id="mine")
    assert (app.bootstrap, app.instance_id) == ("other:9092", "mine")


# --- group id and assignor under `fairstream run` ------------------------------------

APP = """\
from fairstream import App, Record

app = App(group_id="the-apps-own-group", assignor="range")

@app.subscriber({topic!r})
async def handle(record: Record[bytes]) -> None:
    pass
"""


async def _joined(process: anyio.abc.Process) -> tuple[str, str]:
    """The group this member joined and the strategy its leader planned with, from its logs."""
    assert process.stderr is not None
    events: dict[str, dict[str, object]] = {}
    buffered = b""
    async for chunk in process.stderr:
        buffered += chunk
        *lines, buffered = buffered.split(b"\n")
        for line in lines:
            event = json.loads(line)
            events.setdefault(str(event["event"]), event)
        if {"assignment_planned", "partitions_assigned"} <= events.keys():
            planned, assigned = events["assignment_planned"], events["partitions_assigned"]
            return str(assigned["group_id"]), str(planned["strategy"])
    raise AssertionError(f"the app stopped before joining; it logged {sorted(events)}")


@pytest.mark.broker
@pytest.mark.parametrize(
    ("where", "strategy"),
    [
        pytest.param("env", "sticky", id="from-FAIRSTREAM_GROUP_ID-and-FAIRSTREAM_ASSIGNOR"),
        pytest.param("options", "roundrobin", id="options-beat-the-env"),
        pytest.param("bootstrap-first", "fair", id="bootstrap-before-the-command"),
    ],
)
async def test_run_joins_the_group_with_the_assignor_it_was_given(
    broker: Broker,
    make_topic: TopicFactory,
    group_id: str,
    tmp_path: Path,
    where: str,
    strategy: str,
) -> None:
    topic = await make_topic(partitions=1)
    (tmp_path / "fixed_app.py").write_text(APP.format(topic=topic))
    options = ["--group-id", group_id, "--assignor", strategy]
    if where == "env":
        env = {"FAIRSTREAM_GROUP_ID": group_id, "FAIRSTREAM_ASSIGNOR": strategy}
        argv = ["run", "fixed_app:app", "--bootstrap", broker.bootstrap]
    elif where == "options":
        env = {"FAIRSTREAM_GROUP_ID": "not-this-group", "FAIRSTREAM_ASSIGNOR": "fair"}
        argv = ["run", "fixed_app:app", *options, "--bootstrap", broker.bootstrap]
    else:
        env = {}
        argv = ["--bootstrap", broker.bootstrap, "run", "fixed_app:app", *options]
    clean = {k: v for k, v in os.environ.items() if not k.startswith("FAIRSTREAM_")}
    process = await anyio.open_process(
        [sys.executable, "-m", "fairstream", *argv],
        cwd=tmp_path,
        env={**clean, **env, "FAIRSTREAM_LOG_FORMAT": "json"},
        stderr=subprocess.PIPE,
    )
    async with process:
        try:
            with anyio.fail_after(60):
                joined = await _joined(process)
        finally:
            process.send_signal(signal.SIGTERM)
            with anyio.fail_after(60):
                await process.wait()
    assert joined == (group_id, strategy)


@pytest.mark.parametrize(
    ("argv", "env", "line"),
    [
        (
            ["run", "quickstart:app", "--assignor", "fastest"],
            {},
            "--assignor='fastest': unknown assignment strategy",
        ),
        (
            ["run", "quickstart:app"],
            {"FAIRSTREAM_ASSIGNOR": "fastest"},
            "FAIRSTREAM_ASSIGNOR='fastest': unknown assignment strategy",
        ),
    ],
)
def test_a_bad_assignor_names_where_it_came_from(
    argv: list[str], env: dict[str, str], line: str
) -> None:
    result = _fairstream(*argv, "--bootstrap", "127.0.0.1:1", env=env, cwd=REPO / "examples")
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr.startswith(f"fairstream run: error: {line}; choose one of ")
    assert result.stderr.count("\n") == 1


# --- log level and format ------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "env"),
    [
        pytest.param(["broker"], {"FAIRSTREAM_LOG_LEVEL": "info"}, id="env"),
        pytest.param(["--log-level", "INFO", "broker"], {}, id="option-before"),
        pytest.param(["broker", "--log-level", "INFO"], {}, id="option-after"),
    ],
)
@pytest.mark.parametrize("fmt", ["json", "console"])
@pytest.mark.broker  # `fairstream broker` starts a noida broker
async def test_log_level_and_format_apply_from_options_or_environment(
    argv: list[str], env: dict[str, str], fmt: str
) -> None:
    env = env | {"FAIRSTREAM_LOG_FORMAT": fmt}
    clean = {k: v for k, v in os.environ.items() if not k.startswith("FAIRSTREAM_")}
    process = await anyio.open_process(
        [sys.executable, "-m", "fairstream", *argv],
        env={**clean, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    async with process:
        assert process.stdout is not None and process.stderr is not None
        with anyio.fail_after(60):
            line = await process.stdout.receive()
        assert line.startswith(b"bootstrap=")
        process.send_signal(signal.SIGTERM)
        with anyio.fail_after(30):
            assert await process.wait() == 0
        stderr = b"".join([chunk async for chunk in process.stderr]).decode()
    started = next(line for line in stderr.splitlines() if "broker_started" in line)
    if fmt == "json":
        assert json.loads(started)["level"] == "info"
    else:
        assert not started.startswith("{") and "[info     ] broker_started" in started


@pytest.mark.parametrize(
    ("argv", "env", "line"),
    [
        (
            ["--log-level", "BOGUS", "plan"],
            {},
            "fairstream plan: error: --log-level='BOGUS': unknown log level; "
            "use DEBUG, INFO, WARNING or ERROR",
        ),
        (
            ["lag", "--group", "g", "--log-level", "loud"],
            {},
            "fairstream lag: error: --log-level='loud': unknown log level; "
            "use DEBUG, INFO, WARNING or ERROR",
        ),
        (
            ["plan"],
            {"FAIRSTREAM_LOG_LEVEL": "BOGUS"},
            "fairstream plan: error: FAIRSTREAM_LOG_LEVEL='BOGUS': unknown log level; "
            "use DEBUG, INFO, WARNING or ERROR",
        ),
        (
            ["plan"],
            {"FAIRSTREAM_LOG_FORMAT": "xml"},
            "fairstream plan: error: FAIRSTREAM_LOG_FORMAT='xml': unknown log format; "
            "use one of auto, json, console",
        ),
    ],
)
def test_a_bad_log_setting_is_one_line(argv: list[str], env: dict[str, str], line: str) -> None:
    result = _fairstream(*argv, env=env)
    assert (result.returncode, result.stdout, result.stderr) == (2, "", line + "\n")


def test_run_accepts_log_options_after_the_app() -> None:
    result = _fairstream(
        "run", "no_such_module:app", "--log-level", "DEBUG", "--log-format", "json"
    )
    assert result.returncode == 2
    assert result.stderr == (
        "fairstream run: error: app='no_such_module:app': module 'no_such_module' was not "
        "found; run from the directory that holds it, or add it to PYTHONPATH\n"
    )


# --- --version, plan on a terminal ---------------------------------------------------


def test_version_comes_from_the_package_metadata() -> None:
    result = _fairstream("--version")
    assert (result.returncode, result.stdout) == (
        0,
        f"fairstream {importlib.metadata.version('fairstream')}\n",
    )


def test_plan_on_a_terminal_prints_its_usage_instead_of_waiting() -> None:
    controller, terminal = pty.openpty()
    try:
        result = subprocess.run(
            [sys.executable, "-m", "fairstream", "plan", "--strategy", "lag"],
            stdin=terminal,
            capture_output=True,
            text=True,
            timeout=60,  # the bug was waiting forever for stdin
        )
    finally:
        os.close(terminal)
        os.close(controller)
    assert (result.returncode, result.stdout) == (2, "")
    usage, error = result.stderr.split("fairstream plan: error: ")
    assert usage.startswith("usage: fairstream plan [-h] [--strategy")
    assert error == (
        "--input='-': nothing to plan: standard input is a terminal; pipe a JSON document "
        "in, give --input FILE, or plan a live group with --group G\n"
    )


# --- clean error lines ---------------------------------------------------------------


def test_an_unreachable_cluster_names_the_error_once() -> None:
    port = free_port()
    result = _fairstream("lag", "--group", "g", "--bootstrap", f"127.0.0.1:{port}")
    assert result.returncode == 2
    assert result.stderr.startswith(
        "fairstream lag: error: could not connect to the cluster: KafkaConnectionError: "
    )
    assert result.stderr.count("KafkaConnectionError") == 1
    assert result.stderr.count("\n") == 1


def test_a_missing_value_is_not_shown_as_none() -> None:
    result = _fairstream("lag", "--group", "g")
    assert result.stderr == (
        "fairstream lag: error: --bootstrap: no cluster given; "
        "pass --bootstrap or set FAIRSTREAM_BOOTSTRAP\n"
    )
    assert str(ConfigError("retry.attempts", 0, "must be > 0")) == "retry.attempts=0: must be > 0"


@pytest.mark.parametrize(
    ("error", "text"),
    [
        (KafkaConnectionError("Unable to bootstrap"), "KafkaConnectionError: Unable to bootstrap"),
        (KafkaConnectionError(), "KafkaConnectionError"),
        (ValueError("bad port"), "ValueError: bad port"),
        (TimeoutError(), "TimeoutError"),
    ],
)
def test_describe_names_the_exception_once(error: BaseException, text: str) -> None:
    assert describe(error) == text
