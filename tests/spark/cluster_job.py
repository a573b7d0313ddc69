"""One driver on the standalone cluster: a backfill, 200 new records per partition, a stream.

Run by ``test_cluster.py`` in its own process (a process holds one Spark driver and
the test process already has the local one): ``python -m tests.spark.cluster_job
MASTER BOOTSTRAP GROUP TOPIC OUT``. Prints the records each step read.
"""

from __future__ import annotations

import sys

from confluent_kafka import Producer

from fairstream.spark import BackfillJob, build_session, run_backfill
from fairstream.spark.cluster import read_states
from fairstream.spark.streamjob import StreamJob, run_stream
from tests.spark.conftest import record_value

NEW = 200


def main(master: str, bootstrap: str, group_id: str, topic: str, out: str) -> None:
    spark = build_session(master, app_name="fairstream-cluster-test")
    backfill = BackfillJob(
        bootstrap=bootstrap, group_id=group_id, topics=(topic,), output=f"{out}/backfill"
    )
    print("backfill", run_backfill(backfill, spark=spark).records)
    producer = Producer({"bootstrap.servers": bootstrap})
    for state in read_states(bootstrap, group_id, [topic]):
        for offset in range(state.log_end, state.log_end + NEW):
            producer.produce(
                topic, partition=state.partition, value=record_value(state.partition, offset)
            )
    assert producer.flush(30) == 0
    stream = StreamJob(
        bootstrap=bootstrap,
        group_id=group_id,
        topics=(topic,),
        output=f"{out}/stream",
        checkpoint=f"{out}/ck",
        options={"maxOffsetsPerTrigger": "250"},
    )
    print("stream", run_stream(stream, spark=spark))
    # The block managers the driver knows: its own plus one per executor.
    print("executors", spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1)  # type: ignore[union-attr]
    spark.stop()


if __name__ == "__main__":
    main(*sys.argv[1:6])
