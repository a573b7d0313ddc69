"""SIGKILL with hundreds of records in flight under ``ordering="key"``: nothing lost.

The same run twice, once with the offset map and once committing only the
watermark: both lose nothing, and the map repeats fewer records after the restart,
because the records finished above the watermark are not run again. Runs on noida,
which keeps commit metadata (tansu drops it: see test_offset_map.py).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import anyio

from tests.conftest import Broker
from tests.support.kafka_helpers import create_topic, produce_keyed

ROOT = Path(__file__).parents[3]
PARTITIONS, KEYS, PER_KEY = 4, 400, 10


@contextmanager
def _member(
    noida: Broker, group_id: str, topic: str, sink: Path, offset_map: bool
) -> Iterator[subprocess.Popen[str]]:
    process = subprocess.Popen(
        [sys.executable, "-m", "fairstream", "run", "tests.support.keyed_member:app"],
        cwd=ROOT,
        env={
            **os.environ,
            "FAIRSTREAM_BOOTSTRAP": noida.bootstrap,
            "FAIRSTREAM_GROUP_ID": group_id,
            "FAIRSTREAM_INSTANCE_ID": "member-0",
            "KEYED_TOPIC": topic,
            "KEYED_SINK": str(sink),
            "KEYED_OFFSET_MAP": "1" if offset_map else "0",
        },
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        yield process
    finally:
        process.kill()
        process.communicate()


def _lines(sink: Path) -> list[str]:
    return sink.read_text().splitlines() if sink.exists() else []


async def _crash_and_restart(noida: Broker, tmp: Path, *, offset_map: bool) -> Counter[str]:
    """Kill the member with hundreds in flight, restart it, return how often each ran."""
    topic = f"kc-{uuid.uuid4().hex[:10]}"
    group_id = f"g-crash-{uuid.uuid4().hex[:8]}"
    await create_topic(noida.bootstrap, topic, PARTITIONS)
    await produce_keyed(
        noida.bootstrap,
        topic,
        [
            (k % PARTITIONS, b"k%d" % k, f"k{k}:{s}".encode())
            for k in range(KEYS)
            for s in range(PER_KEY)
        ],
    )
    sink = tmp / f"sink-{int(offset_map)}.txt"
    with _member(noida, group_id, topic, sink, offset_map) as first:
        with anyio.fail_after(60):
            while len(_lines(sink)) < 1_500:
                assert first.poll() is None, first.communicate()[1]
                await anyio.sleep(0.05)
        first.send_signal(signal.SIGKILL)
        first.wait(10)
    with _member(noida, group_id, topic, sink, offset_map) as second:
        with anyio.fail_after(90):
            while len(set(_lines(sink))) < KEYS * PER_KEY:
                assert second.poll() is None, second.communicate()[1]
                await anyio.sleep(0.1)
    return Counter(_lines(sink))


async def test_sigkill_with_hundreds_in_flight_loses_nothing_and_the_map_repeats_less(
    noida: Broker, tmp_path: Path
) -> None:
    # The two runs share nothing (topic, group, sink) and spend most of their time
    # waiting on the 5 s records: side by side they take the time of one.
    runs: dict[bool, Counter[str]] = {}

    async def run(offset_map: bool) -> None:
        runs[offset_map] = await _crash_and_restart(noida, tmp_path, offset_map=offset_map)

    async with anyio.create_task_group() as tg:
        tg.start_soon(run, True)
        tg.start_soon(run, False)
    with_map, watermark = runs[True], runs[False]

    everything = {f"k{k}:{s}" for k in range(KEYS) for s in range(PER_KEY)}
    assert set(with_map) == everything
    assert set(watermark) == everything
    repeated_with_map = sum(n - 1 for n in with_map.values())
    repeated_watermark = sum(n - 1 for n in watermark.values())
    print(f"repeated: offset map {repeated_with_map}, watermark only {repeated_watermark}")
    assert repeated_with_map < repeated_watermark
