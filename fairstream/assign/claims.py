"""Who owned what before this rebalance, from what the members claim (Kafka's rule).

Each member reports the partitions it owns and the generation in which it was given
them (Kafka's sticky assignors keep that generation in their user data, and
``ConsumerProtocolSubscription`` v2 carries it). A member that missed a rebalance
still claims what it owned then: the generation tells its claim from the current
owner's. :func:`resolve_owned` applies the rule of Kafka's ``AbstractStickyAssignor``:
per partition, the claim of the highest generation wins; two or more claims tied at
that generation void it - nobody owned it for the plan, and it is *contested*: in
a cooperative round its claimants must revoke it before anyone gets it
(:func:`fairstream.assign.cooperative.hold_back_moves`). A member that reports no
generation (an older client) counts as generation -1, Kafka's ``DEFAULT_GENERATION``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from fairstream.assign.model import Assignment, TopicPartition

__all__ = ["NO_GENERATION", "Claim", "resolve_owned"]

NO_GENERATION = -1
"""The generation of a claim that names none (Kafka's ``DEFAULT_GENERATION``)."""

Claim = tuple[int, Mapping[str, Sequence[int]]]
"""``(generation, {topic: [partitions]})``: what one member reports owning."""


def resolve_owned(
    claims: Mapping[str, Claim],
) -> tuple[Assignment, frozenset[TopicPartition]]:
    """The previous assignment the claims make, and the partitions they contest.

    ``claims`` maps member_id to its claim as reported; every claimant appears in the
    previous assignment (with what its claims won, possibly nothing). A partition goes
    to the one claimant of the highest generation that claims it; when several tie
    at that generation it goes to none and is listed in ``contested``.

    >>> previous, contested = resolve_owned({"a": (10, {"t": [0]}), "b": (8, {"t": [0]})})
    >>> previous.to_json(), contested
    ({'a': {'t': [0]}, 'b': {}}, frozenset())
    """
    best: dict[TopicPartition, tuple[int, list[str]]] = {}
    for member_id, (generation, owned) in sorted(claims.items()):
        for topic, partitions in owned.items():
            for partition in set(partitions):
                tp = (topic, partition)
                top = best.get(tp)
                if top is None or generation > top[0]:
                    best[tp] = (generation, [member_id])
                elif generation == top[0]:
                    top[1].append(member_id)
    won: dict[str, dict[str, list[int]]] = {member_id: {} for member_id in claims}
    contested: set[TopicPartition] = set()
    for (topic, partition), (_, claimants) in best.items():
        if len(claimants) == 1:
            won[claimants[0]].setdefault(topic, []).append(partition)
        else:
            contested.add((topic, partition))
    previous = Assignment({m: {t: tuple(ps) for t, ps in ts.items()} for m, ts in won.items()})
    return previous, frozenset(contested)
