"""Counting every record end to end: what was produced against what a handler saw.

The producer writes ``N`` records whose values carry unique ids; the handler under
test appends one line per record it handled to a :class:`Sink` file; the checker
compares the two and reports every id that was lost or seen more than once.

The sink is a plain append-only file written with one ``os.write`` per line, so
a line reaches the kernel before the handler returns: when a consumer process is
SIGKILLed, everything it handled is still in the file (no user-space buffer to
lose), and a restarted process appends to the same file.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections import Counter, deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError

from fairstream import SecurityConfig

__all__ = [
    "Result",
    "Sighting",
    "Sink",
    "check",
    "committed_window",
    "encode_id",
    "make_ids",
    "produce_ids",
    "read_sightings",
    "summary",
    "wait_for_sightings",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class Result:
    """One scenario's count: ``lost`` ids never handled, ``duplicated`` extra handlings."""

    scenario: str
    records: int
    lost: int
    duplicated: int
    seconds: float
    lost_ids: frozenset[str] = field(default=frozenset(), repr=False)
    duplicated_ids: frozenset[str] = field(default=frozenset(), repr=False)

    def row(self) -> tuple[str, str, str, str, str]:
        return (
            self.scenario,
            f"{self.records:,}",
            f"{self.lost:,}",
            f"{self.duplicated:,}",
            f"{self.seconds:.1f}",
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class Sighting:
    """One line of a sink: a handler saw record ``id`` at ``partition``/``offset``."""

    id: str
    partition: int
    offset: int
    tag: str


def make_ids(scenario: str, count: int) -> list[str]:
    """``count`` ids unique to a scenario run."""
    return [f"{scenario}-{i:07d}" for i in range(count)]


def encode_id(record_id: str) -> bytes:
    return json.dumps({"id": record_id}).encode()


async def produce_ids(
    bootstrap: str,
    topic: str,
    ids: Sequence[str],
    partitions: int,
    *,
    per_second: float | None = None,
    security: SecurityConfig | None = None,
    resend_limit: float = 120.0,
) -> None:
    """Send each id to partition ``i % partitions``; all acknowledged on return.

    ``per_second`` spreads the sends over time (load shape, for scenarios that
    change the group or the broker while records keep arriving). A send the broker
    did not acknowledge (its batch failed while the broker restarted) is sent again
    until it is, for up to ``resend_limit`` seconds: ``flush()`` alone does not say
    which sends failed, and a record that never reached the broker would count as
    lost by the consumer under test (and make the scenario wait for it forever).
    """
    settings = (security or SecurityConfig()).aiokafka_kwargs()
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, acks="all", **settings)
    await producer.start()
    unconfirmed: deque[tuple[int, asyncio.Future[Any]]] = deque()
    failed: list[int] = []

    def settle() -> None:
        while unconfirmed and unconfirmed[0][1].done():
            i, sent = unconfirmed.popleft()
            if sent.cancelled() or sent.exception() is not None:
                failed.append(i)

    try:
        started = time.monotonic()
        for i, record_id in enumerate(ids):
            try:
                sent = await producer.send(topic, encode_id(record_id), partition=i % partitions)
            except KafkaError:
                failed.append(i)
            else:
                unconfirmed.append((i, sent))
            if i % 50 == 49:
                settle()
                if per_second is not None:
                    ahead = (i + 1) / per_second - (time.monotonic() - started)
                    if ahead > 0:
                        await anyio.sleep(ahead)
        await producer.flush()
        settle()
        with anyio.fail_after(resend_limit):
            for i in failed:
                while True:
                    try:
                        await producer.send_and_wait(
                            topic, encode_id(ids[i]), partition=i % partitions
                        )
                        break
                    except KafkaError:
                        await anyio.sleep(0.5)
    finally:
        await producer.stop()


