"""The README's two-step rolling upgrade of an eager group to cooperative rebalancing.

Two static members under live traffic are restarted one at a time (same
``instance_id``, as a rolling deployment does): eager -> ``cooperative="upgrade"``
-> ``cooperative=True``. At each step the group runs the protocol the README
promises, and no record is lost. On noida, whose static members are what a
rolling restart relies on (a restarted member takes its place back).
"""

from __future__ import annotations

import time
import uuid
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Literal

import anyio
import pytest

from fairstream import App, ConsumerConfig, Record, SchedulerConfig
from tests.conftest import Broker
from tests.support.kafka_helpers import create_topic
from tests.support.live_traffic import produce_steadily, wait_until

pytestmark = pytest.mark.broker

PARTITIONS = 4
EVERY_S = 0.05
"""The producer writes one record to each partition this often."""

EAGER, COOP = "fairstream-sticky", "fairstream-sticky-coop"

Mode = bool | Literal["upgrade"]


@dataclass
class Traffic:
    written: set[str] = field(default_factory=set)
    handled: Counter[str] = field(default_factory=Counter)
    times: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))

    def recent(self, member: str, within_s: float = 1.0) -> bool:
        stamps = self.times[member]
        return bool(stamps) and stamps[-1] > time.monotonic() - within_s


@dataclass
class Member:
    """One running incarnation of a member: its app and the event that stops it."""

    app: App
    stop: anyio.Event
    done: anyio.Event


def _app(noida: Broker, group_id: str, topic: str, name: str, mode: Mode, traffic: Traffic) -> App:
    app = App(
        bootstrap=noida.bootstrap,
        group_id=group_id,
        instance_id=noida.instance_id(name),
        assignor="sticky",
        cooperative=mode,
        consumer=ConsumerConfig(heartbeat_interval_ms=500, session_timeout_ms=10_000),
        scheduler=SchedulerConfig(commit_interval=0.2),
    )

    @app.subscriber(topic)
    async def handle(record: Record[str]) -> None:
        traffic.handled[record.value] += 1
        traffic.times[name].append(time.monotonic())

    return app


async def _run(member: Member) -> None:
    try:
        async with member.app:
            await member.stop.wait()
    finally:
        member.done.set()


async def test_two_step_rolling_upgrade_switches_to_cooperative_losing_nothing(
    noida: Broker, group_id: str
) -> None:
    topic = f"up-{uuid.uuid4().hex[:10]}"
    await create_topic(noida.bootstrap, topic, PARTITIONS)
    traffic = Traffic()
    stop_producing = anyio.Event()
    members: dict[str, Member] = {}
    history: list[tuple[str, dict[str, str | None]]] = []

    def protocols() -> dict[str, str | None]:
        return {name: m.app.stats().protocol for name, m in members.items()}

    async with anyio.create_task_group() as tasks:

        def start(name: str, mode: Mode) -> None:
            app = _app(noida, group_id, topic, name, mode, traffic)
            members[name] = Member(app, anyio.Event(), anyio.Event())
            tasks.start_soon(_run, members[name])

        async def settle(step: str, protocol: str) -> None:
            """Both members run ``protocol`` and handle records (within the last second)."""
            await wait_until(
                lambda: (
                    set(protocols().values()) == {protocol}
                    and all(traffic.recent(name) for name in members)
                ),
                60,
                lambda: (step, protocols(), history),
            )
            history.append((step, protocols()))

        async def roll(name: str, mode: Mode, protocol: str) -> None:
            member = members[name]
            member.stop.set()
            await member.done.wait()
            traffic.times[name].clear()  # only the new incarnation's records count
            start(name, mode)
            await settle(f"{name} -> {mode}", protocol)

        tasks.start_soon(_traffic, noida.bootstrap, topic, traffic, stop_producing)
        start("m0", False)
        start("m1", False)
        await settle("eager", EAGER)
        # Step 1: every member to "upgrade"; the group stays on the eager protocol.
        await roll("m0", "upgrade", EAGER)
        await roll("m1", "upgrade", EAGER)
        # Step 2: to cooperative; the first restarted member offers only -coop, the
        # one protocol both share, so the group switches to it and stays there.
        await roll("m0", True, COOP)
        await roll("m1", True, COOP)
        stop_producing.set()
        await wait_until(
            lambda: traffic.written <= traffic.handled.keys(),
            30,
            lambda: (len(traffic.written - traffic.handled.keys()), history),
        )
        for member in members.values():
            member.stop.set()

    assert traffic.written <= traffic.handled.keys(), history


async def _traffic(bootstrap: str, topic: str, traffic: Traffic, stop: anyio.Event) -> None:
    await produce_steadily(
        bootstrap, topic, partitions=PARTITIONS, every_s=EVERY_S, written=traffic.written, stop=stop
    )
