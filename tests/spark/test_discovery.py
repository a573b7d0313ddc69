"""A new Spark session finds the ``fairstream`` format without ``register(spark)``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import json
from fairstream.spark import build_session
spark = build_session("local[1]", app_name="fairstream-discovery")
frame = (spark.read.format("fairstream").option("kafka.bootstrap.servers", "unused:9092")
         .option("subscribe", "t").option("kafka.group.id", "g").load())
print(json.dumps(frame.columns))
spark.stop()
"""


def test_a_new_session_finds_the_format_without_register() -> None:
    # As an installed wheel puts pyspark_fairstream.py on the path: the checkout's root.
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        env={**os.environ, "PYTHONPATH": path},
        capture_output=True,
        text=True,
        timeout=170,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    columns = json.loads(done.stdout.strip().splitlines()[-1])
    assert columns == ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"]
