"""A cooperative member SIGKILLed between the two rounds of a rebalance: nothing lost.

Three ``fairstream run`` members read 6 partitions; a fourth joins. Each member that
gives a partition to the newcomer revokes it (committing what it handled) in the
first round and asks for the second round a heartbeat interval later: the first
such member stops itself right after its revoke commit (SIGSTOP in a revoke
listener of the sink app, so that the window is hit on a loaded machine too; or
after losing its partitions, see ``_GIVING_UP``) and is killed there with SIGKILL,
so the group goes on without it, and its kept partitions are handled again from
their last commit by the member restarted under its instance id (noida never evicts
a dead member).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from datetime import datetime
from pathlib import Path

import anyio
import pytest

from tests.conftest import Broker
from tests.reliability.checker import check, make_ids, produce_ids, read_sightings
from tests.reliability.scenarios import REPO, stop_sink, wait_for_sightings
from tests.support.kafka_helpers import create_topic

pytestmark = pytest.mark.broker

PARTITIONS, RECORDS = 6, 6_000
"""At 2 ms a record the group of three needs about 4 s: the join lands mid-stream."""


def _spawn(env: dict[str, str], name: str, workdir: Path) -> subprocess.Popen[bytes]:
    """``fairstream run`` of the sink app as member ``name``, logging JSON at INFO."""
    with open(workdir / f"{name}.log", "ab") as err:
        return subprocess.Popen(
            [
                *(sys.executable, "-m", "fairstream", "--log-level", "INFO", "run"),
                *("tests.reliability.sink_app:build", "--log-format", "json"),
            ],
            cwd=REPO,
            env={**env, "FAIRSTREAM_INSTANCE_ID": name, "SINK_TAG": name},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=err,
        )


_GIVING_UP = ("partitions_revoked", "partitions_lost")
"""How a member gives partitions up. Under load noida can forget a member of the round
it just joined ("local member_id was not recognized"); its partitions are then lost,
not revoked, and the revoke listeners get them (as Kafka's default onPartitionsLost
does), so the victim may stop there: it is then killed before its next round all the
same."""


def _timeline(workdir: Path, spawned: dict[str, float]) -> str:
    """Each member's spawn, start and rounds, in seconds from the first spawn: what a
    failure of the waits below has to show to be found."""
    zero = min(spawned.values())
    lines = []
    for name, at in sorted(spawned.items()):
        events = [f"spawned {at - zero:.1f}"]
        for line in (workdir / f"{name}.log").read_text(errors="replace").splitlines():
            if not line.startswith("{"):
                continue
            event = json.loads(line)
            if event["event"] in ("consumer_started", "cooperative_join", "cooperative_assignment"):
                when = datetime.fromisoformat(event["timestamp"]).timestamp() - zero
                detail = {k: event[k] for k in ("generation", "revoked", "added") if k in event}
                events.append(f"{event['event']} {when:.1f} {detail}")
        lines.append(f"{name}: " + "; ".join(events))
    return "\n".join(lines)


def _after_giving_up(log: Path) -> list[str]:
    """The events the member logged after it last gave partitions up."""
    lines = [line for line in log.read_text(errors="replace").splitlines() if line.startswith("{")]
    events = [str(json.loads(line)["event"]) for line in lines]
    gave_up = [i for i, event in enumerate(events) if event in _GIVING_UP]
    assert gave_up, f"the member that stopped at its revoke logged none: {events[-10:]}"
    return events[gave_up[-1] + 1 :]


def _stopped_at_revoke(workdir: Path, members: dict[str, subprocess.Popen[bytes]]) -> str | None:
    """The member that took the stop (``SINK_STOP_AT_REVOKE``), once it has stopped:
    Linux's /proc state ``T``."""
    for taken in workdir.glob("stop-at-revoke.*"):
        name = taken.suffix[1:]
        stat = Path(f"/proc/{members[name].pid}/stat").read_text()
        if stat.rsplit(")", 1)[1].split()[0] == "T":
            return name
    return None


async def test_a_member_killed_between_the_two_rounds_loses_nothing(
    noida: Broker, tmp_path: Path
) -> None:
    topic = f"ck-{uuid.uuid4().hex[:10]}"
    await create_topic(noida.bootstrap, topic, PARTITIONS)
    ids = make_ids("ck", RECORDS)
    # Half before the members start, half once the kill has landed: on a loaded machine
    # the cooperative rounds can outlast the first half, so records still flow to every
    # partition, the victim's among them, after the kill whatever the timing.
    half = RECORDS // 2
    await produce_ids(noida.bootstrap, topic, ids[:half], PARTITIONS)
    sink = tmp_path / "sink"
    armed = tmp_path / "stop-at-revoke"
    env = {
        **os.environ,
        "FAIRSTREAM_BOOTSTRAP": noida.bootstrap,
        "SINK_GROUP_ID": f"g-ck-{uuid.uuid4().hex[:8]}",
        "SINK_TOPIC": topic,
        "SINK_PATH": str(sink),
        "SINK_ASSIGNOR": "sticky",
        "SINK_COOPERATIVE": "1",
        "SINK_DELAY": "0.002",
        "SINK_MAX_BATCH": "20",
        "SINK_COMMIT_INTERVAL": "0.2",
        "SINK_STOP_AT_REVOKE": str(armed),
    }
    members = {name: _spawn(env, name, tmp_path) for name in ("m0", "m1", "m2")}
    spawned = dict.fromkeys(members, time.time())
    try:
        await wait_for_sightings(sink, RECORDS // 10, 60)
        armed.touch()  # the next member to revoke stops itself after its revoke commit
        members["m3"] = _spawn(env, "m3", tmp_path)
        spawned["m3"] = time.time()
        with anyio.move_on_after(60) as waited:
            while (victim := _stopped_at_revoke(tmp_path, members)) is None:
                assert all(p.poll() is None for p in members.values())
                await anyio.sleep(0.02)
        if waited.cancelled_caught:
            pytest.fail("no member revoked a partition in 60 s:\n" + _timeline(tmp_path, spawned))
        await stop_sink(members[victim], signal.SIGKILL, 10)
        await produce_ids(noida.bootstrap, topic, ids[half:], PARTITIONS)
        # Killed between the rounds: giving partitions up was its last round's last step.
        after = _after_giving_up(tmp_path / f"{victim}.log")
        assert not {"cooperative_assignment", "cooperative_join"} & set(after), after
        env.pop("SINK_STOP_AT_REVOKE")
        members[victim] = _spawn(env, victim, tmp_path)
        await wait_for_sightings(sink, RECORDS, 120)
    finally:
        for process in members.values():
            if process.poll() is None:
                await stop_sink(process, signal.SIGTERM, 30)
    result = check("cooperative kill", ids, [s.id for s in read_sightings(sink)], seconds=0)
    assert result.lost == 0, sorted(result.lost_ids)[:20]
