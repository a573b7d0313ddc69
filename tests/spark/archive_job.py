"""A job as a user submits it to a cluster whose executors have no fairstream.

``spark-submit --archives venv.tar.gz#environment tests/spark/archive_job.py BOOTSTRAP
TOPIC`` with ``PYSPARK_PYTHON=./environment/bin/python``: each executor unpacks the
archive into its working directory as ``environment`` and runs its Python workers
from there. The job reads the topic with the ``fairstream`` format (found without a
``register`` call, as fairstream is installed in the driver's environment) and asks
every executor where it imported fairstream from. It imports nothing from the checkout,
as a user's job would not. Prints one JSON line: the records read and those places.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterable, Iterator

from pyspark.sql import SparkSession


def where_fairstream(_: Iterable[object]) -> Iterator[str]:
    """The fairstream an executor's Python imports: it must be the archive's."""
    import fairstream

    place = os.path.realpath(fairstream.__file__)
    archive = os.path.realpath("environment")
    assert place.startswith(archive + os.sep), f"fairstream from {place}, not from {archive}"
    yield place


def main(bootstrap: str, topic: str) -> None:
    spark = SparkSession.builder.appName("fairstream-archive-test").getOrCreate()
    frame = (
        spark.read.format("fairstream")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .load()
    )
    rows = sorted((row.partition, row.offset, row.value) for row in frame.collect())
    places = spark.sparkContext.parallelize(range(2), 2).mapPartitions(where_fairstream)
    values = [[p, o, None if v is None else v.decode()] for p, o, v in rows]
    print(json.dumps({"rows": values, "fairstream": places.collect()}))
    spark.stop()


if __name__ == "__main__":
    main(*sys.argv[1:3])
