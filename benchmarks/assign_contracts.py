"""How often the balanced planners break Kafka's assignor contracts on random groups.

Issue #34's contracts 1 and 3, checked on large random groups (up to 50 members, 20
topics of up to 40 partitions, mixed or shared subscriptions, lag or none, previous
owners skewed towards a few members, some of them gone):

- balance: Kafka's rule, "no partition can move to another subscriber of its topic
  that holds two or more fewer partitions", and members sharing one subscription
  differ by at most one partition;
- give-back: a moved partition could go back to its previous owner with every count
  kept, alone (its holder has one more than its owner) or swapped for a partition its
  owner newly got that the holder reads; for ``lag`` only a return that leaves the
  busiest member's lag no higher counts.

``tests/assign/test_contracts.py`` holds the planners to both with the same checks.

    python benchmarks/assign_contracts.py              # 200 groups, seed 34
"""

from __future__ import annotations

import argparse
import random

from fairstream.assign import Assignment, GroupSnapshot, member_lags, plan

__all__ = ["give_backs", "kafka_unbalanced", "large_group"]


def large_group(rng: random.Random) -> tuple[GroupSnapshot, Assignment]:
    """A random group and a previous plan whose owners are skewed (Pareto weights)."""
    topics = {f"t{i:02d}": rng.randint(1, 40) for i in range(rng.randint(1, 20))}
    names = sorted(topics)
    same = rng.random() < 0.5
    members = {
        f"m{i:02d}": frozenset(names if same else rng.sample(names, rng.randint(1, len(names))))
        for i in range(rng.randint(1, 50))
    }
    lag: dict[str, tuple[int, ...]] = {}
    if rng.random() < 0.5:
        for topic, count in topics.items():
            lag[topic] = tuple(rng.choice((0, rng.randint(0, 1_000), 50_000)) for _ in range(count))
    owners = [*members, "gone1", "gone2"]
    weights = [rng.paretovariate(1.0) for _ in owners]
    previous: dict[str, dict[str, list[int]]] = {}
    for topic, count in topics.items():
        for partition in range(count):
            if rng.random() < 0.9:
                owner = rng.choices(owners, weights)[0]
                previous.setdefault(owner, {}).setdefault(topic, []).append(partition)
    snapshot = GroupSnapshot(members=members, partitions=topics, lag=lag)
    return snapshot, Assignment.from_json(previous)


def kafka_unbalanced(snapshot: GroupSnapshot, assignment: Assignment) -> list[str]:
    """Where Kafka's balance rule breaks, or two members of one subscription differ by 2+."""
    count = {m: assignment.count(m) for m in snapshot.members}
    broken = [
        f"{holder} holds {topic} with {count[holder]}, {reader} reads it with {count[reader]}"
        for holder, topics in assignment.members.items()
        for topic in topics
        for reader, subscription in snapshot.members.items()
        if topic in subscription and count[reader] <= count[holder] - 2
    ]
    for member_id, subscription in snapshot.members.items():
        for other, theirs in snapshot.members.items():
            if subscription == theirs and count[member_id] - count[other] > 1:
                broken.append(f"{member_id} and {other} share a subscription")
    return broken


def give_backs(
    snapshot: GroupSnapshot,
    previous: Assignment,
    assignment: Assignment,
    *,
    with_lag: bool = False,
) -> list[str]:
    """Moved partitions that could go back to their previous owner with every count kept.

    ``with_lag``: only returns that leave the busiest member's lag no higher count.
    """
    now = assignment.owner_map()
    before = {
        tp: m
        for tp, m in previous.owner_map().items()
        if m in snapshot.members and tp[0] in snapshot.members[m] and tp in now
    }
    count = {m: assignment.count(m) for m in snapshot.members}
    lags = member_lags(snapshot, assignment)
    cap = max(lags.values(), default=0)

    def fits(owner: str, holder: str, delta: int) -> bool:
        return not with_lag or (lags[owner] + delta <= cap and lags[holder] - delta <= cap)

    newly: dict[str, list[tuple[str, int]]] = {m: [] for m in snapshot.members}
    for tp, member_id in now.items():
        if before.get(tp) != member_id:
            newly[member_id].append(tp)
    found = []
    for tp, owner in sorted(before.items()):
        holder = now[tp]
        if holder == owner:
            continue
        lag = snapshot.lag_of(*tp)
        if count[holder] == count[owner] + 1 and fits(owner, holder, lag):
            found.append(f"{tp} back to {owner} from {holder}")
        found += [
            f"{tp} back to {owner} for {other} to {holder}"
            for other in newly[owner]
            if other[0] in snapshot.members[holder]
            and fits(owner, holder, lag - snapshot.lag_of(*other))
        ]
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--groups", type=int, default=200, help="random groups (default 200)")
    parser.add_argument("--seed", type=int, default=34, help="random seed (default 34)")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    cases = [large_group(rng) for _ in range(args.groups)]
    print("| strategy | groups | balance broken (fresh / re-plan) | give-back left |")
    print("|---|---:|---:|---:|")
    for strategy in ("fair", "sticky", "lag"):
        fresh = replan = left = 0
        for snapshot, previous in cases:
            result = plan(strategy, snapshot, previous)
            fresh += bool(kafka_unbalanced(snapshot, plan(strategy, snapshot)))
            replan += bool(kafka_unbalanced(snapshot, result))
            if strategy != "fair":
                left += bool(give_backs(snapshot, previous, result, with_lag=strategy == "lag"))
        cell = "-" if strategy == "fair" else str(left)
        print(f"| {strategy} | {len(cases)} | {fresh} / {replan} | {cell} |")


if __name__ == "__main__":
    main()
