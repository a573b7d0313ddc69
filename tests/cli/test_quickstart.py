"""The README's "Your first app", run exactly as written: the file and the shell commands.

(tests/cli/test_extras.py runs them again, and the install line, on a built wheel in a
fresh venv.) They are read from the README at test time (the fenced blocks after the
``<!-- quickstart-test: ... -->`` markers), so the test and the text cannot drift.
The commands start a broker on the fixed port 9092; the test runs them in a network
namespace of their own (``unshare -rn``) where nothing else can hold that port, or
directly when namespaces are not available and the port is free.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import anyio
import anyio.abc
import pytest

README = Path(__file__).parents[2] / "README.md"
MARKED_BLOCK = re.compile(
    r"<!-- quickstart-test: (?P<what>[^>]*?) -->\n```\w*\n(?P<body>.*?)```", re.S
)

pytestmark = pytest.mark.slow


def readme_blocks() -> dict[str, str]:
    """The README's marked blocks: the install line, the app's file and the commands."""
    blocks = {m["what"]: m["body"] for m in MARKED_BLOCK.finditer(README.read_text())}
    assert blocks.keys() == {"install", "file quickstart.py", "commands"}, "markers moved"
    return blocks


def _private_network() -> list[str] | None:
    """A prefix that runs a command in a new network namespace with loopback up."""
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        return None
    prefix = ["unshare", "-rn", "sh", "-c", 'ip link set lo up && exec "$0" "$@"']
    probe = subprocess.run([*prefix, "true"], capture_output=True, timeout=30)
    return prefix if probe.returncode == 0 else None


def _port_free(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) != 0


def _events(text: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


async def run_first_app(folder: Path, env: dict[str, str]) -> str:
    """Run the README's app file and commands in ``folder`` until the record is handled.

    ``env``'s PATH decides which ``fairstream`` the commands run. Returns what they
    printed; the broker and the app are stopped before returning.
    """
    blocks = readme_blocks()
    (folder / "quickstart.py").write_text(blocks["file quickstart.py"])
    (folder / "commands.sh").write_text("set -e\n" + blocks["commands"])
    prefix = _private_network()
    if prefix is None and not _port_free(9092):
        pytest.skip("the README's port 9092 is taken here and unshare -rn is not available")
    output = folder / "output.txt"
    with output.open("w") as sink:
        shell = await anyio.open_process(
            [*(prefix or []), "bash", "commands.sh"],
            cwd=folder,
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    async with shell:
        try:
            with anyio.fail_after(120):
                while not _handled(output.read_text()):
                    assert shell.returncode in (None, 0), output.read_text()
                    await anyio.sleep(0.2)
        finally:
            await _stop_group(shell)
    return output.read_text()


def check_first_app(text: str) -> None:
    """What the README says the first app does: the record handled, where it says."""
    handled = _handled(text)
    assert handled is not None
    assert handled["amount"] == 42
    assert handled["topic"] == "orders" and handled["offset"] == 0
    assert "created topic orders with 3 partitions" in text
    assert "produced 1 record to orders" in text


async def test_readme_first_app_handles_the_produced_record(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAIRSTREAM_")}
    # The `fairstream` of this interpreter, as a user's shell would find it after pip install.
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    check_first_app(await run_first_app(tmp_path, env))


def _handled(text: str) -> dict[str, object] | None:
    return next((e for e in _events(text) if e.get("event") == "order_received"), None)


async def _stop_group(shell: anyio.abc.Process) -> None:
    """SIGTERM the script's process group (the app and the broker it left running)."""
    os.killpg(shell.pid, signal.SIGTERM)
    await shell.wait()
    for _ in range(150):  # 30 s for a graceful stop, then no more waiting
        if not _group_alive(shell.pid):
            return
        await anyio.sleep(0.2)
    os.killpg(shell.pid, signal.SIGKILL)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True
