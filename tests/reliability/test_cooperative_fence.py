"""A cooperative member fenced while frozen loses its partitions: no commit, nothing lost.

KIP-429 (issue #23): a member that missed a generation treats its partitions as
lost: another member may read them already, so it drops them without committing.
Two dynamic ``fairstream run`` members (no instance id) read 4 partitions on tansu,
which evicts a member whose session expired (noida never does). Member A is
frozen with SIGSTOP past its session timeout; the broker fences it and B takes
A's partitions and commits past everything A could have read. Then A continues:
its heartbeat finds it fenced, and it must drop the partitions it still holds
without committing its stale watermark over B's commits.

Checked twice: the group's committed offsets never go back below what B committed
(what the broker kept), and A, logging aiokafka's requests at DEBUG, sends no
offset-commit request for a lost partition after it logged the loss (what the
member tried: tansu, like Kafka, refuses a fenced member's commit by itself, so a
member that wrongly revokes instead of losing shows only there).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from aiokafka import TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from tests.conftest import Broker
from tests.reliability.checker import (
    check,
    make_ids,
    produce_ids,
    read_sightings,
    wait_for_sightings,
)
from tests.reliability.scenarios import REPO, stop_sink
from tests.support.kafka_helpers import create_topic

pytestmark = pytest.mark.broker

PARTITIONS = 4
BEFORE, DURING, AFTER = 400, 600, 200
"""Records sent before A is frozen, while it is, and after it continued."""
MAX_BATCH = 20
SESSION_TIMEOUT_MS = 6_000
"""The shortest session Kafka allows by default; tansu evicts A after it."""


def _spawn(
    env: dict[str, str], name: str, workdir: Path, level: str = "INFO", **more: str
) -> subprocess.Popen[bytes]:
    """``fairstream run`` of the sink app as dynamic member ``name``, logging JSON."""
    with open(workdir / f"{name}.log", "ab") as err:
        return subprocess.Popen(
            [
                *(sys.executable, "-m", "fairstream", "--log-level", level, "run"),
                *("tests.reliability.sink_app:build", "--log-format", "json"),
            ],
            cwd=REPO,
            env={**env, **more, "SINK_TAG": name},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=err,
        )


def _events(log: Path) -> list[dict[str, Any]]:
    """The member's rebalance events (its rounds and its losses), in order."""
    if not log.exists():
        return []
    lines = log.read_text(errors="replace").splitlines()
    wanted = ('"cooperative_assignment"', '"partitions_lost"')
    return [json.loads(line) for line in lines if any(w in line for w in wanted)]


def _owned(log: Path) -> set[int]:
    """The partitions the member holds by its log: added, less revoked, none after a loss."""
    owned: set[int] = set()
    for event in _events(log):
        if event["event"] == "partitions_lost":
            owned.clear()
        else:
            owned |= {p for _, p in event["added"]}
            owned -= {p for _, p in event["revoked"]}
    return owned


def _lost(log: Path) -> list[dict[str, Any]]:
    """The hook's ``partitions_lost`` events (the ones that say why)."""
    return [e for e in _events(log) if e["event"] == "partitions_lost" and "reason" in e]


_COMMIT_SENT = re.compile(r"Sending offset-commit request with (\{.*\}) for group")
_COMMITTED = re.compile(r"partition=(\d+)\): OffsetAndMetadata\(offset=(\d+)")


def _commits_sent(log: Path) -> list[tuple[str, dict[int, int]]]:
    """In order: the hook's losses and rounds (by event name), and each offset-commit request.

    aiokafka logs each request it sends at DEBUG, whatever the broker answers: what
    the member tried to commit, not only what the broker let through.
    """
    out: list[tuple[str, dict[int, int]]] = []
    for line in log.read_text(errors="replace").splitlines():
        if sent := _COMMIT_SENT.search(line):
            offsets = {int(p): int(o) for p, o in _COMMITTED.findall(sent.group(1))}
            out.append(("commit", offsets))
        elif '"partitions_lost"' in line and '"reason"' in line:
            out.append(("lost", {p: 0 for _, p in json.loads(line)["partitions"]}))
        elif '"cooperative_assignment"' in line:
            out.append(("assigned", {p: 0 for _, p in json.loads(line)["added"]}))
    return out


