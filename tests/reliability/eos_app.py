"""The app the exactly-once scenarios run with ``fairstream run tests.reliability.eos_app:build``.

It reads ``EOS_INPUT`` and publishes each record's value to ``EOS_OUTPUT`` (the
consume-transform-produce job exactly-once is for), after ``EOS_DELAY`` seconds, so
a SIGKILL or SIGSTOP lands mid-stream. ``EOS_PROCESSING`` picks the mode
(``exactly_once`` by default), ``EOS_ORDERING`` and ``EOS_CONCURRENCY`` the
subscriber's (``"partition"`` and 64 by default), ``EOS_BATCH=1`` makes it a batch
handler (one output per record of the batch), ``EOS_LEAVE=1`` leaves the group on
SIGTERM (a static member stays otherwise), ``EOS_GROUP_ID`` the group;
``FAIRSTREAM_BOOTSTRAP`` and ``FAIRSTREAM_INSTANCE_ID`` are read by fairstream itself.
"""

from __future__ import annotations

import os

import anyio

from fairstream import App, ConsumerConfig, Record


def build() -> App:
    env = os.environ
    app = App(
        group_id=env["EOS_GROUP_ID"],
        processing="exactly_once"
        if env.get("EOS_PROCESSING", "exactly_once") == "exactly_once"
        else "at_least_once",
        consumer=ConsumerConfig(
            session_timeout_ms=10_000,
            heartbeat_interval_ms=1_000,
            leave_group_on_stop=env.get("EOS_LEAVE") == "1",
        ),
    )
    output = env["EOS_OUTPUT"]
    delay = float(env.get("EOS_DELAY", "0.002"))

    if env.get("EOS_BATCH") == "1":

        @app.subscriber(env["EOS_INPUT"], batch=True, max_batch=50)
        async def transform_all(records: list[Record[bytes]]) -> None:
            await anyio.sleep(delay)
            for record in records:
                await app.publish(output, record.value, key=record.key)

        return app

    @app.subscriber(
        env["EOS_INPUT"],
        ordering=env.get("EOS_ORDERING", "partition"),  # type: ignore[arg-type]
        concurrency=int(env.get("EOS_CONCURRENCY", "64")),
    )
    async def transform(record: Record[bytes]) -> None:
        await anyio.sleep(delay)
        await app.publish(output, record.value, key=record.key)

    return app
