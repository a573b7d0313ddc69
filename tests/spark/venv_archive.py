"""A job's virtual environment packed for ``spark-submit --archives``, as the README says.

``python -m venv``, then ``pip install`` of fairstream (built from a copy of this
checkout's sources, so the build leaves nothing in the repository) with the packages its
Spark readers need on an executor (pyarrow, confluent-kafka; PySpark itself comes from
the cluster's Spark), and ``venv-pack`` from PyPI to pack it. Built once per test
module.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.spark.standalone import REPO

_SOURCES = ("pyproject.toml", "README.md", "LICENSE", "pyspark_fairstream.py", "fairstream")


@dataclass(frozen=True)
class VenvArchive:
    venv: Path
    """The packed environment itself: the driver's Python in client mode."""
    archive: Path
    """``venv.tar.gz``, for ``--archives venv.tar.gz#environment``."""


def _run(command: list[str | Path], cwd: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH" and k != "VIRTUAL_ENV"}
    done = subprocess.run(
        command, cwd=cwd, env=env, capture_output=True, text=True, timeout=400, check=False
    )
    assert done.returncode == 0, f"{command}: {done.stdout[-2000:]}{done.stderr[-2000:]}"


@pytest.fixture(scope="module")
def venv_archive(tmp_path_factory: pytest.TempPathFactory) -> VenvArchive:
    root = tmp_path_factory.mktemp("venv-archive")
    source = root / "src"
    source.mkdir()
    for name in _SOURCES:
        if (REPO / name).is_dir():
            shutil.copytree(
                REPO / name, source / name, ignore=shutil.ignore_patterns("__pycache__")
            )
        else:
            shutil.copy(REPO / name, source / name)
    venv = root / "venv"
    _run([sys.executable, "-m", "venv", venv], root)
    pip = [venv / "bin" / "python", "-m", "pip", "install", "--quiet"]
    _run([*pip, source, "pyarrow", "confluent-kafka", "venv-pack"], root)
    archive = root / "venv.tar.gz"
    # Level 0: gzip's framing without compressing (pyarrow's ~100 MB took ~15 s of CPU
    # at the default level 4); Spark unpacks it the same, from a local disk.
    pack = [venv / "bin" / "venv-pack", "--prefix", venv, "--output", archive, "--quiet"]
    _run([*pack, "--compress-level", "0"], root)
    return VenvArchive(venv=venv, archive=archive)