def _stale_commits(log: Path, stolen: set[int]) -> list[dict[int, int]]:
    """Commits A sent for ``stolen`` after it knew it lost them, before it got them back."""
    stale, lost = [], set()
    for kind, partitions in _commits_sent(log):
        if kind == "lost":
            lost |= stolen & partitions.keys()
        elif kind == "assigned":
            lost -= partitions.keys()
        elif lost & partitions.keys():
            stale.append(partitions)
    return stale


@asynccontextmanager
async def _offsets_reader(
    bootstrap: str, group: str, topic: str
) -> AsyncIterator[Callable[[], Awaitable[dict[int, int]]]]:
    """A function returning the group's committed offsets, partition by partition."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]

    async def read() -> dict[int, int]:
        # tansu needs the partitions named (README broker quirks).
        offsets = await admin.list_consumer_group_offsets(group, partitions=tps)
        return {tp.partition: meta.offset for tp, meta in offsets.items()}

    try:
        yield read
    finally:
        await admin.close()


def _rejoined(log: Path) -> bool:
    """Whether the member logged a loss (the hook's) and then a round of its new membership."""
    kinds = [kind for kind, _ in _commits_sent(log) if kind != "commit"]
    return "lost" in kinds and "assigned" in kinds[kinds.index("lost") :]


async def _wait(
    check_: Callable[[], Awaitable[bool]], within_s: float, why: Callable[[], object]
) -> None:
    """Poll ``check_`` (a condition over other processes) until it holds, or fail with ``why()``."""
    try:
        with anyio.fail_after(within_s):
            while not await check_():  # noqa: ASYNC110 - conditions over other processes
                await anyio.sleep(0.02)
    except TimeoutError:
        raise AssertionError(why()) from None


async def test_a_fenced_member_loses_its_partitions_without_committing(
    tansu: Broker, tmp_path: Path
) -> None:
    topic = f"cf-{uuid.uuid4().hex[:10]}"
    group = f"g-cf-{uuid.uuid4().hex[:8]}"
    await create_topic(tansu.bootstrap, topic, PARTITIONS)
    ids = make_ids("cf", BEFORE + DURING + AFTER)
    sink = tmp_path / "sink"
    env = {
        **{k: v for k, v in os.environ.items() if k != "FAIRSTREAM_INSTANCE_ID"},
        "FAIRSTREAM_BOOTSTRAP": tansu.bootstrap,
        "SINK_GROUP_ID": group,
        "SINK_TOPIC": topic,
        "SINK_PATH": str(sink),
        "SINK_ASSIGNOR": "sticky",
        "SINK_COOPERATIVE": "1",
        "SINK_SESSION_TIMEOUT_MS": str(SESSION_TIMEOUT_MS),
        "SINK_DELAY": "0.002",
        "SINK_MAX_BATCH": str(MAX_BATCH),
        "SINK_COMMIT_INTERVAL": "0.2",
    }
    a_log, b_log = tmp_path / "a.log", tmp_path / "b.log"
    # A at DEBUG: aiokafka then logs every offset-commit request it sends. A commits
    # only at its rounds and when it stops, not every 0.2 s: what it handled before
    # it froze is still uncommitted when it learns it lost it, so any commit on the
    # way (a revoke's, a periodic one) would send a request, not find nothing to send.
    # Both start at once: which of them joins first proves nothing here, and B joining
    # a group A already holds cost a cooperative round more (~8 s on tansu).
    members = {
        "a": _spawn(env, "a", tmp_path, "DEBUG", SINK_COMMIT_INTERVAL="3600"),
        "b": _spawn(env, "b", tmp_path),
    }
    try:
        async with _offsets_reader(tansu.bootstrap, group, topic) as committed:

            async def settled() -> bool:
                alive = all(p.poll() is None for p in members.values())
                assert alive, "a member exited"
                return len(_owned(a_log)) == len(_owned(b_log)) == PARTITIONS // 2

            await _wait(settled, 60, lambda: f"not split: A {_owned(a_log)}, B {_owned(b_log)}")
            await produce_ids(tansu.bootstrap, topic, ids[:BEFORE], PARTITIONS, per_second=400)
            await wait_for_sightings(sink, BEFORE // 2, 30)

            stolen = _owned(a_log)

            async def a_handled() -> bool:  # a whole batch of each, so not committed yet
                seen = Counter(s.partition for s in read_sightings(sink) if s.tag == "a")
                return all(seen[p] > 2 * MAX_BATCH for p in stolen)

            await _wait(a_handled, 30, lambda: "A handled too little before it froze")
            members["a"].send_signal(signal.SIGSTOP)
            await produce_ids(
                tansu.bootstrap, topic, ids[BEFORE : BEFORE + DURING], PARTITIONS, per_second=100
            )

            async def taken_over() -> bool:
                return stolen <= _owned(b_log)

            await _wait(taken_over, 60, lambda: f"B never took {stolen}: {_events(b_log)}")
            # B reads on to the end of everything sent so far, and commits it: past
            # whatever A had fetched before it froze, so A's stale watermark for any
            # of ``stolen`` is below what the group has committed now.
            await wait_for_sightings(sink, BEFORE + DURING, 60)
            ends = {
                p: max(s.offset for s in read_sightings(sink) if s.partition == p) + 1
                for p in range(PARTITIONS)
            }

            async def all_committed() -> bool:
                return await committed() == ends

            await _wait(all_committed, 30, lambda: f"B did not commit {ends}")
            assert not _lost(a_log)  # frozen: it could not have noticed anything yet

            members["a"].send_signal(signal.SIGCONT)
            # No records arrive now, so B has nothing new to commit: a commit by A of
            # its stale watermark, if the broker let it through, would move an offset
            # back below ``ends`` and leave it there (polled every 20 ms until A has
            # rejoined and a while after, it cannot go unseen).
            backwards: list[tuple[int, int]] = []

            async def watch() -> None:
                now = await committed()
                backwards.extend((p, now[p]) for p in stolen if now[p] < ends[p])

            async def rejoined() -> bool:
                await watch()
                return _rejoined(a_log)

            await _wait(rejoined, 30, lambda: f"A did not lose and rejoin: {_events(a_log)[-3:]}")
            # A late commit counts as much: watched a second more here, and every
            # request A sends until it stops is checked in its log below.
            with anyio.move_on_after(1):
                while True:
                    await watch()
                    await anyio.sleep(0.02)

            lost = _lost(a_log)
            assert lost, "A never logged partitions_lost after it continued"
            assert lost[0]["reason"] in ("generation_reset", "member_id_changed"), lost[0]
            assert {p for _, p in lost[0]["partitions"]} == stolen, (lost[0], stolen)
            assert not backwards, f"A committed its stale watermark: {backwards} < {ends}"

            await produce_ids(tansu.bootstrap, topic, ids[BEFORE + DURING :], PARTITIONS)
            await wait_for_sightings(sink, len(ids), 60)
    finally:
        for process in members.values():
            if process.poll() is None:
                process.send_signal(signal.SIGCONT)
                await stop_sink(process, signal.SIGTERM, 30)
    # tansu itself refuses a commit from a fenced member (UNKNOWN_MEMBER_ID), so the
    # offsets alone would not show A trying: what A sent must not name a lost
    # partition either, from the loss until it is given that partition again.
    assert any(k == "commit" and v for k, v in _commits_sent(a_log)), "no commit request seen"
    assert not _stale_commits(a_log, stolen), _stale_commits(a_log, stolen)
    result = check("cooperative fence", ids, [s.id for s in read_sightings(sink)], seconds=0)
    assert result.lost == 0, sorted(result.lost_ids)[:20]
