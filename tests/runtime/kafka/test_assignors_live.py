"""The lag adapter in a real group: what the members get is what the planner says,
and the busiest member carries less lag than under range."""

from __future__ import annotations

import json
import uuid

import anyio
import pytest
from aiokafka import AIOKafkaConsumer

from fairstream.assign import member_lags, plan
from fairstream.assign.replan import replan
from fairstream.cli import main
from fairstream.runtime._kafka._admin import BrokerAdmin
from fairstream.runtime._kafka._assignors import PlanningAssignor
from tests.conftest import Broker
from tests.support.kafka_helpers import create_topic, produce
from tests.support.lag_members import settled_plan, start_lag_member

pytestmark = pytest.mark.broker

BACKLOG = (400, 30, 20), (350, 25, 15)  # records per partition of two topics


async def test_lag_group_assignment_is_the_planners_and_beats_range(
    noida: Broker,
    group_id: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("COLUMNS", "200")  # rich wraps to the terminal, 80 columns under capture
    bootstrap = noida.bootstrap
    topics = [f"lag-{name}-{uuid.uuid4().hex[:8]}" for name in ("a", "b")]
    for topic, counts in zip(topics, BACKLOG, strict=True):
        await create_topic(bootstrap, topic, len(counts))
        await produce(bootstrap, topic, [(p, b"x") for p, n in enumerate(counts) for _ in range(n)])

    assignors: list[PlanningAssignor] = []
    consumers: list[AIOKafkaConsumer] = []
    try:
        for index in range(3):
            assignor, consumer = await start_lag_member(
                bootstrap, group_id, topics, client_id=f"member-{index}"
            )
            assignors.append(assignor)
            consumers.append(consumer)

        async with BrokerAdmin(bootstrap) as admin:
            record = await settled_plan(admin, group_id, assignors, 6)
            snapshot, actual = await admin.group_snapshot(group_id, auto_offset_reset="earliest")

        assert record.strategy == "lag"  # the reading was there: no fallback
        assert record.snapshot == snapshot  # the leader saw what the cluster says now
        assert actual == record.assignment == plan("lag", snapshot, record.previous)
        worst = max(member_lags(snapshot, actual).values())
        assert worst < max(member_lags(snapshot, plan("range", snapshot)).values())
        assert worst == 415  # 400 + 15: the bound is 400, the per-topic rule costs 15

        # The live what-if shows the same current assignment and the same lag plan.
        capsys.readouterr()
        argv = ["plan", "--bootstrap", bootstrap, "--group", group_id]
        argv += ["--auto-offset-reset", "earliest"]
        assert await anyio.to_thread.run_sync(main, [*argv, "--format", "json"]) == 0
        plans = json.loads(capsys.readouterr().out)["plans"]
        assert list(plans) == ["current", "range", "roundrobin", "sticky", "fair", "lag"]
        assert plans["current"]["assignment"] == actual.to_json()
        assert plans["lag"]["assignment"] == plan("lag", snapshot, actual).to_json()
        assert plans["lag"]["stats"]["max_member_lag"] == 415
        assert plans["range"]["stats"]["max_member_lag"] == 750
        assert await anyio.to_thread.run_sync(main, argv) == 0  # the table
        table = capsys.readouterr().out
        assert "current" in table and "max member lag" in table and "750" in table

        # What a re-plan would move: nothing for lag now (it is the current plan), ...
        assert plans["lag"]["moves"] == []
        expected = replan(snapshot, actual, plan("range", snapshot, actual)).to_json()
        assert {k: plans["range"][k] for k in expected} == expected
        assert "would keep the current assignment" in table

        # ... and after a burst on two partitions of one member, lag moves one of them.
        member = next(iter(actual.members.values()))
        for topic, (partition,) in member.items():
            await produce(bootstrap, topic, [(partition, b"x")] * 1_000)
        json_argv = [*argv, "--strategy", "lag", "--format", "json"]
        assert await anyio.to_thread.run_sync(main, json_argv) == 0
        shown = json.loads(capsys.readouterr().out)
        async with BrokerAdmin(bootstrap) as admin:
            burst, _ = await admin.group_snapshot(group_id, auto_offset_reset="earliest")
        change = replan(burst, actual, plan("lag", burst, actual))
        assert change.moves and change.busiest_after < change.busiest_now
        assert shown["lag_replan"] == {"min_improvement": 0.1, "would_replan": True}
        assert {k: shown["plans"]["lag"][k] for k in change.to_json()} == change.to_json()
        assert await anyio.to_thread.run_sync(main, [*argv, "--strategy", "lag"]) == 0
        moved = change.moves[0]
        table = capsys.readouterr().out.replace("\n", " ")
        assert f"{moved.topic}[{moved.partition}]" in table
        assert f"would re-plan: {len(change.moves)} partition" in table
    finally:
        for consumer in consumers:
            await consumer.stop()
        for assignor in assignors:
            await assignor.aclose()
