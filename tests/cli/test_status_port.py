"""``fairstream run --http-port``: the status port neither ends the consumer nor changes
how it ends.

Real processes, real sockets, a real broker: what a pod under a careless client or a
hostile network would see.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import IO

import anyio
import httpx
import pytest

from fairstream.testing import free_port
from tests.conftest import Broker
from tests.support.kafka_helpers import committed, create_topic, produce

REPO = Path(__file__).parents[2]
EXAMPLES = REPO / "examples"
FLOOD = 2_000


def _command(*args: str) -> list[str]:
    return [sys.executable, "-m", "fairstream", *args]


def _spawn(argv: list[str], *, env: dict[str, str], stderr: IO[str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        _command(*argv), cwd=EXAMPLES, env=env, stdout=subprocess.DEVNULL, stderr=stderr
    )


def _env(**extra: str) -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("FAIRSTREAM_")}
    return {**clean, **extra}


async def _ready(port: int, process: subprocess.Popen[bytes]) -> httpx.Response:
    """``/ready`` once it answers 200, the process still running all along."""
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
        with anyio.fail_after(60):
            while True:
                assert process.poll() is None, "the app stopped"
                try:
                    response = await client.get("/ready")
                except httpx.TransportError:
                    response = None
                if response is not None and response.status_code == 200:
                    return response
                await anyio.sleep(0.2)


@contextmanager
def _idle_connections(port: int, count: int) -> Iterator[None]:
    """``count`` loopback connections that never send a byte, closed on the way out."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = count + 512  # this process's own files, the broker's clients
    if hard != resource.RLIM_INFINITY and hard < wanted:
        pytest.skip(f"the flood needs {wanted} file descriptors; the hard limit is {hard}")
    with ExitStack() as stack:
        if soft != resource.RLIM_INFINITY and soft < wanted:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
            stack.callback(resource.setrlimit, resource.RLIMIT_NOFILE, (soft, hard))
        for _ in range(count):
            # The kernel completes the handshake from the listen backlog, whether
            # or not the server accepts: a flood costs the server only what it accepts.
            stack.enter_context(socket.create_connection(("127.0.0.1", port), timeout=10))
        yield


@pytest.mark.broker
async def test_a_flood_of_idle_connections_at_the_file_limit_leaves_the_consumer_running(
    noida: Broker, group_id: str, tmp_path: Path
) -> None:
    topic = f"flood-{uuid.uuid4().hex[:10]}"
    await create_topic(noida.bootstrap, topic, 2)
    port = free_port()
    argv = ["run", "quickstart:app", "--bootstrap", noida.bootstrap, "--http-port", str(port)]
    env = _env(FAIRSTREAM_GROUP_ID=group_id, QUICKSTART_TOPIC=topic)
    with (tmp_path / "stderr").open("w") as log:  # a pipe nobody reads would fill up
        process = _spawn([*argv, "--http-host", "127.0.0.1"], env=env, stderr=log)
    try:
        await produce(noida.bootstrap, topic, [(i % 2, b'{"amount": 1}') for i in range(20)])
        await _ready(port, process)
        with anyio.fail_after(60):
            while await committed(noida.bootstrap, group_id, topic, 2) != [10, 10]:
                assert process.poll() is None, "the app stopped"
                await anyio.sleep(0.2)
        # Leave the consumer 16 free file descriptors, fewer than the connection cap:
        # the flood runs the process out of them, as `ulimit -n 1024` and 1,100
        # connections did (accept() failed with EMFILE and the app died).
        in_use = len(os.listdir(f"/proc/{process.pid}/fd"))
        _, hard = resource.prlimit(process.pid, resource.RLIMIT_NOFILE)
        resource.prlimit(process.pid, resource.RLIMIT_NOFILE, (in_use + 16, hard))
        with _idle_connections(port, FLOOD):
            await produce(noida.bootstrap, topic, [(i % 2, b'{"amount": 2}') for i in range(20)])
            ready = await _ready(port, process)
            assert ready.json()["state"] == "running"
            with anyio.fail_after(60):
                while await committed(noida.bootstrap, group_id, topic, 2) != [20, 20]:
                    assert process.poll() is None, "the app stopped"
                    await anyio.sleep(0.2)
        process.send_signal(signal.SIGTERM)
        await anyio.to_thread.run_sync(process.wait, 30)
    finally:
        process.kill()
        process.wait()
        stderr = (tmp_path / "stderr").read_text()
    assert process.returncode == 0, stderr[-3000:]
    assert "Traceback" not in stderr
    events = [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]
    failed = [event for event in events if event["event"] == "status_accept_failed"]
    # Logged with the reason, at most once a minute, not once per refused connection.
    assert 1 <= len(failed) <= 4, failed
    assert "Too many open files" in failed[0]["error"]


