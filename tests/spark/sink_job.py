"""A read -> transform -> Kafka-sink streaming query, run in its own process to be killed.

``python -m tests.spark.sink_job BOOTSTRAP GROUP SOURCE OUT CHECKPOINT TRIGGER``:
reads SOURCE with the fairstream source (500 records a batch), appends ``!`` to each
value and writes it to OUT with the fairstream sink. TRIGGER ``available-now`` drains
what is there and exits; ``running`` runs micro-batches until it is killed.
"""

from __future__ import annotations

import sys

from pyspark.sql import functions as F

from fairstream.spark import build_session, register


def main(
    bootstrap: str, group_id: str, source: str, out: str, checkpoint: str, trigger: str
) -> None:
    spark = build_session("local[2]", app_name="fairstream-sink-job")
    register(spark)
    writer = (
        spark.readStream.format("fairstream")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", source)
        .option("kafka.group.id", group_id)
        .option("maxOffsetsPerTrigger", "500")
        .load()
        .select(F.col("key"), F.concat(F.col("value"), F.lit(b"!")).alias("value"))
        .writeStream.format("fairstream")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", out)
        .option("checkpointLocation", checkpoint)
    )
    if trigger == "available-now":
        writer.trigger(availableNow=True).start().awaitTermination()
    else:
        print("started", flush=True)
        writer.trigger(processingTime="0.2 seconds").start().awaitTermination()
    spark.stop()


if __name__ == "__main__":
    main(*sys.argv[1:7])
