"""A member its group will not keep says why and stops (``runtime/_kafka/_membership.py``).

Two processes with one static instance id, and a cooperative member in a group
that runs a protocol it never offered, used to loop or wait without a word (issue
#38). Each now ends with one :class:`MembershipError` (``fairstream run``: one line,
exit 2). noida sends neither FENCED_INSTANCE_ID nor INCONSISTENT_GROUP_PROTOCOL, so
these run there; Kafka's FENCED_INSTANCE_ID, which neither embedded broker sends, is
put into a real heartbeat answer.
"""

from __future__ import annotations

import inspect
import signal
import sys
import uuid
from pathlib import Path
from typing import Any

import anyio
import pytest
import structlog
from aiokafka import AIOKafkaConsumer
from aiokafka.consumer.group_coordinator import CoordinatorGroupRebalance, GroupCoordinator
from aiokafka.errors import UnknownError, for_code
from aiokafka.protocol.group import HeartbeatRequest

from fairstream import App, ConsumerConfig, MembershipError, Record
from fairstream.runtime._kafka._membership import watch_membership
from fairstream.runtime._ports import MembershipRefused
from tests.conftest import Broker
from tests.reliability.checker import make_ids, produce_ids, wait_for_sightings
from tests.reliability.scenarios import spawn_sink, stop_sink
from tests.support.kafka_helpers import create_topic
from tests.support.live_traffic import wait_until

pytestmark = pytest.mark.broker


async def _exit_code(process: Any, within_s: float) -> int | None:
    """The process's exit code once it ended, or ``None`` after ``within_s``."""
    with anyio.move_on_after(within_s):
        while process.poll() is None:  # noqa: ASYNC110 - a process we started
            await anyio.sleep(0.1)
    code: int | None = process.poll()
    return code


async def test_two_processes_with_one_instance_id_stop_the_older_with_one_line(
    noida: Broker, tmp_path: Path
) -> None:
    """Before: both took the instance in turn (19 rebalances each in 30 s), silently."""
    topic, group = f"twin-{uuid.uuid4().hex[:8]}", f"twin-{uuid.uuid4().hex[:8]}"
    await create_topic(noida.bootstrap, topic, 2)
    await produce_ids(noida.bootstrap, topic, make_ids("twin", 20), 2)
    sink = tmp_path / "twin.sink"
    env = {
        "FAIRSTREAM_BOOTSTRAP": noida.bootstrap,
        "FAIRSTREAM_INSTANCE_ID": "twin",
        "SINK_GROUP_ID": group,
        "SINK_TOPIC": topic,
        "SINK_PATH": str(sink),
    }
    older = spawn_sink({**env, "SINK_TAG": "older"}, tmp_path / "older.stderr")
    newer = None
    try:
        await wait_for_sightings(sink, 20, 60)  # the older one holds the instance
        newer = spawn_sink({**env, "SINK_TAG": "newer"}, tmp_path / "newer.stderr")
        code = await _exit_code(older, 60)
    finally:
        for process in (older, newer):
            if process is not None and process.poll() is None:
                await stop_sink(process, signal.SIGTERM, 30)
    stderr = (tmp_path / "older.stderr").read_text().splitlines()
    assert code == 2, stderr[-5:]
    # noida answers the older one UNKNOWN_MEMBER_ID (a new member id per join); Kafka
    # fences it.
    how = (
        f"the broker gave its instance to member {_holder(stderr[-1])!r} (it answered "
        "this one UNKNOWN_MEMBER_ID)"
        if noida.info is not None
        else "the broker fenced this member (FENCED_INSTANCE_ID)"
    )
    assert stderr[-1] == (
        f"fairstream run: error: this member cannot stay in group {group!r}, instance_id "
        f"'twin': another process runs with the same instance_id: {how}; give each "
        "process its own instance_id (FAIRSTREAM_INSTANCE_ID)"
    )
    assert not any("Traceback" in line for line in stderr)


def _holder(line: str) -> str:
    """The member id the message names."""
    return line.split("to member '", 1)[-1].split("'", 1)[0]


