"""Kafka's rule for what members claim to own: the newest generation's claim wins,
claims tied at the newest generation void the partition (it is contested)."""

from __future__ import annotations

import pytest

from fairstream.assign import Assignment, TopicPartition, resolve_owned
from fairstream.assign.claims import Claim


def test_a_stale_claim_loses_to_the_current_owners() -> None:
    # c2 missed a rebalance: it still claims t[0], which c1 got in generation 10.
    previous, contested = resolve_owned({"c1": (10, {"t": [0]}), "c2": (8, {"t": [0, 1]})})
    assert previous == Assignment({"c1": {"t": (0,)}, "c2": {"t": (1,)}})
    assert contested == frozenset()


def test_claims_tied_at_the_newest_generation_void_the_partition() -> None:
    previous, contested = resolve_owned(
        {"c1": (10, {"t": [0, 1]}), "c2": (10, {"t": [0]}), "c3": (9, {"t": [0]})}
    )
    assert previous == Assignment({"c1": {"t": (1,)}, "c2": {}, "c3": {}})
    assert contested == {("t", 0)}


@pytest.mark.parametrize(
    ("claims", "owner", "tied"),
    [
        pytest.param(
            {"a": (3, {"t": [0]}), "b": (3, {"t": [0]}), "c": (4, {"t": [0]})},
            "c",
            set(),
            id="a-tie-below-the-newest-claim-does-not-count",
        ),
        pytest.param(
            {"old": (-1, {"t": [0]}), "new": (0, {"t": [0]})},
            "new",
            set(),
            id="no-generation-is-minus-one",
        ),
        pytest.param(
            {"a": (-1, {"t": [0]}), "b": (-1, {"t": [0]})},
            None,
            {("t", 0)},
            id="two-old-members-tie",
        ),
    ],
)
def test_kafkas_rule_per_partition(
    claims: dict[str, Claim], owner: str | None, tied: set[TopicPartition]
) -> None:
    previous, contested = resolve_owned(claims)
    assert previous.owner_map().get(("t", 0)) == owner
    assert contested == tied
    assert set(previous.members) == set(claims)
