"""Lifecycle hooks and rebalance listeners: when they run, in which order, and what their
failures do, under every way of running an app."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import pytest
from aiokafka import TopicPartition
from structlog.testing import capture_logs

from fairstream import App, ConfigError, Record, SchedulerConfig
from tests.support.backends import Backend

QUICK = SchedulerConfig(commit_interval=0.1)


async def _run_until(app: App, how: str, done: anyio.Event) -> None:
    """Run ``app`` the way ``how`` names until ``done``, then stop it."""
    with anyio.fail_after(30):
        if how == "async with":
            async with app:
                await done.wait()
        elif how == "lifespan":
            async with app.lifespan(object()):
                await done.wait()
        else:
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(app.run)
                await done.wait()
                app.stop()


@pytest.mark.parametrize("how", ["async with", "app.run()", "lifespan"])
async def test_startup_hooks_run_before_the_first_record_and_shutdown_after_the_commit(
    backend: Backend, group_id: str, how: str
) -> None:
    topic = await backend.create_topic(1)
    await backend.produce(topic, [(0, b"a"), (0, b"b")])
    app = backend.app(group_id=group_id, scheduler=QUICK)
    steps: list[str] = []
    done = anyio.Event()

    @app.on_startup
    async def connect() -> None:
        steps.append("connect")

    @app.on_startup
    async def warm_up() -> None:
        steps.append("warm up")

    @app.subscriber(topic)
    async def handle(record: Record[bytes]) -> None:
        steps.append(f"handle {record.value.decode()}")
        if record.offset == 1:
            done.set()

    @app.on_shutdown
    async def flush() -> None:
        committed = await backend.committed(group_id, topic, 1)
        steps.append(f"flush, committed {committed}")

    @app.on_shutdown
    async def disconnect() -> None:
        steps.append("disconnect")

    await _run_until(app, how, done)

    assert steps == [
        "connect",
        "warm up",
        "handle a",
        "handle b",
        "flush, committed [2]",
        "disconnect",
    ]


async def test_a_failing_startup_hook_stops_the_start_and_a_failing_shutdown_hook_is_logged(
    backend: Backend, group_id: str
) -> None:
    topic = await backend.create_topic(1)
    await backend.produce(topic, [(0, b"a")])
    app = backend.app(group_id=group_id, scheduler=QUICK)
    steps: list[str] = []
    fail_start = True
    done = anyio.Event()

    @app.on_startup
    async def connect() -> None:
        if fail_start:
            raise RuntimeError("database unreachable")

    @app.subscriber(topic)
    async def handle(record: Record[bytes]) -> None:
        steps.append("handle")
        done.set()

    @app.on_shutdown
    async def broken() -> None:
        raise RuntimeError("cannot close")

    @app.on_shutdown
    async def disconnect() -> None:
        steps.append("disconnect")

    with pytest.raises(RuntimeError, match="database unreachable"):
        async with app:
            pass
    assert steps == [], "nothing ran: no record, no shutdown hook"

    fail_start = False
    with capture_logs() as logs:
        await _run_until(app, "async with", done)
    assert steps == ["handle", "disconnect"]
    (failed,) = [e for e in logs if e["event"] == "shutdown_hook_failed"]
    assert failed["hook"].endswith("broken")
    assert failed["error"] == "RuntimeError: cannot close"
    assert isinstance(failed["exc_info"], RuntimeError)


def test_hooks_and_listeners_must_be_async() -> None:
    app = App(bootstrap="127.0.0.1:9", group_id="g")
    decorators: list[Callable[[Any], Any]] = [
        app.on_startup,
        app.on_shutdown,
        app.on_partitions_assigned,
        app.on_partitions_revoked,
    ]
    for decorator in decorators:
        with pytest.raises(ConfigError, match="is not an async function"):
            decorator(lambda *_: None)


Calls = list[tuple[str, list[TopicPartition]]]


def _listening(app: App, calls: Calls, committed: Callable[[], Awaitable[Any]]) -> None:
    @app.on_partitions_assigned
    async def broken(partitions: list[TopicPartition]) -> None:
        calls.append(("broken", partitions))
        raise RuntimeError("listener bug")

    @app.on_partitions_assigned
    async def assigned(partitions: list[TopicPartition]) -> None:
        calls.append(("assigned", partitions))

    @app.on_partitions_revoked
    async def revoked(partitions: list[TopicPartition]) -> None:
        calls.append((f"revoked, committed {await committed()}", partitions))


async def test_listeners_get_the_partitions_in_order_and_a_failing_one_is_not_fatal(
    backend: Backend, group_id: str
) -> None:
    topic = await backend.create_topic(2)
    await backend.produce(topic, [(p, b"x") for p in (0, 1, 0, 1)])
    app = backend.app(group_id=group_id, scheduler=QUICK)
    calls: Calls = []
    handled = 0
    done = anyio.Event()
    _listening(app, calls, lambda: backend.committed(group_id, topic, 2))

    @app.subscriber(topic)
    async def handle(record: Record[bytes]) -> None:
        nonlocal handled
        handled += 1
        if handled == 4:
            done.set()

    with capture_logs() as logs:
        await _run_until(app, "async with", done)

    both = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
    # Leaving the group gives the partitions up: after the final commit.
    assert calls == [("broken", both), ("assigned", both), ("revoked, committed [2, 2]", both)]
    (failed,) = [e for e in logs if e["event"] == "rebalance_listener_failed"]
    assert failed["listener"].endswith("broken")
    assert failed["partitions_were"] == "assigned"
    assert failed["error"] == "RuntimeError: listener bug"


async def test_revoked_listeners_run_after_the_revoked_partitions_are_committed(
    backend: Backend, group_id: str
) -> None:
    if backend.name == "noida":
        pytest.skip(
            "noida refuses a commit racing a rebalance (docs/testing.md, the embedded brokers' "
            "quirks): the revoke commit it answers ILLEGAL_GENERATION is kept for later"
        )
    partitions = 4
    topic = await backend.create_topic(partitions)
    await backend.produce(topic, [(i % partitions, b"x") for i in range(400)])
    handled: dict[str, dict[int, int]] = {"first": {}, "second": {}}
    revoked: list[tuple[dict[int, int], list[int | None]]] = []
    half_way = anyio.Event()
    first_revoke = anyio.Event()

    def total() -> int:
        return sum(n for member in handled.values() for n in member.values())

    def member(name: str) -> App:
        app = backend.app(
            group_id=group_id,
            instance_id=backend.instance_id(name),
            # No periodic commit in the test's time: what is committed, the revoke did.
            scheduler=SchedulerConfig(commit_interval=60.0, partition_quota=5, concurrency=1),
        )

        @app.subscriber(topic)
        async def handle(record: Record[bytes]) -> None:
            handled[name][record.partition] = record.offset + 1
            await anyio.sleep(0.005)
            if total() >= 40:
                half_way.set()

        @app.on_partitions_revoked
        async def flush(tps: list[TopicPartition]) -> None:
            if name == "first" and not revoked:
                committed = await backend.committed(group_id, topic, partitions)
                mine = {tp.partition: handled[name].get(tp.partition, 0) for tp in tps}
                revoked.append((mine, committed))
                first_revoke.set()

        return app

    async with member("first"):
        with anyio.fail_after(60):
            await half_way.wait()
        async with member("second"):
            with anyio.fail_after(90):
                await first_revoke.wait()

    # The first member's first revoke came from the second member's join: its
    # partitions were committed as far as it had handled them when the listener ran.
    ((handled_then, committed_then),) = revoked
    assert sum(handled_then.values()) >= 40
    for partition, next_offset in handled_then.items():
        assert committed_then[partition] == (next_offset or None)


async def test_a_start_that_fails_after_the_startup_hooks_runs_the_shutdown_hooks(
    backend: Backend, group_id: str
) -> None:
    app = backend.app(group_id=group_id)
    steps: list[str] = []

    @app.on_startup
    async def connect() -> None:
        steps.append("connect")

    @app.subscriber("no-such-topic")
    async def handle(record: Record[bytes]) -> None: ...

    @app.on_shutdown
    async def disconnect() -> None:
        steps.append("disconnect")

    with pytest.raises(ConfigError, match="no-such-topic"):
        async with app:
            pass
    assert steps == ["connect", "disconnect"]