class Sink:
    """Append-only file of sightings, safe against the writer being SIGKILLed."""

    def __init__(self, path: Path | str, tag: str) -> None:
        self.path = Path(path)
        self.tag = tag
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self.unique: set[str] = set()
        self._changed = anyio.Event()

    def write(self, record_id: str, partition: int, offset: int, tag: str | None = None) -> None:
        line = f"{record_id}\t{partition}\t{offset}\t{tag or self.tag}\n"
        os.write(self._fd, line.encode())
        self.unique.add(record_id)
        self._changed.set()

    def write_record(self, record: Any) -> None:
        """Write a fairstream ``Record[dict]`` whose value is ``{"id": ...}``."""
        self.write(record.value["id"], record.partition, record.offset)

    async def wait_unique(self, count: int, wait_limit: float) -> None:
        """Until this process's handlers saw ``count`` distinct ids, or ``TimeoutError``."""
        with anyio.fail_after(wait_limit):
            while len(self.unique) < count:
                self._changed = anyio.Event()
                await self._changed.wait()

    def close(self) -> None:
        os.close(self._fd)


def read_sightings(path: Path | str) -> list[Sighting]:
    """Every complete line of a sink file (a line cut by SIGKILL has no newline)."""
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        return []
    sightings = []
    for line in text.splitlines(keepends=True):
        if not line.endswith("\n"):
            continue
        record_id, partition, offset, tag = line.rstrip("\n").split("\t")
        sightings.append(
            Sighting(id=record_id, partition=int(partition), offset=int(offset), tag=tag)
        )
    return sightings


async def wait_for_sightings(path: Path | str, unique: int, wait_limit: float) -> list[Sighting]:
    """Poll a sink file written by another process until it holds ``unique`` ids."""
    # Another process writes the file, so there is no event to wait on: poll it,
    # within a deadline.
    with anyio.fail_after(wait_limit):
        while await anyio.to_thread.run_sync(_count_unique, path) < unique:  # noqa: ASYNC110
            await anyio.sleep(0.1)
    return read_sightings(path)


def _count_unique(path: Path | str) -> int:
    try:
        with open(path, "rb") as sink:
            return len({line.split(b"\t", 1)[0] for line in sink if line.endswith(b"\n")})
    except FileNotFoundError:
        return 0


def check(
    scenario: str,
    expected: Iterable[str],
    seen: Iterable[str],
    *,
    seconds: float,
    also_handled: Iterable[str] = (),
) -> Result:
    """Compare produced ids with handled ones.

    ``also_handled`` are ids handled another way, e.g. read back from a dead-letter
    topic: a record dead-lettered is handled, and one both dead-lettered and seen
    by the handler counts as a duplicate.
    """
    wanted = list(expected)
    counts: Counter[str] = Counter(seen)
    counts.update(also_handled)
    unknown = set(counts) - set(wanted)
    if unknown:
        raise AssertionError(f"{len(unknown)} ids were never produced, e.g. {sorted(unknown)[:3]}")
    lost = frozenset(i for i in wanted if counts[i] == 0)
    duplicated = {i: n - 1 for i, n in counts.items() if n > 1}
    return Result(
        scenario=scenario,
        records=len(wanted),
        lost=len(lost),
        duplicated=sum(duplicated.values()),
        seconds=seconds,
        lost_ids=lost,
        duplicated_ids=frozenset(duplicated),
    )


def summary(result: Result) -> str:
    """A line for assertion messages: the counts and a few of the ids concerned."""
    return (
        f"{result.scenario}: {result.records} records, {result.lost} lost "
        f"(e.g. {sorted(result.lost_ids)[:5]}), {result.duplicated} duplicated "
        f"(e.g. {sorted(result.duplicated_ids)[:5]})"
    )


def committed_window(
    sightings: Iterable[Sighting], tag: str, committed: Mapping[int, int | None]
) -> frozenset[str]:
    """Ids that writer ``tag`` handled at or after its partition's committed offset.

    These are the records a restarted member must see again (at-least-once); no
    other record may be duplicated.
    """
    return frozenset(
        s.id for s in sightings if s.tag == tag and s.offset >= (committed.get(s.partition) or 0)
    )
