"""The examples run as their docstrings say, on a real broker (and the MemoryBroker test as is)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import pytest

from tests.conftest import Broker
from tests.support.kafka_helpers import (
    create_topic,
    input_output_topics,
    produce,
    read_all,
    read_committed,
)

EXAMPLES = Path(__file__).parents[2] / "examples"

Event = dict[str, Any]


def _env(**settings: str) -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("FAIRSTREAM_")}
    return clean | {"FAIRSTREAM_LOG_FORMAT": "json"} | settings


@asynccontextmanager
async def _fairstream_run(*args: str, env: dict[str, str]) -> AsyncIterator[anyio.abc.Process]:
    """``fairstream run ...`` in examples/, stopped with SIGTERM (exit 0) at the end."""
    process = await anyio.open_process(
        [sys.executable, "-m", "fairstream", "run", *args],
        cwd=EXAMPLES,
        env=env,
        stderr=subprocess.PIPE,
    )
    async with process:
        try:
            yield process
        finally:
            process.send_signal(signal.SIGTERM)
            with anyio.fail_after(60):
                code = await process.wait()
    assert code == 0


async def _events_until(
    process: anyio.abc.Process, done: Callable[[list[Event]], bool]
) -> list[Event]:
    """The JSON log events of ``process`` until ``done(events)`` holds."""
    assert process.stderr is not None
    events: list[Event] = []
    buffered = b""
    async for chunk in process.stderr:
        buffered += chunk
        *lines, buffered = buffered.split(b"\n")
        events.extend(json.loads(line) for line in lines)
        if done(events):
            return events
    raise AssertionError(f"the app stopped; it logged {[e['event'] for e in events]}")


def _named(events: list[Event], name: str) -> list[Event]:
    return [e for e in events if e["event"] == name]


def test_the_memory_broker_test_passes_as_written() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "test_dead_letters.py", "-q", "-p", "no:cacheprovider"],
        cwd=EXAMPLES,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 passed" in result.stdout


@pytest.mark.broker
async def test_produce_and_consume_handles_what_it_published(broker: Broker, group_id: str) -> None:
    topic = f"orders-{uuid.uuid4().hex[:10]}"
    await create_topic(broker.bootstrap, topic, 3)
    env = _env(FAIRSTREAM_BOOTSTRAP=broker.bootstrap, FAIRSTREAM_GROUP_ID=group_id)
    result = await anyio.run_process(
        [sys.executable, "produce_and_consume.py"],
        cwd=EXAMPLES,
        env=env | {"ORDERS_TOPIC": topic},
        check=False,
    )
    assert result.returncode == 0, result.stderr.decode()
    assert result.stdout.decode().startswith("handled 10 orders of run ")
    assert result.stdout.decode().endswith(", 450 in total\n")
    assert len(await read_all(broker.bootstrap, topic, 3, 10)) == 10


@pytest.mark.broker
async def test_batch_handler_counts_every_click_in_bounded_batches(
    noida: Broker, group_id: str
) -> None:
    topic = f"clicks-{uuid.uuid4().hex[:10]}"
    await create_topic(noida.bootstrap, topic, 4)
    clicks = [(i % 4, b'{"page": "/p%d"}' % (i % 3)) for i in range(1_200)]
    await produce(noida.bootstrap, topic, clicks)
    env = _env(FAIRSTREAM_BOOTSTRAP=noida.bootstrap, FAIRSTREAM_GROUP_ID=group_id)
    async with _fairstream_run("batch_handler:app", env=env | {"CLICKS_TOPIC": topic}) as app:
        with anyio.fail_after(60):
            events = await _events_until(
                app, lambda ev: sum(e["records"] for e in _named(ev, "clicks_counted")) >= 1_200
            )
    batches = _named(events, "clicks_counted")
    assert sum(b["records"] for b in batches) == 1_200
    assert all(0 < b["records"] <= 500 for b in batches)
    totals = {page: sum(b["pages"].get(page, 0) for b in batches) for page in ("/p0", "/p1", "/p2")}
    assert totals == {"/p0": 400, "/p1": 400, "/p2": 400}


@pytest.mark.broker
async def test_key_ordered_keeps_each_customer_in_order(noida: Broker, group_id: str) -> None:
    topic = f"orders-{uuid.uuid4().hex[:10]}"
    await create_topic(noida.bootstrap, topic, 4)
    for c in range(10):
        orders = [(c % 4, b'{"n": %d}' % n) for n in range(1, 11)]
        await produce(noida.bootstrap, topic, orders, key=b"c%d" % c)
    env = _env(FAIRSTREAM_BOOTSTRAP=noida.bootstrap, FAIRSTREAM_GROUP_ID=group_id)
    async with _fairstream_run("key_ordered:app", env=env | {"ORDERS_TOPIC": topic}) as app:
        with anyio.fail_after(60):
            events = await _events_until(app, lambda ev: len(_named(ev, "order_synced")) >= 100)
    synced = _named(events, "order_synced")
    for c in range(10):
        assert [e["n"] for e in synced if e["customer"] == f"c{c}"] == list(range(1, 11))


@pytest.mark.broker
async def test_exactly_once_publishes_each_enriched_order_once(
    noida: Broker, group_id: str
) -> None:
    orders, enriched = await input_output_topics(noida.bootstrap, "orders", 4)
    await produce(
        noida.bootstrap,
        orders,
        [(n % 4, b'{"n": %d, "total": %d0}' % (n, n)) for n in range(1, 21)],
    )
    env = _env(FAIRSTREAM_BOOTSTRAP=noida.bootstrap, FAIRSTREAM_GROUP_ID=group_id)
    topics = {"ORDERS_TOPIC": orders, "ENRICHED_TOPIC": enriched}
    async with _fairstream_run("exactly_once:app", env=env | topics):
        with anyio.fail_after(60):
            while len(out := await read_committed(noida.bootstrap, enriched, 4)) < 20:  # noqa: ASYNC110 - outputs commit every 100 ms: no event
                await anyio.sleep(0.1)
    values = sorted((json.loads(v or b"") for v in out), key=lambda v: v["n"])
    assert [(v["n"], v["vip"]) for v in values] == [(n, n * 10 > 100) for n in range(1, 21)]


@pytest.mark.broker
async def test_pydantic_model_validates_and_dead_letters_what_does_not_fit(
    noida: Broker, group_id: str
) -> None:
    topic = f"payments-{uuid.uuid4().hex[:10]}"
    await create_topic(noida.bootstrap, topic, 1)
    values = [
        b'{"id": 1, "amount": "12.50", "currency": "EUR"}',
        b'{"id": "x"}',
        b'{"id": 2, "amount": 3}',
    ]
    await produce(noida.bootstrap, topic, [(0, v) for v in values])
    env = _env(FAIRSTREAM_BOOTSTRAP=noida.bootstrap, FAIRSTREAM_GROUP_ID=group_id)
    async with _fairstream_run("pydantic_model:app", env=env | {"PAYMENTS_TOPIC": topic}) as app:
        with anyio.fail_after(60):
            events = await _events_until(app, lambda ev: len(_named(ev, "payment_received")) == 2)
        with anyio.fail_after(60):
            (dead,) = await read_all(noida.bootstrap, f"{topic}.dlq", 1, 1)
    received = _named(events, "payment_received")
    assert [(e["id"], e["amount"]) for e in received] == [(1, "12.50"), (2, "3")]
    assert dead.value == b'{"id": "x"}'  # type: ignore[attr-defined]
    assert dict(dead.headers)["fairstream.error.type"] == b"DecodeError"  # type: ignore[attr-defined]


@pytest.mark.broker
async def test_the_dead_letter_consumer_sees_the_failed_record(noida: Broker) -> None:
    topic = f"orders-{uuid.uuid4().hex[:10]}"
    await create_topic(noida.bootstrap, topic, 2)
    env = _env(FAIRSTREAM_BOOTSTRAP=noida.bootstrap, ORDERS_TOPIC=topic)
    groups = [f"g-{uuid.uuid4().hex[:8]}" for _ in range(2)]
    async with _fairstream_run("dead_letters:app", "--group-id", groups[0], env=env) as app:
        with anyio.fail_after(60):
            await _events_until(app, lambda ev: bool(_named(ev, "partitions_assigned")))
        await produce(noida.bootstrap, topic, [(1, b'{"amount": 3}'), (1, b'{"amount": -5}')])
        reader = _fairstream_run("dead_letters:dead_letters", "--group-id", groups[1], env=env)
        async with reader as dead_letters:
            with anyio.fail_after(60):
                events = await _events_until(
                    dead_letters, lambda ev: bool(_named(ev, "dead_letter_received"))
                )
    (received,) = _named(events, "dead_letter_received")
    assert {k: received[k] for k in ("error_type", "error", "source_topic", "attempts")} == {
        "error_type": "ValueError",
        "error": "negative amount -5",
        "source_topic": topic,
        "attempts": 2,
    }
    assert (received["source_partition"], received["source_offset"]) == (1, 1)


@pytest.mark.broker
async def test_migrate_group_hands_the_group_over_without_losing_a_record(
    noida: Broker, group_id: str
) -> None:
    topic = f"payments-{uuid.uuid4().hex[:10]}"
    await create_topic(noida.bootstrap, topic, 4)
    # noida needs static members (README, "The embedded brokers and their quirks").
    env = _env(
        FAIRSTREAM_BOOTSTRAP=noida.bootstrap,
        FAIRSTREAM_GROUP_ID=group_id,
        FAIRSTREAM_INSTANCE_ID="payments-pod-0",
    )
    result = await anyio.run_process(
        [sys.executable, "migrate_group.py"],
        cwd=EXAMPLES,
        env=env | {"PAYMENTS_TOPIC": topic},
        check=False,
    )
    assert result.returncode == 0, result.stderr.decode()
    out = result.stdout.decode()
    assert out.startswith("handled 400 of 400 records (old pod "), out
    assert out.endswith("protocol while shared: roundrobin, after: fairstream-lag\n"), out


@pytest.mark.broker
async def test_cooperative_members_keep_their_partitions_when_a_third_joins(
    own_noida: Broker, group_id: str
) -> None:
    """examples/cooperative.py as its docstring runs it: a, b, then c joins.

    On a noida of its own: the three static members stay in the group after
    SIGTERM (noida never evicts them), so the suite's shared noida is not left
    with them. b starts once a holds partitions: a JoinGroup that reaches noida
    as it closes a new group's first round (its 300 ms initial delay) leaves the
    member already waiting in that round unanswered for a whole rebalance timeout
    (10 s), after which the group can stall for good; two processes started
    together on a loaded machine land there now and then (a join 0.30-0.32 s
    after the other's stalled 5 runs in 12).
    """
    noida = own_noida
    topic = f"orders-{uuid.uuid4().hex[:10]}"
    await create_topic(noida.bootstrap, topic, 8)
    logs: dict[str, list[Event]] = {"a": [], "b": [], "c": []}

    async def collect(process: anyio.abc.Process, events: list[Event]) -> None:
        assert process.stderr is not None
        buffered = b""
        async for chunk in process.stderr:
            buffered += chunk
            *lines, buffered = buffered.split(b"\n")
            events.extend(json.loads(line) for line in lines if line.strip())

    def assignments(name: str) -> list[Event]:
        return _named(logs[name], "cooperative_assignment")

    def held(name: str) -> set[tuple[str, int]]:
        owned: set[tuple[str, int]] = set()
        for event in assignments(name):
            owned = (owned - {tuple(tp) for tp in event["revoked"]}) | {
                tuple(tp) for tp in event["added"]
            }
        return owned

    async def until(check: Callable[[], bool]) -> None:
        with anyio.move_on_after(60) as waited:
            while not check():  # noqa: ASYNC110 - a condition over the members' logs
                await anyio.sleep(0.1)
        if waited.cancelled_caught:
            rounds = {
                name: [
                    {k: e[k] for k in ("event", "generation", "kept", "revoked", "added") if k in e}
                    for e in events
                    if e["event"].startswith(("cooperative_", "partitions_", "group_"))
                ]
                for name, events in logs.items()
            }
            pytest.fail(f"not seen in 60 s; the members' rounds: {rounds}")

    def member(name: str) -> Any:
        return _fairstream_run(
            "cooperative:app",
            env=_env(
                FAIRSTREAM_BOOTSTRAP=noida.bootstrap,
                FAIRSTREAM_GROUP_ID=group_id,
                FAIRSTREAM_INSTANCE_ID=name,
                ORDERS_TOPIC=topic,
            ),
        )

    async with anyio.create_task_group() as tasks:
        async with member("a") as a:
            tasks.start_soon(collect, a, logs["a"])
            await until(lambda: bool(held("a")))
            async with member("b") as b:
                tasks.start_soon(collect, b, logs["b"])
                # Both hold partitions, all 8 between them, and no hand-over is pending.
                await until(
                    lambda: (
                        all(held(n) for n in "ab")
                        and len(held("a") | held("b")) == 8
                        and all(assignments(n)[-1]["revoked"] == [] for n in "ab")
                    )
                )
                before = {n: len(assignments(n)) for n in "ab"}
                async with member("c") as c:
                    tasks.start_soon(collect, c, logs["c"])
                    await until(lambda: any(e["added"] for e in assignments("c")))
                rounds = [e for n in "ab" for e in assignments(n)[before[n] :]]
        tasks.cancel_scope.cancel()
    # a and b kept what the plan left them through both rounds and gave up only what
    # went to c: nothing was revoked and handed straight back.
    assert rounds and all(e["kept"] > 0 for e in rounds), rounds
    given_up = {tuple(tp) for e in rounds for tp in e["revoked"]}
    taken = {tuple(tp) for e in assignments("c") for tp in e["added"]}
    assert given_up and given_up <= taken, (given_up, taken)
    assert not _named(logs["a"] + logs["b"], "partitions_lost")
