"""The cooperative hook (KIP-429) and its settings: what it relies on in aiokafka."""

from __future__ import annotations

import inspect
import json

import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka.cluster import ClusterMetadata
from aiokafka.consumer.fetcher import Fetcher
from aiokafka.consumer.group_coordinator import CoordinatorGroupRebalance, GroupCoordinator
from aiokafka.coordinator.protocol import (
    ConsumerProtocolMemberAssignment,
    ConsumerProtocolMemberMetadata,
)

from fairstream import App
from fairstream.errors import ConfigError
from fairstream.runtime._kafka._assignors import make_assignor
from fairstream.runtime._kafka._cooperative_hooks import make_cooperative, unsupported
from fairstream.runtime.group._protocol_names import protocol_name, shared_protocol
from tests.conftest import Broker


@pytest.mark.parametrize("assignor", ["fair", "range", "roundrobin", ["sticky", "range"]])
def test_cooperative_needs_a_strategy_that_keeps_owners(assignor: str | list[str]) -> None:
    with pytest.raises(ConfigError, match="cooperative") as caught:
        App(bootstrap="unused:9092", group_id="g", assignor=assignor, cooperative=True)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("assignor", ["sticky", "lag", ["lag", "sticky"]])
def test_cooperative_members_offer_protocols_of_their_own(assignor: str | list[str]) -> None:
    app = App(bootstrap="unused:9092", group_id="g", assignor=assignor, cooperative=True)
    assert app.cooperative
    planner = make_assignor(assignor, bootstrap="b:1", group_id="g", cooperative=True)
    names = [entry.name for entry in planner.protocols]
    eager = [
        entry.name for entry in make_assignor(assignor, bootstrap="b:1", group_id="g").protocols
    ]
    assert names == [protocol_name(s, cooperative=True) for s in planner.strategies]
    assert all(name.endswith("-coop") for name in names)
    assert not set(names) & set(eager)  # Kafka's rule: never one protocol for both
    assert not any(shared_protocol(name) for name in names)


def test_a_consumer_without_the_expected_coordinator_is_refused() -> None:
    class NotAiokafka:
        _coordinator = None

    with pytest.raises(ConfigError, match="cannot rebalance cooperatively") as caught:
        make_cooperative(
            NotAiokafka(), make_assignor("sticky", cooperative=True), rejoin_after_s=0.5
        )
    assert "\n" not in str(caught.value)


@pytest.mark.broker
async def test_the_pinned_aiokafka_has_what_the_hook_relies_on(noida: Broker) -> None:
    """Fails loudly when an aiokafka upgrade changes the coordinator the hook replaces."""
    consumer = AIOKafkaConsumer(bootstrap_servers=noida.bootstrap, group_id="hook-shape")
    await consumer.start()
    try:
        coordinator = consumer._coordinator
        assert unsupported(coordinator) is None
        make_cooperative(consumer, make_assignor("sticky", cooperative=True), rejoin_after_s=0.5)
        assert coordinator._on_join_prepare.__qualname__ == "_Cooperative.prepare"
        assert coordinator._on_join_complete.__qualname__ == "_Cooperative.complete"
        wrapped = consumer._fetcher._get_actions_per_node.__qualname__
        assert wrapped.startswith("_look_again_after_finished_fetches."), wrapped
    finally:
        await consumer.stop()
    # The calls the replaced methods stand in for, where aiokafka makes them.
    calls = {
        GroupCoordinator.ensure_active_group: "await self._on_join_prepare(prev_assignment)",
        GroupCoordinator._do_rejoin_group: "await self._on_join_complete(",
        GroupCoordinator.commit_offsets: "asyncio.shield(self._do_commit_offsets(",
        GroupCoordinator._do_commit_offsets: "self.reset_generation()",
        CoordinatorGroupRebalance.perform_group_join: "self._coordinator.reset_generation()",
        GroupCoordinator._on_join_complete: "self._subscription.assign_from_subscribed(",
        # What _look_again_after_finished_fetches wraps: the wait of the fetch loop.
        Fetcher._fetch_requests_routine: "timeout,\n                    invalid_metadata,",
        Fetcher._get_actions_per_node: "backoff,\n            invalid_metadata,",
    }
    for function, call in calls.items():
        assert call in inspect.getsource(function), f"{function.__qualname__} no longer has {call}"


def test_the_upgrade_step_offers_eager_first_and_reports_nothing_owned_to_coop() -> None:
    """Step 1 of the rolling upgrade: eager members that a cooperative group can take."""
    planner = make_assignor("sticky", cooperative="upgrade")
    assert not planner.cooperative  # it rebalances eagerly: no hook at start
    eager, coop = planner.protocols
    assert [eager.name, coop.name] == ["fairstream-sticky", "fairstream-sticky-coop"]
    planner.assigned(eager.name, ConsumerProtocolMemberAssignment(0, [("t", [0, 1])], b""))
    # An eager member revoked everything before it joins: under -coop it owns nothing,
    # so a cooperative leader holds nothing back for it (Kafka's eager members alike).
    assert json.loads(eager.metadata(["t"]).user_data) == {"t": [0, 1]}
    assert json.loads(coop.metadata(["t"]).user_data) == {}


def test_a_cooperative_leader_holds_back_what_moves_between_live_members() -> None:
    planner = make_assignor("sticky", cooperative=True)
    cluster = ClusterMetadata()
    cluster._partitions = {"t": dict.fromkeys(range(4))}
    owned = {"a": {"t": [0, 1, 2, 3]}, "b": {}}
    members = {
        m: ConsumerProtocolMemberMetadata(0, ["t"], json.dumps(o).encode())
        for m, o in owned.items()
    }
    first = planner.assign(cluster, members)
    assert first["a"].assignment == [("t", [0, 1])]
    assert first["b"].assignment == []  # 2 and 3 wait for a's revoke
    members["a"] = ConsumerProtocolMemberMetadata(0, ["t"], json.dumps({"t": [0, 1]}).encode())
    second = planner.assign(cluster, members)
    assert second["b"].assignment == [("t", [2, 3])]
