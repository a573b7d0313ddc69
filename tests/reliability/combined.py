"""The combined run: a rebalance storm, a kill -9 and a broker restart in one run.

Each fault alone is a scenario of :mod:`tests.reliability.scenarios`; production
meets them together, and with KIP-333 parallel rebalance on, shadows are replaying
when the next fault lands. A dedicated noida broker (it restarts on its data
directory; every member is static, as noida needs) serves one ``fairstream run``
process and in-process members: an anchor that stays and a pool of guests that
join and leave. Half the records are there before the members start, the rest are
produced over the storm. A third of the way through the storm the process is
SIGKILLed and started again under the same instance id; two thirds of the way the
broker is restarted. Every member writes to one sink file, and the checker counts
every record end to end.
"""

from __future__ import annotations

import json
import signal
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import anyio
from aiokafka import TopicPartition

from fairstream import App
from fairstream.runtime._kafka._admin import BrokerAdmin
from tests.reliability.checker import (
    Result,
    Sink,
    check,
    make_ids,
    produce_ids,
    read_sightings,
    wait_for_sightings,
)
from tests.reliability.scenarios import Member, member_app, spawn_sink, start_noida, stop_sink
from tests.support.kafka_helpers import create_topic, read_all

__all__ = ["Combined", "combined_faults"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Combined:
    result: Result
    crashes: list[str]
    """Members that stopped on their own, with the error."""
    exit_code: int
    """The restarted process's, after SIGTERM at the end."""
    not_on_broker: int
    """Records the producer had acknowledged that were not on the broker after its
    restart: noida acknowledges writes it has not persisted, and a SIGTERM restart
    can drop them. No consumer can handle those, so ``result`` counts the rest."""


async def ids_on_broker(bootstrap: str, topic: str, partitions: int) -> set[str]:
    """The ids of every record the broker holds in ``topic``."""
    async with BrokerAdmin(bootstrap) as admin:
        ends = await admin.end_offsets([TopicPartition(topic, p) for p in range(partitions)])
    found = await read_all(bootstrap, topic, partitions, expected=sum(ends.values()))
    return {json.loads(r.value)["id"] for r in found}  # type: ignore[attr-defined]


async def combined_faults(
    *,
    records: int,
    partitions: int,
    events: int,
    seconds: float,
    workdir: Path,
    pool: int = 2,
    wait_limit: float = 600,
) -> Combined:
    """``events`` joins and leaves of ``pool`` guests over ``seconds``, a kill -9 of the
    process at a third of them and a broker restart at two thirds."""
    started = time.monotonic()
    broker = await start_noida(workdir)
    try:
        bootstrap = broker.bootstrap
        topic = f"combined-{uuid.uuid4().hex[:10]}"
        group = f"g-combined-{uuid.uuid4().hex[:8]}"
        await create_topic(bootstrap, topic, partitions)
        ids = make_ids("combined", records)
        half = records // 2
        await produce_ids(bootstrap, topic, ids[:half], partitions)
        sink = Sink(workdir / f"{topic}.sink", "combined")
        env = {
            "FAIRSTREAM_BOOTSTRAP": bootstrap,
            "FAIRSTREAM_INSTANCE_ID": "process-0",
            "SINK_GROUP_ID": group,
            "SINK_TOPIC": topic,
            "SINK_PATH": str(sink.path),
            "SINK_SESSION_TIMEOUT_MS": "6000",
            "SINK_COMMIT_INTERVAL": "1.0",
            "SINK_DELAY": "0.0005",
            "SINK_PARALLEL_REBALANCE": "1",
            "SINK_THRESHOLD": "1000",
        }
        stderr = workdir / f"{topic}.stderr"

        def app(name: str) -> App:
            return member_app(
                bootstrap,
                group,
                topic,
                sink,
                name=name,
                static=True,
                session_timeout_ms=6_000,
                delay=0.0005,
                parallel_rebalance=True,
            )

        crashes: list[str] = []

        def crashed(name: str, member: Member) -> bool:
            if member.failure is None:
                return False
            crashes.append(f"{name}: {type(member.failure).__name__}: {member.failure}")
            return True

        process = spawn_sink({**env, "SINK_TAG": "first"}, stderr)
        try:
            async with anyio.create_task_group() as tasks:
                anchor = Member(app("anchor"))
                await tasks.start(anchor.run)
                rate = (records - half) / seconds
                produced = anyio.Event()

                async def produce_rest() -> None:
                    await produce_ids(bootstrap, topic, ids[half:], partitions, per_second=rate)
                    produced.set()

                tasks.start_soon(produce_rest)
                up: dict[str, Member] = {}
                names = [f"guest-{i}" for i in range(pool)]
                for event in range(events):
                    if event == events // 3:
                        await stop_sink(process, signal.SIGKILL, 10)
                        process = spawn_sink({**env, "SINK_TAG": "second"}, stderr)
                    if event == 2 * events // 3:
                        await anyio.to_thread.run_sync(broker.restart)
                    name = names[event % pool]
                    if name in up and not crashed(name, up[name]):
                        await up.pop(name).leave()
                    else:
                        up[name] = Member(app(name))
                        await tasks.start(up[name].run)
                    await anyio.sleep(seconds / events)  # the pace of the storm, not a wait
                for name in names:
                    if name not in up or crashed(name, up[name]):
                        up[name] = Member(app(name))
                        await tasks.start(up[name].run)
                await produced.wait()
                on_broker = await ids_on_broker(bootstrap, topic, partitions)
                await wait_for_sightings(sink.path, len(on_broker), wait_limit)
                for member in [anchor, *up.values()]:
                    await member.leave()
        finally:
            exit_code = await stop_sink(process, signal.SIGTERM, 30)
        sink.close()
        seen = [s.id for s in read_sightings(sink.path)]
        label = f"storm ({events} joins/leaves) + kill -9 + broker restart, parallel rebalance"
        kept = [i for i in ids if i in on_broker]
        result = check(label, kept, seen, seconds=time.monotonic() - started)
        members = [("anchor", anchor), *up.items()]
        crashes += [f"{n}: {m.failure}" for n, m in members if m.failure is not None]
        return Combined(
            result=result,
            crashes=crashes,
            exit_code=exit_code,
            not_on_broker=len(ids) - len(kept),
        )
    finally:
        await anyio.to_thread.run_sync(broker.stop)
