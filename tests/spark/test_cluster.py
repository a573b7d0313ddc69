"""A backfill and a streaming query on a real standalone cluster (master + two workers).

Each command runs in its own process, as a user would run it: a test process can
hold only one Spark driver, and the shared local session is already one.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from fairstream.spark.cluster import read_states
from tests.conftest import Broker
from tests.spark.conftest import fill_topic, record_value
from tests.spark.standalone import REPO, Cluster, standalone  # noqa: F401 (fixture)

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
