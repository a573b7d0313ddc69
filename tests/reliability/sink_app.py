"""The app the process scenarios run with ``fairstream run tests.reliability.sink_app:build``.

Configured from the environment, so a test can start it as a real process, kill
it and start it again:

- ``FAIRSTREAM_BOOTSTRAP``, ``FAIRSTREAM_INSTANCE_ID``: read by fairstream itself;
- ``SINK_GROUP_ID``, ``SINK_TOPIC``, ``SINK_PATH`` (the sink file), ``SINK_TAG``;
- ``SINK_DELAY``: seconds the handler spends per record (default 0.001), so a
  SIGKILL lands in the middle of a batch;
- ``SINK_MAX_BATCH``, ``SINK_COMMIT_INTERVAL``, ``SINK_SESSION_TIMEOUT_MS``,
  ``SINK_SHUTDOWN_TIMEOUT``;
- ``SINK_ASSIGNOR``, ``SINK_THRESHOLD``, ``SINK_SASL_PASSWORD``: for the bad
  configuration and secrets scenarios;
- ``SINK_PARALLEL_REBALANCE=1``: KIP-333 parallel rebalance (the soak's variant);
- ``SINK_COOPERATIVE=1``: cooperative rebalancing (KIP-429; with ``SINK_ASSIGNOR=sticky``);
- ``SINK_STOP_AT_REVOKE``: a path; the first member to give up partitions while a
  file is there takes it (renamed to ``<path>.<SINK_TAG>``) and stops itself with
  SIGSTOP in its revoke listener (after the revoke commit; lost partitions reach it
  too, uncommitted), so that a test kills it at that point whatever the load;
- ``SINK_MANUAL_FLUSH=N``: ``ack="manual"``; the handler buffers each partition's
  records and writes them to the sink ``N`` at a time, then acknowledges the last
  one written: the reason users choose manual acks, and what a commit must not pass.
"""

from __future__ import annotations

import os
import signal
from typing import Any

import anyio
from aiokafka import TopicPartition

from fairstream import (
    App,
    ConsumerConfig,
    ParallelRebalance,
    Record,
    SchedulerConfig,
    SecurityConfig,
)
from tests.reliability.checker import Sink


def build() -> App:
    env = os.environ
    security = None
    if env.get("SINK_SASL_PASSWORD"):
        security = SecurityConfig(
            protocol="SASL_PLAINTEXT",
            sasl_mechanism="PLAIN",
            username="svc-orders",
            password=env["SINK_SASL_PASSWORD"],
        )
    flush = int(env.get("SINK_MANUAL_FLUSH", "0"))
    app = App(
        group_id=env.get("SINK_GROUP_ID", "sink"),
        ack="manual" if flush else "auto",
        assignor=env.get("SINK_ASSIGNOR", "fair"),
        cooperative=env.get("SINK_COOPERATIVE") == "1",
        parallel_rebalance=ParallelRebalance(threshold=int(env.get("SINK_THRESHOLD", "10000")))
        if env.get("SINK_PARALLEL_REBALANCE") == "1"
        else False,
        consumer=ConsumerConfig(
            session_timeout_ms=int(env.get("SINK_SESSION_TIMEOUT_MS", "10000")),
            heartbeat_interval_ms=1_000,
        ),
        scheduler=SchedulerConfig(
            commit_interval=float(env.get("SINK_COMMIT_INTERVAL", "0.5")),
            max_batch=int(env.get("SINK_MAX_BATCH", "100")),
            shutdown_timeout=float(env.get("SINK_SHUTDOWN_TIMEOUT", "30")),
        ),
        security=security,
    )
    sink = Sink(env.get("SINK_PATH", "sink.log"), env.get("SINK_TAG", str(os.getpid())))
    delay = float(env.get("SINK_DELAY", "0.001"))
    if flush:
        buffers: dict[int, list[Record[dict[str, Any]]]] = {}

        @app.subscriber(env.get("SINK_TOPIC", "orders"))
        async def buffer(record: Record[dict[str, Any]]) -> None:
            pending = buffers.setdefault(record.partition, [])
            pending.append(record)
            await anyio.sleep(delay)
            if len(pending) >= flush:
                for done in pending:
                    sink.write_record(done)
                await app.commit(pending[-1])
                pending.clear()

        return app

    stop_flag = env.get("SINK_STOP_AT_REVOKE")
    if stop_flag:

        @app.on_partitions_revoked
        async def stop_here(partitions: list[TopicPartition]) -> None:
            try:
                os.rename(stop_flag, f"{stop_flag}.{sink.tag}")  # atomic: one member wins
            except FileNotFoundError:
                return
            os.kill(os.getpid(), signal.SIGSTOP)

    @app.subscriber(env.get("SINK_TOPIC", "orders"), batch=True)
    async def handle(records: list[Record[dict[str, Any]]]) -> None:
        for record in records:
            sink.write_record(record)
            await anyio.sleep(delay)

    return app
