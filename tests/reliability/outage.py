"""A broker that goes away mid-stream for a while and comes back on its data.

``fairstream run`` consumes from a dedicated noida broker (it keeps its log in its
data directory) with ``--http-port``; the broker process is stopped for
``outage`` seconds while records are being handled (and at least until /ready has
said 503, and the SIGTERMed process below has exited). The scenario records what
``/ready`` answered, how the process ended, and every record end to end.

With ``sigterm_during_outage`` the process is sent SIGTERM while the broker is
away: it must exit (code 0) with nothing committed past a record it did not
handle; a second process, started once the broker is back, handles the rest.
"""

from __future__ import annotations

import signal
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import anyio

from fairstream.testing import free_port
from tests.reliability.checker import (
    Result,
    check,
    make_ids,
    produce_ids,
    read_sightings,
    wait_for_sightings,
)
from tests.reliability.scenarios import spawn_sink, start_noida, stop_sink
from tests.support.kafka_helpers import committed, create_topic

__all__ = ["Outage", "broker_outage", "ready_status"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Outage:
    """``exit_code``/``exit_seconds``: the process SIGTERMed in the outage (SIGTERM to
    exit), else the one process at the end; ``last_exit_code``: the process that
    finished the records; ``unhandled_below_commit``: offsets below the group's
    commit after the SIGTERM that no handler saw (must be empty)."""

    result: Result
    ready_before: int | None
    ready_during: int | None
    ready_after: int | None
    exit_code: int
    exit_seconds: float
    last_exit_code: int
    unhandled_below_commit: dict[int, list[int]]
    stderr: str


async def ready_status(port: int) -> int | None:
    """The status ``GET /ready`` answers on 127.0.0.1:``port`` (``None``: no answer)."""
    try:
        with anyio.fail_after(5):
            async with await anyio.connect_tcp("127.0.0.1", port) as stream:
                await stream.send(b"GET /ready HTTP/1.0\r\n\r\n")
                head = await stream.receive()
    except (OSError, TimeoutError, anyio.EndOfStream, anyio.BrokenResourceError):
        return None
    return int(head.split(b" ", 2)[1])


async def _await_ready(port: int, wanted: int, wait_limit: float) -> int | None:
    """Ask ``/ready`` until it answers ``wanted``; the last answer when time ran out."""
    status = None
    with anyio.move_on_after(wait_limit):
        # The status is another process's: nothing to wait on but its answers.
        while (status := await ready_status(port)) != wanted:  # noqa: ASYNC110
            await anyio.sleep(0.2)
    return status


async def broker_outage(
    *,
    records: int,
    partitions: int,
    outage: float,
    workdir: Path,
    sigterm_during_outage: bool = False,
    shutdown_timeout: float = 10.0,
    wait_limit: float = 120,
) -> Outage:
    """Half the records are produced before the outage, half after it."""
    started = time.monotonic()
    broker = await start_noida(workdir)
    try:
        bootstrap = broker.bootstrap
        topic = f"outage-{uuid.uuid4().hex[:10]}"
        group = f"g-outage-{uuid.uuid4().hex[:8]}"
        await create_topic(bootstrap, topic, partitions)
        ids = make_ids("outage", records)
        half = records // 2
        await produce_ids(bootstrap, topic, ids[:half], partitions)
        sink_path = workdir / f"{topic}.sink"
        stderr = workdir / f"{topic}.stderr"
        port = free_port()
        env = {
            "FAIRSTREAM_BOOTSTRAP": bootstrap,
            "FAIRSTREAM_INSTANCE_ID": "outage-0",
            "SINK_GROUP_ID": group,
            "SINK_TOPIC": topic,
            "SINK_PATH": str(sink_path),
            "SINK_DELAY": "0.002",
            "SINK_SHUTDOWN_TIMEOUT": str(shutdown_timeout),
        }
        options = ("--http-port", str(port), "--http-host", "127.0.0.1")
        first = spawn_sink({**env, "SINK_TAG": "first"}, stderr, *options)
        try:
            ready_before = await _await_ready(port, 200, wait_limit)
            await wait_for_sightings(sink_path, half // 2, wait_limit)
            await anyio.to_thread.run_sync(broker.stop_process)
            down_at = time.monotonic()
            ready_during = await _await_ready(port, 503, wait_limit)
            unhandled: dict[int, list[int]] = {}
            exit_code, exit_seconds = 0, 0.0
            if sigterm_during_outage:
                sent = time.monotonic()
                exit_code = await stop_sink(first, signal.SIGTERM, shutdown_timeout + wait_limit)
                exit_seconds = time.monotonic() - sent
            await anyio.sleep(max(0.0, outage - (time.monotonic() - down_at)))
            away = time.monotonic() - down_at
            await anyio.to_thread.run_sync(broker.start)
            if sigterm_during_outage:
                unhandled = await _unhandled_below_commit(
                    bootstrap, group, topic, partitions, sink_path
                )
                first = spawn_sink({**env, "SINK_TAG": "second"}, stderr, *options)
            await produce_ids(bootstrap, topic, ids[half:], partitions)
            ready_after = await _await_ready(port, 200, wait_limit)
            await wait_for_sightings(sink_path, records, wait_limit)
        finally:
            last_exit = await stop_sink(first, signal.SIGTERM, shutdown_timeout + wait_limit)
        if not sigterm_during_outage:
            exit_code = last_exit
        label = f"broker outage {away:.0f} s"
        label += ", SIGTERM in it" if sigterm_during_outage else ""
        seen = [s.id for s in read_sightings(sink_path)]
        return Outage(
            result=check(label, ids, seen, seconds=time.monotonic() - started),
            ready_before=ready_before,
            ready_during=ready_during,
            ready_after=ready_after,
            exit_code=exit_code,
            exit_seconds=exit_seconds,
            last_exit_code=last_exit,
            unhandled_below_commit=unhandled,
            stderr=stderr.read_text(errors="replace"),
        )
    finally:
        await anyio.to_thread.run_sync(broker.stop)


async def _unhandled_below_commit(
    bootstrap: str, group: str, topic: str, partitions: int, sink_path: Path
) -> dict[int, list[int]]:
    """Per partition, the offsets below the group's commit that no handler saw."""
    offsets = await committed(bootstrap, group, topic, partitions)
    seen: dict[int, set[int]] = {p: set() for p in range(partitions)}
    for sighting in read_sightings(sink_path):
        seen[sighting.partition].add(sighting.offset)
    return {
        p: missing
        for p, offset in enumerate(offsets)
        if (missing := sorted(set(range(offset or 0)) - seen[p]))
    }