# --- start-up errors and exit codes do not depend on --http-port --------------------


def _run(
    *args: str, env: dict[str, str] | None = None, cwd: Path = EXAMPLES
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        _command(*args),
        cwd=cwd,
        env=_env(**(env or {})),
        capture_output=True,
        text=True,
        timeout=90,
    )


def _one_line(result: subprocess.CompletedProcess[str]) -> str:
    assert (result.returncode, result.stdout) == (2, ""), result.stderr[-3000:]
    errors = [line for line in result.stderr.splitlines() if not line.startswith("{")]
    assert len(errors) == 1, result.stderr[-3000:]
    return errors[0]


@pytest.mark.broker
@pytest.mark.parametrize("case", ["missing-topic", "unreachable-bootstrap"])
def test_a_start_up_error_is_the_same_line_with_and_without_the_status_port(
    noida: Broker, case: str
) -> None:
    if case == "missing-topic":
        bootstrap, env = noida.bootstrap, {"QUICKSTART_TOPIC": "no-such-topic-anywhere"}
    else:
        bootstrap, env = f"127.0.0.1:{free_port()}", {}
    argv = ["run", "quickstart:app", "--bootstrap", bootstrap]
    without = _one_line(_run(*argv, env=env))
    with_port = _one_line(_run(*argv, "--http-port", str(free_port()), env=env))
    assert with_port == without
    assert without.startswith("fairstream run: error: ")


@pytest.fixture
def taken_port() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        pytest.param(
            ["--http-port", "99999"],
            "--http-port=99999: is not a TCP port; give 1-65535",
            id="port-out-of-range",
        ),
        pytest.param(["--http-port", "0"], "--http-port=0: is not a TCP port", id="port-zero"),
        pytest.param(
            ["--http-port", "{taken}", "--http-host", "127.0.0.1"],
            "status endpoint='127.0.0.1:{taken}': cannot listen there: OSError: [Errno 98]",
            id="port-in-use",
        ),
        pytest.param(
            ["--http-port", "{free}", "--http-host", "no-such-host.invalid"],
            "status endpoint='no-such-host.invalid:{free}': cannot listen there: gaierror",
            id="unresolvable-host",
        ),
    ],
)
def test_a_status_port_it_cannot_serve_is_one_line_exit_2(
    taken_port: int, options: list[str], message: str
) -> None:
    free = free_port()
    argv = [option.format(taken=taken_port, free=free) for option in options]
    # An unreachable bootstrap: the status port is checked before the cluster.
    result = _run("run", "quickstart:app", "--bootstrap", f"127.0.0.1:{free_port()}", *argv)
    line = _one_line(result)
    assert line.startswith("fairstream run: error: "), line
    assert message.format(taken=taken_port, free=free) in line
    assert "Traceback" not in result.stderr


@pytest.mark.broker
@pytest.mark.parametrize(("kind", "code"), [("keyboard", 130), ("exit3", 3)])
async def test_a_handlers_exit_status_is_kept_under_the_status_port(
    noida: Broker, group_id: str, tmp_path: Path, kind: str, code: int
) -> None:
    topic = f"exit-{uuid.uuid4().hex[:10]}"
    await create_topic(noida.bootstrap, topic, 1)
    await produce(noida.bootstrap, topic, [(0, b"x")] * 5)
    env = {
        "FAIRSTREAM_BOOTSTRAP": noida.bootstrap,
        "EXIT_TOPIC": topic,
        "EXIT_GROUP": group_id,
        "EXIT_LOG": str(tmp_path / "exit.log"),
        "EXIT_RAISE": kind,
        "EXIT_AT": "2",
    }
    argv = ["run", "tests.cli.exit_app:app", "--http-port", str(free_port())]
    result = await anyio.to_thread.run_sync(lambda: _run(*argv, env=env, cwd=REPO))
    assert result.returncode == code, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    assert await committed(noida.bootstrap, group_id, topic, 1) == [2]
