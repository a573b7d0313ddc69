"""Re-planning on drift, without a broker: lag noise keeps the assignment, a burst
that a new plan relieves by more than ``min_improvement`` asks for a rebalance."""

from __future__ import annotations

import dataclasses

import pytest

from fairstream import App
from fairstream.assign import GroupSnapshot, plan
from fairstream.errors import ConfigError
from fairstream.runtime._kafka._assignors import PlanRecord, make_assignor
from fairstream.runtime._kafka._clients import aiokafka_clients
from fairstream.runtime._kafka._drift import check_drift, plan_to_check
from fairstream.runtime._ports import DriftWatcher

LAGS = {"a": (100, 100, 100, 100), "b": (50, 50, 50, 50)}


def record() -> PlanRecord:
    snapshot = GroupSnapshot(
        members={"m0": frozenset({"a", "b"}), "m1": frozenset({"a", "b"})},
        partitions={"a": 4, "b": 4},
        lag=LAGS,
    )
    assignment = plan("lag", snapshot)
    return PlanRecord(
        strategy="lag",
        protocol="fairstream-lag",
        snapshot=snapshot,
        previous=None,
        assignment=assignment,
    )


def test_lag_noise_below_min_improvement_moves_nothing() -> None:
    noisy = {"a": (104, 96, 103, 97), "b": (52, 48, 51, 49)}  # +/-4%
    change = check_drift(record(), noisy)
    assert change.moves == ()
    assert change.busiest_after == change.busiest_now


def test_a_burst_a_new_plan_relieves_asks_for_moves_and_lowers_the_busiest_lag() -> None:
    current = record()
    held = current.assignment.members["m0"]["a"]  # m0's two partitions of "a"
    burst = tuple(500 if p in held else 100 for p in range(4))
    change = check_drift(current, {"a": burst, "b": LAGS["b"]})
    assert change.moves
    assert change.busiest_after < change.busiest_now * (1 - 0.1)


@pytest.mark.parametrize(
    ("assignor", "interval"),
    [
        pytest.param("fair", 60.0, id="without-lag"),
        pytest.param("lag", 0.0, id="zero"),
        pytest.param(["lag", "range"], -1.0, id="negative"),
    ],
)
def test_replan_interval_needs_lag_and_a_positive_interval(
    assignor: str | list[str], interval: float
) -> None:
    with pytest.raises(ConfigError, match="replan_interval"):
        App(bootstrap="unused:9092", group_id="g", assignor=assignor, replan_interval=interval)
    with pytest.raises(ConfigError, match="replan_interval"):
        make_assignor(assignor, bootstrap="unused:9092", group_id="g", replan_interval_s=interval)


async def test_the_apps_clients_run_the_drift_watch_with_its_interval() -> None:
    app = App(bootstrap="unused:9092", group_id="g", assignor="lag", replan_interval=5.0)
    clients = aiokafka_clients(app, [])
    assert isinstance(clients, DriftWatcher)  # the engine starts clients.watch_drift
    assert clients.assignor.replan_interval_s == 5.0
    await clients.aclose()


def test_only_the_leader_of_a_lag_plan_checks_it_once() -> None:
    """A member that does not lead, or led a fair fallback, never re-checks: the
    watch would otherwise rebalance a group running another protocol."""
    assignor = make_assignor("lag", bootstrap="unused:9092", group_id="g", replan_interval_s=1)
    assignor.last_plan = lag_plan = record()
    assert plan_to_check(assignor, None) is None  # not leading
    assignor.leading = True
    assert plan_to_check(assignor, None) is lag_plan
    assert plan_to_check(assignor, lag_plan) is None  # a rebalance was asked for it
    assignor.last_plan = dataclasses.replace(lag_plan, strategy="fair")
    assert plan_to_check(assignor, None) is None
