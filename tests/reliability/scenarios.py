"""The reliability scenarios, sized by their arguments.

The quick suite in ``tests/reliability/`` runs each with a few thousand records
and asserts on the outcome; ``benchmarks/soak.py`` runs the same code with
hundreds of thousands and prints the table. Every scenario counts records end to
end with :mod:`tests.reliability.checker` and returns what the assertions need.

``static`` means "give every member an instance id" (static membership): noida
never evicts a member, so a member that died or rejoined under a new id would
keep its partitions forever. aiokafka sends no LeaveGroup for a static member,
so on noida a member that leaves holds its partitions until it comes back: the
storm below therefore restarts members from a fixed pool of instance ids.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
from aiokafka import AIOKafkaProducer, TopicPartition

from fairstream import (
    App,
    ConsumerConfig,
    FairstreamError,
    ParallelRebalance,
    Record,
    RetryPolicy,
    SchedulerConfig,
)
from fairstream.testing import EmbeddedBroker
from tests.reliability.checker import (
    Result,
    Sink,
    check,
    committed_window,
    encode_id,
    make_ids,
    produce_ids,
    read_sightings,
    wait_for_sightings,
)
from tests.support.backends import QUICK_JOIN
from tests.support.kafka_helpers import committed, create_topic, read_all
from tests.support.live_traffic import wait_until

__all__ = [
    "BrokerRestart",
    "HandlerFailures",
    "KillRestart",
    "Member",
    "Poison",
    "Storm",
    "broker_restart",
    "handler_failures",
    "kill_and_restart",
    "member_app",
    "poison_records",
    "rebalance_storm",
    "spawn_sink",
    "start_noida",
    "stop_sink",
]

REPO = Path(__file__).parents[2]


def _topic(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def _group(prefix: str) -> str:
    return f"g-{prefix}-{uuid.uuid4().hex[:8]}"


# --- 1. a consumer process SIGKILLed mid-batch, then restarted ------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class KillRestart:
    """``window``: ids the killed process handled but had not committed."""

    result: Result
    window: frozenset[str]
    committed_at_kill: dict[int, int | None]
    first_seen: int
    exit_code: int
    stderr: str


def spawn_sink(env: dict[str, str], stderr: Path, *options: str) -> subprocess.Popen[bytes]:
    """``fairstream run`` of :mod:`tests.reliability.sink_app`, with ``options`` added."""
    with open(stderr, "ab") as err:
        return subprocess.Popen(
            [
                *(sys.executable, "-m", "fairstream", "--log-level", "WARNING", "run"),
                *("tests.reliability.sink_app:build", "--log-format", "json", *options),
            ],
            cwd=REPO,
            env={**os.environ, **env},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=err,
        )


async def stop_sink(
    process: subprocess.Popen[bytes], sig: signal.Signals, wait_limit: float
) -> int:
    """Send ``sig`` to a process we started and wait for it; kill it if it hangs."""
    process.send_signal(sig)
    try:
        with anyio.fail_after(wait_limit):
            return await anyio.to_thread.run_sync(process.wait)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)


async def kill_and_restart(
    bootstrap: str,
    *,
    static: bool,
    records: int,
    partitions: int,
    workdir: Path,
    session_timeout_ms: int = 6_000,
    kill_after: float = 0.3,
    delay: float = 0.001,
    parallel_rebalance: bool = False,
    manual_flush: int = 0,
    wait_limit: float = 120,
) -> KillRestart:
    """Run ``fairstream run`` as a process, SIGKILL it once ``kill_after`` of the
    records were handled, start it again and let it finish.

    With ``static`` the second process reuses the instance id and takes the
    partitions back at once; without, it joins as a new member and gets them when
    the broker evicts the dead one after ``session_timeout_ms``.
    """
    topic = _topic("kill")
    group = _group("kill")
    await create_topic(bootstrap, topic, partitions)
    ids = make_ids("kill", records)
    await produce_ids(bootstrap, topic, ids, partitions)
    sink_path = workdir / f"{topic}.sink"
    stderr = workdir / f"{topic}.stderr"
    env = {
        "FAIRSTREAM_BOOTSTRAP": bootstrap,
        "SINK_GROUP_ID": group,
        "SINK_TOPIC": topic,
        "SINK_PATH": str(sink_path),
        "SINK_SESSION_TIMEOUT_MS": str(session_timeout_ms),
        # Commits trail the handler by up to a second: the uncommitted window that
        # a kill leaves behind is what the restarted member must handle again.
        "SINK_COMMIT_INTERVAL": "1.0",
        "SINK_DELAY": str(delay),
        "SINK_PARALLEL_REBALANCE": "1" if parallel_rebalance else "0",
        "SINK_MANUAL_FLUSH": str(manual_flush),
    }
    if static:
        env["FAIRSTREAM_INSTANCE_ID"] = "sink-0"
    started = time.monotonic()
    first = spawn_sink({**env, "SINK_TAG": "first"}, stderr)
    try:
        await wait_for_sightings(sink_path, int(records * kill_after), wait_limit)
    finally:
        await stop_sink(first, signal.SIGKILL, 10)
    first_seen = len(read_sightings(sink_path))
    at_kill = await committed(bootstrap, group, topic, partitions)
    committed_at_kill = dict(enumerate(at_kill))
    second = spawn_sink({**env, "SINK_TAG": "second"}, stderr)
    try:
        await wait_for_sightings(sink_path, records, wait_limit)
    finally:
        exit_code = await stop_sink(second, signal.SIGTERM, 30)
    seconds = time.monotonic() - started
    sightings = read_sightings(sink_path)
    label = "kill -9 + restart" + (", parallel rebalance" if parallel_rebalance else "")
    label += f", manual acks per {manual_flush}" if manual_flush else ""
    result = check(label, ids, [s.id for s in sightings], seconds=seconds)
    return KillRestart(
        result=result,
        window=committed_window(sightings, "first", committed_at_kill),
        committed_at_kill=committed_at_kill,
        first_seen=first_seen,
        exit_code=exit_code,
        stderr=stderr.read_text(errors="replace"),
    )


# --- in-process members ---------------------------------------------------------------


def member_app(
    bootstrap: str,
    group: str,
    topic: str,
    sink: Sink,
    *,
    name: str,
    static: bool,
    session_timeout_ms: int,
    delay: float = 0.0,
    parallel_rebalance: bool = False,
    assignor: str = "fair",
    cooperative: bool = False,
    leaves: bool = False,
) -> App:
    """An in-process member of ``group`` writing each record to ``sink``, tagged ``name``.

    ``cooperative`` needs ``assignor="sticky"`` or ``"lag"`` (the App refuses others);
    ``leaves``: a static member leaves its group when it stops (``leave_group_on_stop``)."""
    app = App(
        bootstrap=bootstrap,
        group_id=group,
        instance_id=name if static else None,
        assignor=assignor,
        cooperative=cooperative,
        parallel_rebalance=ParallelRebalance(threshold=1_000) if parallel_rebalance else False,
        consumer=ConsumerConfig(
            session_timeout_ms=session_timeout_ms,
            heartbeat_interval_ms=1_000,
            leave_group_on_stop=leaves,
        ),
        scheduler=SchedulerConfig(commit_interval=0.2, partition_quota=50, max_batch=200),
    )

    @app.subscriber(topic)
    async def handle(record: Record[dict[str, Any]]) -> None:
        sink.write(record.value["id"], record.partition, record.offset, tag=name)
        if delay:
            await anyio.sleep(delay)

    return app


class Member:
    """An app running in its own task until :meth:`leave`.

    An app that stops on its own with a :class:`FairstreamError` is kept in
    ``failure`` rather than tearing the scenario down, so the scenario can report
    it (and bring the member back, as a supervisor would).
    """

    def __init__(self, app: App) -> None:
        self.app = app
        self._leave = anyio.Event()
        self.gone = anyio.Event()
        self.failure: FairstreamError | None = None

    async def run(self, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        try:
            async with self.app:
                task_status.started()
                await self._leave.wait()
        except FairstreamError as exc:
            self.failure = exc
        finally:
            self.gone.set()

    async def leave(self, wait_limit: float = 60) -> None:
        self._leave.set()
        with anyio.fail_after(wait_limit):
            await self.gone.wait()


# --- 2. a rebalance storm while producing ---------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Storm:
    """``handled_by``: records each member handled, so a test can see the guests worked;
    ``crashes``: members that stopped on their own, with the error (brought back up)."""

    result: Result
    handled_by: Counter[str]
    events: int
    crashes: list[str]


async def rebalance_storm(
    bootstrap: str,
    *,
    static: bool,
    records: int,
    partitions: int,
    events: int,
    seconds: float,
    workdir: Path,
    pool: int = 3,
    session_timeout_ms: int = 6_000,
    parallel_rebalance: bool = False,
    assignor: str = "fair",
    cooperative: bool = False,
    leaves: bool = False,
    wait_limit: float = 180,
) -> Storm:
    """One member stays; ``events`` joins and leaves of ``pool`` others over
    ``seconds`` while the producer spreads ``records`` over the same time.

    ``assignor``, ``cooperative`` and ``leaves`` are every member's (:func:`member_app`),
    so the same storm compares the eager and the cooperative protocol under one
    strategy, and static members that leave their group on stop with ones that stay.

    Each event toggles the next pool member: a member that is up leaves, one
    that is down (re)joins under its own name. At the end every pool member is
    brought up again (counted as events), so on noida no static member is left
    holding partitions it will never read.

    The last quarter of the records is produced only once every member owns a
    partition: on a loaded machine a join can take longer than the storm, and a
    backlog spread over the storm alone could all be handled by the anchor, which
    would prove nothing about partitions moving (``handled_by``).
    """
    topic = _topic("storm")
    group = _group("storm")
    await create_topic(bootstrap, topic, partitions)
    ids = make_ids("storm", records)
    sink = Sink(workdir / f"{topic}.sink", "storm")
    started = time.monotonic()

    def app(name: str) -> App:
        return member_app(
            bootstrap,
            group,
            topic,
            sink,
            name=name,
            static=static,
            session_timeout_ms=session_timeout_ms,
            delay=0.0005,
            parallel_rebalance=parallel_rebalance,
            assignor=assignor,
            cooperative=cooperative,
            leaves=leaves,
        )

    done_events = 0
    crashes: list[str] = []

    def crashed(name: str, member: Member) -> bool:
        if member.failure is None:
            return False
        crashes.append(f"{name}: {type(member.failure).__name__}: {member.failure}")
        return True

    async with anyio.create_task_group() as tasks:
        anchor = Member(app("anchor"))
        await tasks.start(anchor.run)
        # The producer spreads three quarters of the records over the storm.
        during, last_wave = ids[: records - records // 4], ids[records - records // 4 :]
        rate = len(during) / seconds
        tasks.start_soon(
            partial(produce_ids, bootstrap, topic, during, partitions, per_second=rate)
        )
        up: dict[str, Member] = {}
        names = [f"guest-{i}" for i in range(pool)]
        tick = seconds / max(1, events)
        for event in range(events):
            name = names[event % pool]
            if name in up and not crashed(name, up[name]):
                await up.pop(name).leave()
            else:
                up[name] = Member(app(name))
                await tasks.start(up[name].run)
            done_events += 1
            await anyio.sleep(tick)  # load shape: the pace of the storm, not a wait
        for name in names:
            if name not in up or crashed(name, up[name]):
                up[name] = Member(app(name))
                await tasks.start(up[name].run)
                done_events += 1
        if crashed("anchor", anchor):
            anchor = Member(app("anchor"))
            await tasks.start(anchor.run)
        members = [anchor, *up.values()]
        await wait_until(
            lambda: all(m.app.stats().partitions for m in members),
            wait_limit,
            lambda: {m.app.stats().member_id: m.app.stats().state for m in members},
        )
        await produce_ids(bootstrap, topic, last_wave, partitions)
        await sink.wait_unique(records, wait_limit)
        for member in [anchor, *up.values()]:
            await member.leave()
    sink.close()
    sightings = read_sightings(sink.path)
    label = f"rebalance storm ({done_events} joins/leaves)"
    if parallel_rebalance:
        label += ", parallel rebalance"
    if assignor != "fair":
        label += f", {assignor}"
    if cooperative:
        label += ", cooperative"
    if leaves and static:
        label += ", leaving on stop"
    result = check(label, ids, [s.id for s in sightings], seconds=time.monotonic() - started)
    crashes += [f"{n}: {m.failure}" for n, m in [("anchor", anchor), *up.items()] if m.failure]
    handled_by = Counter(s.tag for s in sightings)
    return Storm(result=result, handled_by=handled_by, events=done_events, crashes=crashes)


# --- 3. the broker restarted on the same data directory -------------------------------


async def start_noida(workdir: Path) -> EmbeddedBroker:
    """A noida broker of the scenario's own, on a data directory under ``workdir``
    (noida keeps its log there, so it can be stopped and started again)."""
    data_dir = workdir / f"noida-{uuid.uuid4().hex[:8]}"
    data_dir.mkdir()
    broker = EmbeddedBroker("noida", data_dir=data_dir)
    await anyio.to_thread.run_sync(broker.start)
    return broker


@dataclass(frozen=True, slots=True, kw_only=True)
class BrokerRestart:
    result: Result
    restarts: int


async def broker_restart(
    *,
    records: int,
    partitions: int,
    restarts: int,
    workdir: Path,
    wait_limit: float = 180,
) -> BrokerRestart:
    """A dedicated noida broker (it persists to its data dir) is restarted
    ``restarts`` times while one static member consumes; half the records are
    produced before the first restart, the rest after each one."""
    started = time.monotonic()
    broker = await start_noida(workdir)
    try:
        bootstrap = broker.bootstrap
        topic = _topic("restart")
        group = _group("restart")
        await create_topic(bootstrap, topic, partitions)
        ids = make_ids("restart", records)
        half = records // 2
        chunks = [ids[half:][i::restarts] for i in range(restarts)]
        await produce_ids(bootstrap, topic, ids[:half], partitions)
        produced = half
        sink = Sink(workdir / f"{topic}.sink", "restart")
        member = Member(
            member_app(
                bootstrap,
                group,
                topic,
                sink,
                name="restart-0",
                static=True,
                session_timeout_ms=10_000,
                delay=0.0005,
            )
        )
        async with anyio.create_task_group() as tasks:
            await tasks.start(member.run)
            for chunk in chunks:
                # Restart while the member is busy: half of what exists is handled.
                await sink.wait_unique(produced // 2, wait_limit)
                await anyio.to_thread.run_sync(broker.restart)
                await produce_ids(bootstrap, topic, chunk, partitions)
                produced += len(chunk)
            await sink.wait_unique(records, wait_limit)
            await member.leave()
        sink.close()
        seen = [s.id for s in read_sightings(sink.path)]
        result = check(f"broker restart x{restarts}", ids, seen, seconds=time.monotonic() - started)
        return BrokerRestart(result=result, restarts=restarts)
    finally:
        await anyio.to_thread.run_sync(broker.stop)


# --- 4. handler exceptions at a set rate ----------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class HandlerFailures:
    """``permanent`` ids always fail; ``transient`` ids fail on their first attempt only."""

    result: Result
    permanent: frozenset[str]
    transient: frozenset[str]
    attempts: dict[str, int]
    dead: list[Any]
    committed: list[int | None]


async def handler_failures(
    bootstrap: str,
    *,
    static: bool,
    records: int,
    partitions: int,
    permanent_rate: float,
    transient_rate: float,
    seed: int,
    workdir: Path,
    wait_limit: float = 120,
) -> HandlerFailures:
    """Seeded failures: after 3 attempts a permanent failure is dead-lettered,
    a transient one succeeds on its retry; every record is handled once."""
    topic = _topic("fail")
    group = _group("fail")
    await create_topic(bootstrap, topic, partitions)
    ids = make_ids("fail", records)
    rng = random.Random(seed)
    draws = {record_id: rng.random() for record_id in ids}
    permanent = frozenset(i for i, x in draws.items() if x < permanent_rate)
    transient = frozenset(
        i for i, x in draws.items() if permanent_rate <= x < permanent_rate + transient_rate
    )
    await produce_ids(bootstrap, topic, ids, partitions)
    sink = Sink(workdir / f"{topic}.sink", "fail")
    attempts: dict[str, int] = {}
    app = App(
        bootstrap=bootstrap,
        group_id=group,
        instance_id="fail-0" if static else None,
        consumer=QUICK_JOIN,
        retry=RetryPolicy(attempts=3, backoff=0.001),
        scheduler=SchedulerConfig(commit_interval=0.2),
    )

    @app.subscriber(topic)
    async def handle(record: Record[dict[str, Any]]) -> None:
        record_id = record.value["id"]
        attempts[record_id] = attempts.get(record_id, 0) + 1
        if record_id in permanent:
            raise RuntimeError(f"permanent failure for {record_id}")
        if record_id in transient and attempts[record_id] == 1:
            raise ConnectionError(f"transient failure for {record_id}")
        sink.write_record(record)

    started = time.monotonic()
    async with app:
        await sink.wait_unique(records - len(permanent), wait_limit)
    with anyio.fail_after(wait_limit):
        dead = await read_all(bootstrap, f"{topic}.dlq", partitions, expected=len(permanent))
    seconds = time.monotonic() - started
    sink.close()
    seen = [s.id for s in read_sightings(sink.path)]
    dead_ids = [json.loads(d.value)["id"] for d in dead]
    result = check(
        f"handler errors {permanent_rate:.0%}+{transient_rate:.0%}",
        ids,
        seen,
        also_handled=dead_ids,
        seconds=seconds,
    )
    return HandlerFailures(
        result=result,
        permanent=permanent,
        transient=transient,
        attempts=attempts,
        dead=dead,
        committed=await committed(bootstrap, group, topic, partitions),
    )


# --- 5. poison records ----------------------------------------------------------------

POISON_KINDS = ("invalid_utf8", "invalid_json", "large_invalid", "empty", "large_valid")


def _poison_value(kind: str, record_id: str, large: int) -> tuple[bytes, bytes]:
    """``(key, value)`` of a poison record; ``large_valid`` is big but decodes."""
    key = record_id.encode()
    if kind == "invalid_utf8":
        return key, b"\xc3\x28" + key  # 0xC3 must be followed by a continuation byte
    if kind == "invalid_json":
        return key, b'{"id": ' + key
    if kind == "large_invalid":
        return key, b"[" + b"x" * (large - 1)
    if kind == "empty":
        return b"", b""
    padding = "p" * (large - 64)
    return key, f'{{"id": "{record_id}", "padding": "{padding}"}}'.encode()


@dataclass(frozen=True, slots=True, kw_only=True)
class Poison:
    """``poison`` maps each poison id to its kind; ``dead`` are the DLQ records."""

    result: Result
    poison: dict[str, str]
    dead: list[Any]
    source: dict[tuple[int, int], str]
    committed: list[int | None]
    ends: list[int]


async def poison_records(
    bootstrap: str,
    *,
    static: bool,
    records: int,
    partitions: int,
    every: int,
    large: int,
    workdir: Path,
    wait_limit: float = 120,
) -> Poison:
    """Every ``every``-th record is poison, cycling through :data:`POISON_KINDS`;
    the rest are good. Poison must be dead-lettered (except ``large_valid``, which
    the handler gets) and the good records behind it must keep flowing."""
    topic = _topic("poison")
    group = _group("poison")
    await create_topic(bootstrap, topic, partitions)
    ids = make_ids("poison", records)
    poison: dict[str, str] = {}
    source: dict[tuple[int, int], str] = {}
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, linger_ms=5, acks="all", max_request_size=large + 65_536
    )
    await producer.start()
    try:
        futures = []
        for i, record_id in enumerate(ids):
            if i % every == every - 1:
                kind = POISON_KINDS[(i // every) % len(POISON_KINDS)]
                poison[record_id] = kind
                key, value = _poison_value(kind, record_id, large)
            else:
                key, value = record_id.encode(), encode_id(record_id)
            futures.append(
                (record_id, await producer.send(topic, value, key=key, partition=i % partitions))
            )
        await producer.flush()
        for record_id, future in futures:
            meta = await future
            source[(meta.partition, meta.offset)] = record_id
    finally:
        await producer.stop()
    dead_wanted = sum(1 for kind in poison.values() if kind != "large_valid")
    sink = Sink(workdir / f"{topic}.sink", "poison")
    app = App(
        bootstrap=bootstrap,
        group_id=group,
        instance_id="poison-0" if static else None,
        consumer=QUICK_JOIN,
        scheduler=SchedulerConfig(commit_interval=0.2),
    )

    @app.subscriber(topic)
    async def handle(record: Record[dict[str, Any]]) -> None:
        sink.write_record(record)

    started = time.monotonic()
    async with app:
        await sink.wait_unique(records - dead_wanted, wait_limit)
    with anyio.fail_after(wait_limit):
        dead = await read_all(bootstrap, f"{topic}.dlq", partitions, expected=dead_wanted)
    seconds = time.monotonic() - started
    sink.close()
    seen = [s.id for s in read_sightings(sink.path)]
    dead_ids = [
        source[
            (
                int(dict(d.headers)["fairstream.source.partition"]),
                int(dict(d.headers)["fairstream.source.offset"]),
            )
        ]
        for d in dead
    ]
    result = check(f"poison 1/{every}", ids, seen, also_handled=dead_ids, seconds=seconds)
    return Poison(
        result=result,
        poison=poison,
        dead=dead,
        source=source,
        committed=await committed(bootstrap, group, topic, partitions),
        ends=await _end_offsets(bootstrap, topic, partitions),
    )


async def _end_offsets(bootstrap: str, topic: str, partitions: int) -> list[int]:
    """Each partition's next offset, from the fetch high watermark (tansu's
    ListOffsets(latest) is wrong)."""
    from aiokafka import AIOKafkaConsumer

    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="latest")
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        for tp in tps:
            consumer.seek(tp, 0)
        ends: dict[int, int] = {}
        with anyio.fail_after(60):
            while len(ends) < partitions:
                await consumer.getmany(timeout_ms=200, max_records=1)
                for tp in tps:
                    high = consumer.highwater(tp)
                    if high is not None:
                        ends[tp.partition] = high
        return [ends[p] for p in range(partitions)]
    finally:
        await consumer.stop()
