"""Jobs on a real standalone cluster: a backfill and a streaming query (master + two
workers), and a job submitted with its venv as an archive to a cluster without fairstream.

Each command runs in its own process, as a user would run it: a test process can
hold only one Spark driver, and the shared local session is already one.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from fairstream.spark.cluster import read_states
from tests.conftest import Broker
from tests.spark.conftest import fill_topic, record_value
from tests.spark.standalone import (  # noqa: F401 (fixtures)
    REPO,
    SPARK_HOME,
    Cluster,
    bare_standalone,
    standalone,
)
from tests.spark.venv_archive import VenvArchive, venv_archive  # noqa: F401 (fixture)

pytestmark = [pytest.mark.spark, pytest.mark.broker, pytest.mark.slow]


def run_job(cluster: Cluster, *args: str) -> str:
    """``tests.spark.cluster_job`` in a process of its own, as a driver on the cluster."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
        "SPARK_EXECUTOR_MEMORY": "512m",
    }
    done = subprocess.run(
        [sys.executable, "-m", "tests.spark.cluster_job", cluster.master, *args],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=200,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def offsets(out: Path) -> list[tuple[int, int]]:
    table = pq.read_table(out, columns=["partition", "offset", "value"])
    rows = zip(
        *(table.column(c).to_pylist() for c in ("partition", "offset", "value")), strict=True
    )
    assert all(v == (record_value(p, o) if o else None) for p, o, v in rows)
    return sorted(
        zip(table.column("partition").to_pylist(), table.column("offset").to_pylist(), strict=True)
    )


@pytest.mark.timeout(400)
def test_backfill_then_stream_on_a_standalone_cluster(
    standalone: Cluster,  # noqa: F811
    noida: Broker,
    group_id: str,
    tmp_path: Path,
) -> None:
    counts = [3000, 1500, 500]
    topic = fill_topic(noida.bootstrap, counts)

    printed = run_job(standalone, noida.bootstrap, group_id, topic, str(tmp_path))

    assert "backfill 5000" in printed and "stream 600" in printed
    assert "executors 2" in printed  # one on each worker
    old = [(p, o) for p, n in enumerate(counts) for o in range(n)]
    new = [(p, o) for p, n in enumerate(counts) for o in range(n, n + 200)]
    assert offsets(tmp_path / "backfill") == old  # each record once
    assert offsets(tmp_path / "stream") == new
    states = read_states(noida.bootstrap, group_id, [topic])
    assert [s.committed for s in states] == [n + 200 for n in counts]


@pytest.mark.timeout(300)
def test_a_job_submitted_with_its_venv_as_an_archive_imports_fairstream_from_it(
    bare_standalone: Cluster,  # noqa: F811
    venv_archive: VenvArchive,  # noqa: F811
    noida: Broker,
    tmp_path: Path,
) -> None:
    # The README's spark-submit line: the executors' Python is the archive's, unpacked in
    # their working directory; the driver's is the environment that was packed.
    topic = fill_topic(noida.bootstrap, [30, 20])
    env = {
        **{k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")},
        "PYSPARK_DRIVER_PYTHON": str(venv_archive.venv / "bin" / "python"),
        "PYSPARK_PYTHON": "./environment/bin/python",
        "SPARK_HOME": str(SPARK_HOME),  # the driver's Python has no pyspark to find it by
        "SPARK_LOCAL_IP": "127.0.0.1",
    }
    done = subprocess.run(
        [
            SPARK_HOME / "bin" / "spark-submit",
            *("--master", bare_standalone.master, "--executor-memory", "512m"),
            *("--archives", f"{venv_archive.archive}#environment"),
            REPO / "tests" / "spark" / "archive_job.py",
            *(noida.bootstrap, topic),
        ],
        env=env,
        cwd=tmp_path,  # not the checkout: nothing of it on any path
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    printed = json.loads(done.stdout.strip().splitlines()[-1])
    assert printed["rows"] == [
        [p, o, record_value(p, o).decode() if o else None]
        for p, n in enumerate([30, 20])
        for o in range(n)
    ]
    # The job checked on each executor that fairstream came from ./environment.
    assert len(printed["fairstream"]) == 2
    assert all(
        "/environment/lib/" in place and not place.startswith(str(REPO))
        for place in printed["fairstream"]
    )
