"""Exactly-once consume-transform-produce on noida, with real processes (issue 41).

:mod:`tests.reliability.eos_app` publishes one output per input. Under
at-least-once each SIGKILL repeats the records handled since the last commit, and
so their outputs; under exactly-once those outputs were in a transaction the
restarted member's InitProducerId aborted, and a ``read_committed`` reader sees
every input's output once.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from collections import Counter
from pathlib import Path

import anyio
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from fairstream.runtime._kafka._static_leave import _StaticLeave
from fairstream.testing import free_port
from tests.conftest import Broker
from tests.reliability.outage import ready_status
from tests.reliability.scenarios import REPO, stop_sink
from tests.support.kafka_helpers import input_output_topics, produce, produce_keyed, read_committed

pytestmark = pytest.mark.broker

PARTITIONS, RECORDS = 4, 2_500
"""At 5 ms a record and one record in hand per partition a run takes about 3 s, so
the kills at a quarter and at half of the records land mid-stream (they are placed
by the committed count, however slow the machine), and the zombie's partitions
still have 2,000 records to move on after it froze. More records only lengthened
the runs between the kills."""
IDS = [f"id-{n}".encode() for n in range(RECORDS)]
KEYED_RECORDS, KEYS = 10_000, 256
"""(b): 64 records in hand at once, 5 ms each, spread over 256 keys: at ~10,000
records a second each kill (placed by the committed count, at 2,500 and 5,000) lands
in a full stream, with dozens of records in a handler and hundreds finished out of
order above the committed offsets (the offset map's share of the barrier), and
5,000 still to come; 20,000 records proved no more for twice the CPU."""
KEYED_IDS = [f"key-{n}".encode() for n in range(KEYED_RECORDS)]


def _spawn(
    env: dict[str, str], name: str, log: Path, *, port: int | None = None
) -> subprocess.Popen[bytes]:
    """The eos app as a process; with ``port`` its status endpoints listen there."""
    status = () if port is None else ("--http-port", str(port), "--http-host", "127.0.0.1")
    with open(log, "ab") as err:
        return subprocess.Popen(
            [
                *(sys.executable, "-m", "fairstream", "--log-level", "WARNING", "run"),
                *("tests.reliability.eos_app:build", "--log-format", "json", *status),
            ],
            cwd=REPO,
            env={**os.environ, **env, "FAIRSTREAM_INSTANCE_ID": name},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=err,
        )


async def _spawn_ready(env: dict[str, str], name: str, log: Path) -> subprocess.Popen[bytes]:
    """The eos app as a process, once it has joined (its ``/ready`` answers 200): a
    SIGTERM before its handler is in place kills a static member that then never
    leaves its group, and noida never evicts it."""
    port = free_port()
    process = _spawn(env, name, log, port=port)
    with anyio.fail_after(60):
        while await ready_status(port) != 200:  # noqa: ASYNC110 - another process's state
            await anyio.sleep(0.1)
    return process


class _Group:
    """Reads a group's committed offsets and a topic's end, through one consumer."""

    def __init__(self, bootstrap: str, group_id: str, topic: str) -> None:
        self._consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group_id)
        self._tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]

    async def start(self) -> None:
        await self._consumer.start()

    async def committed(self) -> int:
        total = 0
        for tp in self._tps:
            total += await self._consumer.committed(tp) or 0
        return total

    async def wait_committed(self, at_least: int, limit: float = 60) -> int:
        with anyio.fail_after(limit):
            while (done := await self.committed()) < at_least:  # noqa: ASYNC110 - the broker's commits: no event
                await anyio.sleep(0.05)
        return done

    async def aclose(self) -> None:
        await self._consumer.stop()


async def _inputs(
    bootstrap: str, ids: list[bytes] = IDS, *, keys: int = 0
) -> tuple[dict[str, str], _Group]:
    """``ids`` as inputs on a new topic (over ``keys`` keys, or none); the app's
    environment and its group's reader."""
    source, sink = await input_output_topics(bootstrap, "eos", PARTITIONS)
    if keys:
        await produce_keyed(
            bootstrap,
            source,
            ((n % PARTITIONS, b"k%d" % (n % keys), value) for n, value in enumerate(ids)),
        )
    else:
        await produce(bootstrap, source, ((n % PARTITIONS, value) for n, value in enumerate(ids)))
    group_id = f"eos-{uuid.uuid4().hex[:8]}"
    env = {
        "FAIRSTREAM_BOOTSTRAP": bootstrap,
        "EOS_GROUP_ID": group_id,
        "EOS_INPUT": source,
        "EOS_OUTPUT": sink,
        "EOS_DELAY": "0.005",
    }
    return env, _Group(bootstrap, group_id, source)


async def _assert_one_output_each(
    bootstrap: str, sink: str, log: str = "", ids: list[bytes] = IDS
) -> None:
    outputs = Counter(await read_committed(bootstrap, sink, PARTITIONS))
    assert set(outputs) == set(ids), log[-2000:]
    duplicated = {value: n for value, n in outputs.items() if n > 1}
    assert not duplicated, f"{len(duplicated)} inputs with more than one output"


async def _kill_twice_then_finish(
    env: dict[str, str], group: _Group, records: int, log: Path
) -> None:
    """SIGKILL the app at a quarter and at half of ``records`` committed, restarting it
    each time; the last run ends them and stops with SIGTERM."""
    await group.start()
    try:
        for kill_at in (records // 4, records // 2):
            app = _spawn(env, "eos-0", log)
            at_kill = await group.wait_committed(kill_at)
            await stop_sink(app, signal.SIGKILL, 10)
            assert at_kill < records, "the kill came after the last record"
        app = _spawn(env, "eos-0", log)
        await group.wait_committed(records)
        assert await stop_sink(app, signal.SIGTERM, 30) == 0
        assert await group.committed() == records  # the group ends at the log end
    finally:
        await group.aclose()


async def test_sigkill_twice_every_input_has_one_output(own_noida: Broker, tmp_path: Path) -> None:
    """(a) ordering="partition"."""
    bootstrap = own_noida.bootstrap
    env, group = await _inputs(bootstrap)
    await _kill_twice_then_finish(env, group, RECORDS, tmp_path / "app.log")
    log = (tmp_path / "app.log").read_text(errors="replace")
    await _assert_one_output_each(bootstrap, env["EOS_OUTPUT"], log)


async def test_sigkill_under_key_ordering_at_concurrency_64(
    own_noida: Broker, tmp_path: Path
) -> None:
    """(b) ordering="key", 64 records in hand: the barrier commits each partition's
    outputs only with the offsets (and offset map) of the records that made them."""
    bootstrap = own_noida.bootstrap
    env, group = await _inputs(bootstrap, KEYED_IDS, keys=KEYS)
    env |= {"EOS_ORDERING": "key", "EOS_CONCURRENCY": "64"}
    await _kill_twice_then_finish(env, group, KEYED_RECORDS, tmp_path / "app.log")
    log = (tmp_path / "app.log").read_text(errors="replace")
    await _assert_one_output_each(bootstrap, env["EOS_OUTPUT"], log, KEYED_IDS)


async def test_sigkill_with_a_batch_handler(own_noida: Broker, tmp_path: Path) -> None:
    """Batch handlers: under exactly-once a batch holds one partition, and its outputs
    commit in that partition's transaction with the batch's offsets."""
    bootstrap = own_noida.bootstrap
    env, group = await _inputs(bootstrap)
    env |= {"EOS_BATCH": "1", "EOS_DELAY": "0.05"}
    await _kill_twice_then_finish(env, group, RECORDS, tmp_path / "app.log")
    log = (tmp_path / "app.log").read_text(errors="replace")
    await _assert_one_output_each(bootstrap, env["EOS_OUTPUT"], log)


STORM_RECORDS, STORM_CYCLES, STORM_KILL_EVERY = 4_000, 4, 2
"""(e): at 50 ms a record, 8 in hand per member, one member needs ~25 s for them. The
inputs come in one wave a cycle, so records flow through every cycle of the storm
however slowly a loaded machine starts and stops its members (a backlog produced at
once could be drained before the storm's last cycles): a wave of 1,000 outlasts a
cycle (a joiner's start, 3 s beside it, its leave). Four cycles join and leave each
of two joiners twice and kill the steady member twice, once mid-storm and once at
its end: every kind of rebalance the storm has, each more than once (six cycles
repeated the same ones and cost two more interpreters and ~15 s)."""
STORM_IDS = [f"storm-{n}".encode() for n in range(STORM_RECORDS)]


async def test_rebalance_storm_loses_and_duplicates_nothing(
    own_noida: Broker, tmp_path: Path
) -> None:
    """(e) members join and leave every few seconds, and the steady one is killed and
    restarted now and then: every input has exactly one output."""
    bootstrap = own_noida.bootstrap
    wave = STORM_RECORDS // STORM_CYCLES
    env, group = await _inputs(bootstrap, STORM_IDS[:wave], keys=KEYS)
    env |= {
        "EOS_ORDERING": "key",
        "EOS_CONCURRENCY": "8",
        "EOS_DELAY": "0.05",
        "EOS_LEAVE": "1",
    }
    log = tmp_path / "app.log"
    await group.start()
    steady = await _spawn_ready(env, "eos-0", log)
    joiner: subprocess.Popen[bytes] | None = None
    try:
        for cycle in range(1, STORM_CYCLES + 1):
            if cycle > 1:  # the next wave, keyed and spread as _inputs does
                first = (cycle - 1) * wave
                await produce_keyed(
                    bootstrap,
                    env["EOS_INPUT"],
                    (
                        (n % PARTITIONS, b"k%d" % (n % KEYS), STORM_IDS[n])
                        for n in range(first, first + wave)
                    ),
                )
            joiner = await _spawn_ready(env, f"eos-{1 + cycle % 2}", log)
            await anyio.sleep(3)  # the storm's pace, not a wait for an event
            assert await stop_sink(joiner, signal.SIGTERM, 30) == 0
            if cycle % STORM_KILL_EVERY == 0:
                await stop_sink(steady, signal.SIGKILL, 10)
                steady = await _spawn_ready(env, "eos-0", log)
        await group.wait_committed(STORM_RECORDS, limit=120)
        assert await stop_sink(steady, signal.SIGTERM, 30) == 0
        assert await group.committed() == STORM_RECORDS
    finally:
        for process in (steady, joiner):
            if process is not None and process.poll() is None:
                process.kill()
                process.wait(10)
        await group.aclose()
    text = log.read_text(errors="replace")
    await _assert_one_output_each(bootstrap, env["EOS_OUTPUT"], text, STORM_IDS)


async def test_aborted_transaction_is_never_read(noida: Broker) -> None:
    """(d) a transaction aborted after its sends: a read_committed reader skips it."""
    bootstrap = noida.bootstrap
    _, sink = await input_output_topics(bootstrap, "eos", PARTITIONS)
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=f"t-{sink}")
    await producer.start()
    try:
        await producer.begin_transaction()
        for n in range(10):
            await producer.send_and_wait(sink, b"aborted-%d" % n, partition=n % PARTITIONS)
        await producer.abort_transaction()
        await producer.begin_transaction()
        await producer.send_and_wait(sink, b"kept", partition=0)
        await producer.commit_transaction()
    finally:
        await producer.stop()
    assert await read_committed(bootstrap, sink, PARTITIONS) == [b"kept"]


async def _remove_member(bootstrap: str, group_id: str, instance_id: str) -> None:
    """Remove a static member from its group by instance id (LeaveGroup v3), as Kafka's
    ``removeMembersFromConsumerGroup`` does: noida never moves a frozen member's
    partitions by itself."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group_id)
    await consumer.start()
    try:
        coordinator = consumer._coordinator
        await coordinator.ensure_coordinator_known()
        response = await coordinator._send_req(_StaticLeave(group_id, "", instance_id))
        assert not response.error_code, response
        assert not any(code for *_, code in response.members), response
    finally:
        await consumer.stop()


async def test_zombie_member_is_fenced(own_noida: Broker, tmp_path: Path) -> None:
    """(c) a member frozen with SIGSTOP until its partitions move, then woken: the
    new owner's InitProducerId fenced its transactions, so none of its outputs is
    read twice."""
    bootstrap = own_noida.bootstrap
    env, group = await _inputs(bootstrap)
    await group.start()
    zombie = _spawn(env, "eos-a", tmp_path / "a.log")
    other = _spawn(env, "eos-b", tmp_path / "b.log")
    try:
        await group.wait_committed(RECORDS // 5)
        zombie.send_signal(signal.SIGSTOP)
        await _remove_member(bootstrap, env["EOS_GROUP_ID"], "eos-a")
        await group.wait_committed(RECORDS)  # eos-b took the zombie's partitions over
        zombie.send_signal(signal.SIGCONT)
        with anyio.move_on_after(20):  # fenced, it stops by itself; else it is stopped
            await anyio.to_thread.run_sync(zombie.wait, abandon_on_cancel=True)
        assert await stop_sink(other, signal.SIGTERM, 30) == 0
    finally:
        for process in (zombie, other):
            if process.poll() is None:
                process.send_signal(signal.SIGCONT)
                process.kill()
                process.wait(10)
        await group.aclose()
    await _assert_one_output_each(bootstrap, env["EOS_OUTPUT"])
