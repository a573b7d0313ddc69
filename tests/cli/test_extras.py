"""Installed as the README says: a built wheel in a fresh venv with only ``[broker]``.

The wheel and sdist are built as ``make dist`` builds them (``python -m build``: the
sdist, then the wheel from it, so a file the sdist leaves out fails here) from a copy
of the sources, so the build leaves nothing in the repository; ``twine check`` reads
their metadata as PyPI would. The README's install line then installs the wheel into
a new virtual environment, dependencies from the package index, so a dependency that
only the dev extra happened to provide shows up here, and the README's first app runs
there. About a minute with a warm pip cache (build 30 s, install 25 s, the app 10 s).
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

import fairstream
from tests.cli.test_quickstart import check_first_app, readme_blocks, run_first_app

REPO = Path(__file__).parents[2]

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``dist/`` with the wheel and the sdist, built from a copy of the sources."""
    pytest.importorskip("build", reason="build comes with the dev extra: make install")
    root = tmp_path_factory.mktemp("dist")
    source = root / "src"
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(REPO / name, source / name)
    shutil.copytree(
        REPO / "fairstream", source / "fairstream", ignore=shutil.ignore_patterns("__pycache__")
    )
    built = subprocess.run(
        [sys.executable, "-m", "build", "--outdir", root / "dist", source],
        env={k: v for k, v in os.environ.items() if not k.startswith("FAIRSTREAM_")},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    return root / "dist"


@pytest.fixture(scope="module")
def broker_venv(dist: Path) -> Path:
    """``bin/`` of a new venv where the README's install line installed the wheel."""
    root = dist.parent
    subprocess.run([sys.executable, "-m", "venv", root / "venv"], check=True, timeout=120)
    bin_dir = root / "venv" / "bin"
    install = subprocess.run(
        ["bash", "-c", "set -e\n" + readme_blocks()["install"]],
        cwd=root,  # where dist/ is, as after copying it over
        env=_venv_env(bin_dir),
        capture_output=True,
        text=True,
        timeout=540,
    )
    assert install.returncode == 0, install.stdout + install.stderr
    return bin_dir


def _venv_env(bin_dir: Path) -> dict[str, str]:
    """The venv first on PATH (its pip, its fairstream), no PYTHONPATH (it would put the
    checkout's fairstream first) and no cluster."""
    env = {
        k: v for k, v in os.environ.items() if k != "PYTHONPATH" and not k.startswith("FAIRSTREAM_")
    }
    return env | {"PATH": f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"}


def test_the_wheel_and_sdist_pass_twine_check(dist: Path) -> None:
    pytest.importorskip("twine", reason="twine comes with the dev extra: make install")
    version = fairstream.__version__
    built = sorted(dist.iterdir())
    assert [path.name for path in built] == [
        f"fairstream-{version}-py3-none-any.whl",
        f"fairstream-{version}.tar.gz",
    ]
    check = subprocess.run(
        [sys.executable, "-m", "twine", "check", "--strict", *built],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert check.returncode == 0, check.stdout + check.stderr
    assert check.stdout.count("PASSED") == 2, check.stdout


async def test_the_readme_first_app_runs_from_the_wheel(broker_venv: Path, tmp_path: Path) -> None:
    check_first_app(await run_first_app(tmp_path, _venv_env(broker_venv)))


async def test_fairstream_broker_runs_from_the_broker_extra(broker_venv: Path) -> None:
    process = await anyio.open_process(
        [broker_venv / "fairstream", "broker"], env=_venv_env(broker_venv), stdout=subprocess.PIPE
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
        env=_venv_env(broker_venv),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == (
        "fairstream backfill: error: extra='spark': not installed (pyspark, pyarrow, "
        "confluent_kafka missing); run: pip install 'fairstream[spark]'\n"
    )


def test_an_extra_installs_later_by_name(broker_venv: Path) -> None:
    """The README: `pip install 'fairstream[prometheus]'` keeps the installed fairstream."""
    result = subprocess.run(
        [broker_venv / "pip", "install", "--dry-run", "fairstream[prometheus]"],
        env=_venv_env(broker_venv),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    would = next(line for line in result.stdout.splitlines() if line.startswith("Would install"))
    assert "prometheus_client-" in would or "prometheus-client-" in would, would
    assert "fairstream-" not in would, would


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
        env=_venv_env(broker_venv),
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
