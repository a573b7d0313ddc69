"""The extras match the commands: a fresh venv with only ``fairstream[broker]`` runs a broker.

A real ``pip install '<repo>[broker]'`` into a new virtual environment, dependencies
from the package index, so a dependency that only the dev extra happened to
provide shows up here. The sources are copied first so the build leaves nothing in
the repository. About 25 s with a warm pip cache.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from aiokafka.admin import AIOKafkaAdminClient

REPO = Path(__file__).parents[2]

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def broker_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``bin/`` of a new venv holding fairstream[broker] and what it pulls in, nothing else."""
    root = tmp_path_factory.mktemp("extras")
    source = root / "src"
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        if (REPO / name).exists():
            shutil.copy(REPO / name, source / name)
    shutil.copytree(
        REPO / "fairstream", source / "fairstream", ignore=shutil.ignore_patterns("__pycache__")
    )
    subprocess.run([sys.executable, "-m", "venv", root / "venv"], check=True, timeout=120)
    bin_dir = root / "venv" / "bin"
    install = subprocess.run(
        [bin_dir / "python", "-m", "pip", "install", "--quiet", f"{source}[broker]"],
        env=_clean_env(),
        capture_output=True,
        text=True,
        timeout=540,
    )
    assert install.returncode == 0, install.stdout + install.stderr
    return bin_dir


def _clean_env() -> dict[str, str]:
    """No PYTHONPATH (it would put the checkout's fairstream first) and no cluster."""
    return {
        k: v for k, v in os.environ.items() if k != "PYTHONPATH" and not k.startswith("FAIRSTREAM_")
    }


async def test_fairstream_broker_runs_from_the_broker_extra(broker_venv: Path) -> None:
    process = await anyio.open_process(
        [broker_venv / "fairstream", "broker"], env=_clean_env(), stdout=subprocess.PIPE
    )
    async with process:
        assert process.stdout is not None
        line = b""
        with anyio.fail_after(60):
            while not line.endswith(b"\n"):
                chunk = await process.stdout.receive()
                line += chunk
        bootstrap = line.decode().strip().removeprefix("bootstrap=")
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
        await admin.start()
        try:
            assert isinstance(await admin.list_topics(), list)
        finally:
            await admin.close()
        process.send_signal(signal.SIGTERM)
        with anyio.fail_after(30):
            assert await process.wait() == 0


def test_the_venv_really_lacks_the_other_extras(broker_venv: Path) -> None:
    result = subprocess.run(
        [broker_venv / "fairstream", "backfill", "--group", "g", "--topics", "t", "--output", "x"],
        env=_clean_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == (
        "fairstream backfill: error: extra='spark': not installed (pyspark, pyarrow, "
        "confluent_kafka missing); run: pip install 'fairstream[spark]'\n"
    )


def test_the_installed_package_carries_its_license_and_classifiers(broker_venv: Path) -> None:
    script = (
        "import importlib.metadata as m, json; d = m.distribution('fairstream'); "
        "print(json.dumps({'license': d.metadata['License-Expression'], "
        "'files': [f.name for f in d.files or () if 'dist-info' in str(f)], "
        "'classifiers': d.metadata.get_all('Classifier'), 'typed': any("
        "f.name == 'py.typed' for f in d.files or ())}))"
    )
    result = subprocess.run(
        [broker_venv / "python", "-c", script],
        cwd=broker_venv,  # not the checkout: its sources must not shadow the installed package
        env=_clean_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    found = json.loads(result.stdout)
    assert found["license"] == "Apache-2.0"
    assert "LICENSE" in found["files"]
    assert "Typing :: Typed" in found["classifiers"] and found["typed"]
    assert (REPO / "LICENSE").read_text().split()[:4] == ["Apache", "License", "Version", "2.0,"]
