"""``lag``: KAFKA-5337's lag-aware assignor, count-balanced over each member's total.

The rules, in order (where they conflict, the earlier one wins):

1. Count balance over each member's total, as ``fair`` and ``sticky`` have it: no
   chain of moves takes a partition from a member holding ``a`` to one holding
   ``a - 2`` or fewer. That holds Kafka's rule for its sticky assignors (no consumer
   with 2+ fewer partitions than another can get one of that other's transferred to
   it), and members sharing one subscription differ by at most one. A caught-up group
   that scales out gives the new member its share.
2. Lag balance: the smallest busiest-member lag the planner finds. It deals every
   partition heaviest first, in rounds of one partition per subscriber of a topic,
   heaviest round first, to the lightest subscriber whose count is still under its
   count-optimal share; then it relieves the busiest member by the best swap (any two
   partitions each side can read) or transfer (to a member holding one fewer: the two
   counts trade places, so the plan stays as balanced) until none helps.
3. Fewest moves. With a previous plan the planner also starts from ``sticky``'s plan
   (previous owners keep all that count balance allows) with the partitions it has to
   move re-dealt by lag, and improves that. A previous owner loses partitions beyond
   that only when another plan lowers the busiest member's lag by more than
   ``min_improvement`` (a fraction, default :data:`MIN_IMPROVEMENT`); among the plans
   within that margin of the best, the one that moves fewest wins, and every moved
   partition that can go back to its previous owner without changing the counts or
   raising the busiest member's lag goes back.

Stability. Lag read twice a second apart differs by a few percent, and every moved
partition costs a revoke, a commit, a re-fetch and often a KIP-333 catch-up, hence
the margin; ``min_improvement=0`` always takes the lowest busiest lag found.

Lag is end offset minus committed offset; without a commit, ``auto.offset.reset``
decides (latest: 0, earliest: end minus log start). The runtime computes it; the
planner only reads numbers.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections import Counter
from collections.abc import Mapping

from fairstream.assign.fair import balance, even_counts
from fairstream.assign.layout import Caps, Layout, Owners, Quotas, Step, deal
from fairstream.assign.model import Assignment, GroupSnapshot, TopicPartition
from fairstream.assign.sticky import give_back, still_valid
from fairstream.errors import ConfigError

__all__ = ["MIN_IMPROVEMENT", "plan"]

MIN_IMPROVEMENT = 0.1
"""Default margin a new plan must win by. Measured in ``benchmarks/assign_bench.py``:
lag noise of +/-5% between two rebalances then moves almost nothing instead of a
fifth of all partitions, and a kept plan is never more than 1 / (1 - 0.1) = 1.11x
the best one found."""

_RELIEF_BUDGET = 200_000
"""Partitions examined while improving one plan: keeps large groups fast, and is far
more than small groups (where improvement matters most) ever use."""

_SEARCH_LIMIT = 20_000
"""Partitions up to which the planner improves more starts: ``fair``'s or ``sticky``'s
plan, and a deal stranded by mixed subscriptions once chains restore its counts."""


def plan(
    snapshot: GroupSnapshot,
    previous: Assignment | None = None,
    *,
    min_improvement: float = MIN_IMPROVEMENT,
) -> Assignment:
    """Count balance over members, then the smallest busiest-member lag found, then the
    fewest moves from ``previous`` (a move must win by more than ``min_improvement``).

    :raises ConfigError: ``min_improvement`` is not in [0, 1).
    """
    if not 0 <= min_improvement < 1:
        raise ConfigError(
            "min_improvement", min_improvement, "must be at least 0 and below 1", "e.g. 0.1"
        )
    readers = snapshot.subscribers()
    members = list(snapshot.members)
    lags = {topic: snapshot.topic_lags(topic) for topic in readers}
    before = previous.owner_map() if previous is not None else {}
    kept = still_valid(snapshot, previous)
    # ``fair``'s plan, or with a previous one ``sticky``'s: count-optimal, and a
    # candidate itself, so ``lag`` never has a busier member than they have.
    balanced = balance(snapshot, kept, readers)
    give_back(snapshot, balanced, kept)
    candidates = [Layout.of(members, lags, balanced)]
    steps: list[Step] = []
    start = candidates[0]
    # Relief is a local search, and where it starts matters, with mixed subscriptions
    # most: small groups try every start, large ones (where time counts) a re-plan
    # only from the previous plan.
    small = sum(len(values) for values in lags.values()) <= _SEARCH_LIMIT
    if previous is not None:
        start = _redealt(snapshot.members, readers, lags, kept, start)
        candidates.append(_improve(start.copy(), snapshot.members, steps))
    if previous is None or small:
        for dealt in _dealt(snapshot, readers, lags, balanced, repair=small):
            candidates.append(_improve(dealt, snapshot.members))
    if small:
        candidates.append(_improve(candidates[0].copy(), snapshot.members))
    lowest = min(candidate.worst() for candidate in candidates)
    if previous is not None:
        # The re-plan relieved one step at a time only until it is within the margin
        # of the best: the fewest moves that are good enough. It is a prefix of the
        # first candidate's path, so it is replayed, not searched again.
        gentle = start.copy()
        for step in steps:
            if gentle.worst() * (1 - min_improvement) <= lowest:
                break
            gentle.apply(step)
        candidates.append(gentle)
    # Integer lags: compare without rounding. A plan is good enough when the best
    # one does not beat it by more than the margin.
    close = [c for c in candidates if c.worst() * (1 - min_improvement) <= lowest]
    chosen = min(
        enumerate(close),
        key=lambda c: (c[1].moves(before), c[1].worst(), c[0]),
    )[1]
    if kept:
        give_back(snapshot, chosen.owners, kept, cap=chosen.worst())
    return Assignment.from_owners(snapshot.members, chosen.owners)


def _dealt(
    snapshot: GroupSnapshot,
    readers: dict[str, list[str]],
    lags: dict[str, tuple[int, ...]],
    balanced: Owners,
    *,
    repair: bool,
) -> list[Layout]:
    """A fresh plan: everything dealt by lag under the count-optimal shares of ``balanced``.

    Members with one subscription share their shares freely. With mixed subscriptions
    that deal can strand a member whose topics others filled up first; then each
    member is dealt exactly as many partitions of each topic as ``balanced`` gives it,
    and with ``repair`` the stranded deal is a second start once chains (moving the
    lightest partitions, dealt last) restore its counts.
    """
    members = list(snapshot.members)
    counts = Counter(m for owners in balanced.values() for m in owners)
    layout = Layout(members, lags)
    subscriptions = {m: frozenset(topics) for m, topics in snapshot.members.items()}
    caps = Caps(subscriptions, {m: counts[m] for m in members}, layout.count)
    loose = {topic: list(range(len(values))) for topic, values in lags.items()}
    # In a large group of mixed subscriptions that deal nearly always strands someone:
    # skip it there.
    if (repair or len(caps.low) == 1) and deal(layout, snapshot.members, readers, loose, caps):
        return [layout]
    starts = [Layout(members, lags)]
    deal(starts[0], snapshot.members, readers, loose, Quotas(balanced))
    if repair:
        even_counts(snapshot, readers, layout.held, layout.count)
        owners = {topic: [""] * len(values) for topic, values in lags.items()}
        for member_id, topics in layout.held.items():
            for topic, partitions in topics.items():
                for partition in partitions:
                    owners[topic][partition] = member_id
        starts.append(Layout.of(members, lags, owners))
    return starts


def _redealt(
    subscriptions: Mapping[str, frozenset[str]],
    readers: dict[str, list[str]],
    lags: dict[str, tuple[int, ...]],
    kept: Mapping[TopicPartition, str],
    settled: Layout,
) -> Layout:
    """``sticky``'s plan with the partitions it does not leave in place re-dealt by lag.

    Each member is dealt as many as ``sticky`` gives it, so counts and moves stay;
    where mixed subscriptions strand the deal, ``sticky``'s plan stays as it is.
    """
    layout = Layout(list(settled.count), lags)
    loose: dict[str, list[int]] = {}
    for topic, topic_owners in settled.owners.items():
        for partition, member_id in enumerate(topic_owners):
            if kept.get((topic, partition)) == member_id:
                layout.give(topic, partition, member_id)
            else:
                loose.setdefault(topic, []).append(partition)
    caps = Caps({m: m for m in settled.count}, settled.count, layout.count)
    return layout if deal(layout, subscriptions, readers, loose, caps) else settled


def _improve(
    layout: Layout,
    subscriptions: Mapping[str, frozenset[str]],
    steps: list[Step] | None = None,
    *,
    budget: int = _RELIEF_BUDGET,
) -> Layout:
    """Relieve the busiest member, one best swap or transfer at a time, until none
    helps or ``budget`` partitions were examined; each step taken goes to ``steps``."""
    total, count = layout.total, layout.count
    # Members by (total lag, member_id): the busiest last, the lightest first.
    order = sorted((lag, m) for m, lag in total.items())
    while budget > 0 and order:
        giver = order[-1][1]
        for lag, taker in order:
            if lag >= total[giver]:
                return layout
            budget -= count[giver] + count[taker]
            step = _relief(layout, giver, taker, subscriptions)
            if step is not None:
                for member_id in (giver, taker):
                    del order[bisect_left(order, (total[member_id], member_id))]
                layout.apply(step)
                for member_id in (giver, taker):
                    insort(order, (total[member_id], member_id))
                if steps is not None:
                    steps.append(step)
                break
            if budget <= 0:
                return layout
        else:
            return layout
    return layout


def _relief(
    layout: Layout, giver: str, taker: str, subscriptions: Mapping[str, frozenset[str]]
) -> Step | None:
    """The swap or transfer that best evens ``giver`` and ``taker``, if one helps.

    Moving lag ``d`` from giver to taker lowers the pair's maximum exactly when
    ``0 < d < gap``; the best ``d`` is the one nearest ``gap / 2``. A swap keeps both
    counts; a transfer only goes to a member holding one fewer, so the two counts
    trade places and count balance holds.
    """
    gap = layout.total[giver] - layout.total[taker]
    lags = layout.lags
    mine_readable, theirs_readable = subscriptions[giver], subscriptions[taker]
    theirs = sorted(
        (lags[topic][p], topic, p)
        for topic, partitions in layout.held[taker].items()
        if topic in mine_readable
        for p in partitions
    )
    values = [value for value, _, _ in theirs]
    transfer = layout.count[giver] == layout.count[taker] + 1
    best: tuple[int, str, int, str, int] | None = None  # (|2d - gap|, topic, given, back)
    for topic, mine in layout.held[giver].items():
        if topic not in theirs_readable:
            continue
        for partition in mine:
            lag = lags[topic][partition]
            if transfer and 0 < lag < gap:
                option = (abs(2 * lag - gap), topic, partition, "", -1)
                best = option if best is None or option < best else best
            # The swap partner nearest lag - gap/2 is the best one; it helps only
            # if it also lies inside (lag - gap, lag).
            index = bisect_left(values, lag - gap / 2)
            for value, back_topic, back in theirs[max(index - 1, 0) : index + 1]:
                d = lag - value
                if 0 < d < gap:
                    option = (abs(2 * d - gap), topic, partition, back_topic, back)
                    best = option if best is None or option < best else best
    if best is None:
        return None
    _, topic, given, back_topic, returned = best
    return (topic, given, taker, back_topic, returned)
