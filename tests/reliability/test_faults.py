"""Faults around a running consumer: a SIGKILLed process, a rebalance storm, a
broker restart. Every record is counted end to end; none may be lost."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import EXTERNAL, Broker
from tests.reliability.checker import summary
from tests.reliability.scenarios import broker_restart, kill_and_restart, rebalance_storm

pytestmark = [pytest.mark.broker, pytest.mark.reliability]


def _static(broker: Broker) -> bool:
    return broker.instance_id("member") is not None


async def test_sigkilled_consumer_restarts_without_loss(broker: Broker, tmp_path: Path) -> None:
    """tansu: a new dynamic member takes over after the dead one is evicted;
    noida: the same instance id takes its partitions straight back."""
    outcome = await kill_and_restart(
        broker.bootstrap,
        static=_static(broker),
        records=3_000,
        partitions=4,
        workdir=tmp_path,
        session_timeout_ms=6_000,
    )
    result = outcome.result
    print(summary(result), f"window={len(outcome.window)}")
    assert result.lost == 0, summary(result)
    # The kill landed on handled-but-uncommitted work, or the scenario proved nothing.
    assert outcome.window, "the kill left no uncommitted window; kill earlier or commit later"
    # At-least-once, and no more: exactly the records handled after the last commit
    # are handled again, each once.
    assert result.duplicated_ids == outcome.window, summary(result)
    assert result.duplicated == len(outcome.window)
    assert outcome.exit_code == 0, outcome.stderr[-2000:]
    assert "Traceback" not in outcome.stderr


async def test_sigkill_with_manual_acks_loses_no_buffered_record(
    broker: Broker, tmp_path: Path
) -> None:
    """The handler buffers 50 records a partition before it writes and acknowledges
    them: a kill finds records handled but not written, and the group's offset must
    not have passed them (#22: it used to be moved to what the engine had handled)."""
    outcome = await kill_and_restart(
        broker.bootstrap,
        static=_static(broker),
        records=2_000,
        partitions=4,
        workdir=tmp_path,
        manual_flush=50,
        delay=0.002,
        wait_limit=90,
    )
    result = outcome.result
    print(summary(result), outcome.committed_at_kill)
    assert result.lost == 0, summary(result)
    # Offsets are only ever committed at flush boundaries, never over a buffer.
    assert all(offset is None or offset % 50 == 0 for offset in outcome.committed_at_kill.values())
    assert outcome.exit_code == 0, outcome.stderr[-2000:]


async def test_rebalance_storm_while_producing_loses_nothing(
    broker: Broker, tmp_path: Path
) -> None:
    """Shortened storm: 6 joins and leaves over ~8 s (the soak runs 20 over a minute)."""
    storm = await rebalance_storm(
        broker.bootstrap,
        static=_static(broker),
        records=3_000,
        partitions=6,
        events=6,
        seconds=8,
        workdir=tmp_path,
    )
    result = storm.result
    print(summary(result), dict(storm.handled_by))
    assert result.lost == 0, summary(result)
    assert storm.crashes == [], "a member stopped on its own during the storm"
    # The storm moved partitions: members other than the anchor handled records.
    assert storm.events >= 6
    assert set(storm.handled_by) - {"anchor"}, storm.handled_by


@pytest.mark.skipif(
    EXTERNAL is not None, reason="restarts a dedicated embedded noida broker; not for a cluster"
)
async def test_broker_restart_on_same_data_dir_consumer_reconnects(tmp_path: Path) -> None:
    """noida only: it keeps its log in its data dir (tansu is memory-only, so a
    restart loses the topic by design). A dedicated broker, not the session one."""
    outcome = await broker_restart(records=4_000, partitions=3, restarts=2, workdir=tmp_path)
    print(summary(outcome.result))
    assert outcome.result.lost == 0, summary(outcome.result)