async def test_a_cooperative_member_told_to_run_a_protocol_it_never_offered_stops(
    noida: Broker, group_id: str
) -> None:
    """noida answers its JoinGroup with the plain member's ``roundrobin``; before, the
    app sat with no assignment and no word for as long as it ran."""
    topic = f"proto-{group_id[-8:]}"
    await create_topic(noida.bootstrap, topic, 2)
    plain = AIOKafkaConsumer(
        topic, bootstrap_servers=noida.bootstrap, group_id=group_id, enable_auto_commit=False
    )
    await plain.start()
    app = App(
        bootstrap=noida.bootstrap,
        group_id=group_id,
        assignor="sticky",
        cooperative=True,
        consumer=ConsumerConfig(heartbeat_interval_ms=500),
    )

    @app.subscriber(topic)
    async def handle(record: Record[bytes]) -> None:
        pass

    try:
        with anyio.fail_after(20):
            while not plain.assignment():
                await plain.getmany(timeout_ms=100)
        with pytest.raises(MembershipError) as caught, anyio.fail_after(30):
            async with app:
                await anyio.sleep_forever()
    finally:
        await plain.stop()
    message = str(caught.value)
    assert caught.value.group_id == group_id
    # Kafka refuses the join (INCONSISTENT_GROUP_PROTOCOL) without naming the protocol.
    chosen = "protocol 'roundrobin'" if noida.info is not None else "a protocol"
    assert f"the group runs {chosen}, which this member did not offer" in message
    assert "fairstream-sticky-coop" in message
    assert "\n" not in message


async def test_fenced_instance_id_from_the_broker_stops_the_member(
    noida: Broker, group_id: str
) -> None:
    """Kafka's answer to the older of two members with one instance id (KIP-345).
    Neither embedded broker sends it, so a real heartbeat answer is given its code."""
    topic = f"fenced-{group_id[-8:]}"
    await create_topic(noida.bootstrap, topic, 1)
    consumer = AIOKafkaConsumer(
        bootstrap_servers=noida.bootstrap,
        group_id=group_id,
        group_instance_id="fenced",
        enable_auto_commit=False,
        heartbeat_interval_ms=200,
    )
    await consumer.start()
    coordinator: Any = consumer._coordinator
    send, fence = coordinator._send_req, anyio.Event()

    async def broker(request: Any) -> Any:
        response = await send(request)
        if fence.is_set() and isinstance(request, HeartbeatRequest):
            response.error_code = 82  # FENCED_INSTANCE_ID
        return response

    coordinator._send_req = broker
    try:
        assert watch_membership(consumer, group_id=group_id, instance_id="fenced")
        consumer.subscribe([topic])
        with anyio.fail_after(20):
            while not consumer.assignment():
                await consumer.getmany(timeout_ms=100)
            fence.set()
            with pytest.raises(MembershipRefused) as caught:
                while True:
                    await consumer.getmany(timeout_ms=100)
    finally:
        await consumer.stop()
    error = caught.value.error
    assert (error.group_id, error.instance_id) == (group_id, "fenced")
    assert "the broker fenced this member (FENCED_INSTANCE_ID)" in str(error)


async def test_the_pinned_aiokafka_has_what_the_watch_relies_on(
    noida: Broker, group_id: str
) -> None:
    """Fails loudly when an aiokafka upgrade changes what ``_membership`` wraps, or an
    App's consumer lacks a hook (``_refused_commits`` too). If the first assertion
    fails, aiokafka learnt FENCED_INSTANCE_ID: check what it raises."""
    assert for_code(82) is UnknownError
    app = App(bootstrap=noida.bootstrap, group_id=group_id, instance_id="pinned")
    topic = f"pin-{group_id[-8:]}"
    await create_topic(noida.bootstrap, topic, 1)

    @app.subscriber(topic)
    async def handle(record: Record[bytes]) -> None:
        pass

    with structlog.testing.capture_logs() as logs:
        async with app:
            await app.wait_ready()
            coordinator = app._clients.consumer._coordinator  # type: ignore[union-attr]
            hooked = {
                name: getattr(coordinator, name).__qualname__.split(".<locals>")[0]
                for name in (
                    "_send_req",
                    "_push_error_to_user",
                    "_on_join_prepare",
                    "commit_offsets",
                    "_do_commit_offsets",
                    "reset_generation",
                )
            }
    unpatched = {"membership_watch_unavailable", "refused_commit_unpatched"}
    assert not [e for e in logs if e["event"] in unpatched]
    assert hooked == {
        "_send_req": "_Watch.send",
        "_push_error_to_user": "_Watch.push",
        "_on_join_prepare": "_Watch.prepare",
        "commit_offsets": "keep_member_on_refused_commit",
        "_do_commit_offsets": "keep_member_on_refused_commit",
        "reset_generation": "keep_member_on_refused_commit",
    }
    # Where aiokafka calls what the watch wraps, and the answers it reads there.
    calls = {
        GroupCoordinator._coordination_routine: "await self._push_error_to_user(exc)",
        GroupCoordinator.ensure_active_group: "await self._on_join_prepare(prev_assignment)",
        CoordinatorGroupRebalance.perform_group_join: "Errors.InconsistentGroupProtocolError,",
        GroupCoordinator._do_heartbeat: "Unexpected exception in heartbeat task",
    }
    for function, call in calls.items():
        source = inspect.getsource(function)
        if function is GroupCoordinator._coordination_routine:
            source = inspect.getsource(GroupCoordinator)  # its body is the mangled one
        assert call in source, f"{function.__qualname__} no longer has {call}"


def test_a_coordinator_not_aiokafkas_is_left_alone() -> None:
    class Consumer:
        _coordinator = object()

    with structlog.testing.capture_logs() as logs:
        assert watch_membership(Consumer(), group_id="g", instance_id=None) is False
    assert [e["event"] for e in logs] == ["membership_watch_unavailable"]


_GHOST = """
import asyncio, sys
from aiokafka import AIOKafkaConsumer

async def main(bootstrap, group, topic):
    # 6 s, the least noida accepts, as the app's: noida holds a round for the longest
    # rebalance timeout of its members, and the app's stop waits that round out
    # (aiokafka's default 10 s made it 4 s longer).
    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=bootstrap, group_id=group, session_timeout_ms=6000
    )
    await consumer.start()
    while not consumer.assignment():
        await consumer.getmany(timeout_ms=100)
    print("assigned", flush=True)
    await asyncio.sleep(3600)

asyncio.run(main(*sys.argv[1:]))
"""


async def test_a_member_that_gets_no_assignment_for_a_rebalance_timeout_says_so(
    noida: Broker, group_id: str
) -> None:
    """A member killed without leaving stays noida's leader (it never evicts): each
    round waits for its SyncGroup and times out. Before, the app waited in silence
    (issue #38: 90 s, nothing logged); now one warning after one rebalance timeout."""
    if noida.info is None:
        pytest.skip("Kafka evicts a member gone without LeaveGroup: no round waits for it")
    topic = f"ghost-{group_id[-8:]}"
    await create_topic(noida.bootstrap, topic, 2)
    argv = [sys.executable, "-c", _GHOST, noida.bootstrap, group_id, topic]
    async with await anyio.open_process(argv) as ghost:
        assert ghost.stdout is not None
        with anyio.fail_after(30):
            assert (await ghost.stdout.receive()).startswith(b"assigned")
        ghost.kill()  # SIGKILL: no LeaveGroup
    app = App(
        bootstrap=noida.bootstrap,
        group_id=group_id,
        assignor=["sticky", "roundrobin"],  # the dead member offered roundrobin
        consumer=ConsumerConfig(session_timeout_ms=6_000, heartbeat_interval_ms=1_000),
    )

    @app.subscriber(topic)
    async def handle(record: Record[bytes]) -> None:
        pass

    with structlog.testing.capture_logs() as logs:
        async with app:
            await wait_until(
                lambda: any(e["event"] == "group_assignment_waiting" for e in logs), 30
            )
            assert app.stats().partitions == ()
    waiting = [e for e in logs if e["event"] == "group_assignment_waiting"]
    assert len(waiting) == 1
    assert waiting[0]["group_id"] == group_id
    assert waiting[0]["waited_s"] == 6.0
    assert waiting[0]["log_level"] == "warning"
