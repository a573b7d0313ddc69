"""``lag``: KAFKA-5337's lag-aware assignor, balanced across topics.

The seed keeps each topic's partitions spread evenly over that topic's
subscribers (per-topic count spread <= 1) and, within that rule, hands heavy
partitions to light members. It balances each topic on its own, though, so topic
after topic gives its heaviest partition to the same member. This planner keeps
the rule but minimises the largest *total* lag of any member across all topics:

1. deal each topic in rounds of one partition per subscriber, heaviest first,
   and play all rounds of all topics heaviest-round first, each round matching
   its heaviest partition with the currently lightest member;
2. relieve the heaviest member by the best single swap (same topic) or transfer
   (to a subscriber holding one partition fewer of that topic) until none helps;
3. with a previous plan, also start from it (trimmed to the rule) and improve, so
   equal lags leave partitions where they were;
4. also run the seed's own per-topic greedy, and return the best of these plans
   by (largest member lag, partitions moved): never worse than the seed.

Stability. Lag read twice a second apart differs by a few percent, and every moved
partition costs a revoke, a commit, a re-fetch and often a KIP-333 catch-up. So with
a previous plan, the previous owners keep their partitions (only what count balance
needs moves: a leaver's partitions, a joiner's share) unless another plan lowers the
busiest member's lag by more than ``min_improvement`` (a fraction, default
:data:`MIN_IMPROVEMENT`); among the plans within that margin of the best, the one
that moves fewest partitions wins. ``min_improvement=0`` always takes the lowest
busiest lag, as the planner did before it had the setting.

Lag is end offset minus committed offset; without a commit, ``auto.offset.reset``
decides (latest: 0, earliest: end minus log start). The runtime computes it; the
planner only reads numbers.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left
from collections.abc import Mapping, Sequence

from fairstream.assign.model import Assignment, GroupSnapshot, TopicPartition
from fairstream.errors import ConfigError

__all__ = ["MIN_IMPROVEMENT", "plan"]

MIN_IMPROVEMENT = 0.1
"""Default margin a new plan must win by. Measured in ``benchmarks/assign_bench.py``:
lag noise of +/-5% between two rebalances then moves ~1% of partitions instead of a
third, and a kept plan is never more than 1 / (1 - 0.1) = 1.11x the best one found."""

_RELIEF_BUDGET = 150_000
"""(member, topic) holdings examined while improving one plan: keeps large groups fast,
and is far more than small groups (where improvement matters most) ever use."""


_Step = tuple[str, int, str, int]
"""One relief step: (topic, partition given, taker, partition returned or -1)."""


class _Layout:
    """A plan being built: owners per partition, partitions and total lag per member."""

    __slots__ = ("count", "held", "lags", "owners", "total")

    def __init__(self, members: Sequence[str], lags: Mapping[str, tuple[int, ...]]) -> None:
        self.lags = lags
        self.owners = {topic: [""] * len(values) for topic, values in lags.items()}
        self.total = dict.fromkeys(sorted(members), 0)
        self.count = dict.fromkeys(self.total, 0)
        self.held: dict[str, dict[str, list[int]]] = {member_id: {} for member_id in self.total}

    def give(self, topic: str, partition: int, member_id: str) -> None:
        self.owners[topic][partition] = member_id
        self.held[member_id].setdefault(topic, []).append(partition)
        self.total[member_id] += self.lags[topic][partition]
        self.count[member_id] += 1

    def take(self, topic: str, partition: int) -> None:
        member_id = self.owners[topic][partition]
        self.held[member_id][topic].remove(partition)
        self.total[member_id] -= self.lags[topic][partition]
        self.count[member_id] -= 1

    def apply(self, step: _Step) -> None:
        """Move ``given`` to ``taker`` and, for a swap, ``returned`` back to its giver."""
        topic, given, taker, returned = step
        giver = self.owners[topic][given]
        self.take(topic, given)
        self.give(topic, given, taker)
        if returned >= 0:
            self.take(topic, returned)
            self.give(topic, returned, giver)

    def worst(self) -> int:
        return max(self.total.values(), default=0)

    def spread(self) -> int:
        return max(self.count.values(), default=0) - min(self.count.values(), default=0)

    def moves(self, before: Mapping[TopicPartition, str]) -> int:
        return sum(
            1
            for (topic, partition), member_id in before.items()
            if topic in self.owners
            and partition < len(self.owners[topic])
            and self.owners[topic][partition] != member_id
        )


def plan(
    snapshot: GroupSnapshot,
    previous: Assignment | None = None,
    *,
    min_improvement: float = MIN_IMPROVEMENT,
) -> Assignment:
    """Per-topic count spread <= 1, then the smallest largest member lag we can find,
    moving partitions away from ``previous`` owners only for a gain above ``min_improvement``.

    :raises ConfigError: ``min_improvement`` is not in [0, 1).
    """
    if not 0 <= min_improvement < 1:
        raise ConfigError(
            "min_improvement", min_improvement, "must be at least 0 and below 1", "e.g. 0.1"
        )
    readers = snapshot.subscribers()
    lags = {topic: snapshot.topic_lags(topic) for topic in readers}
    before = previous.owner_map() if previous is not None else {}
    candidates: list[_Layout] = []
    steps: list[_Step] = []
    if previous is not None:
        candidates.append(
            _improve(_from_previous(snapshot, readers, lags, before), snapshot.members, steps)
        )
    candidates.append(_improve(_by_rounds(snapshot, readers, lags), snapshot.members))
    candidates.append(_per_topic_greedy(snapshot, readers, lags))
    lowest = min(candidate.worst() for candidate in candidates)
    if previous is not None:
        # The previous owners, relieved one step at a time only until the plan is
        # within the margin of the best: the fewest moves that are good enough. It is
        # a prefix of the first candidate's path, so it is replayed, not searched again.
        gentle = _from_previous(snapshot, readers, lags, before)
        for step in steps:
            if gentle.worst() * (1 - min_improvement) <= lowest:
                break
            gentle.apply(step)
        candidates.append(gentle)
    # Integer lags: compare without rounding. A plan is good enough when the best
    # one does not beat it by more than the margin.
    close = [c for c in candidates if c.worst() * (1 - min_improvement) <= lowest]
    best = min(
        range(len(close)),
        key=lambda i: (close[i].moves(before), close[i].worst(), close[i].spread(), i),
    )
    return Assignment.from_owners(snapshot.members, close[best].owners)


def _heaviest_first(lags: Sequence[int]) -> list[int]:
    return sorted(range(len(lags)), key=lambda partition: (-lags[partition], partition))


def _by_rounds(
    snapshot: GroupSnapshot, readers: dict[str, list[str]], lags: dict[str, tuple[int, ...]]
) -> _Layout:
    """Step 1: every topic dealt one partition per subscriber a round, heaviest rounds first."""
    layout = _Layout(list(snapshot.members), lags)
    rounds: list[tuple[int, str, int, list[int]]] = []
    for topic, topic_readers in readers.items():
        order = _heaviest_first(lags[topic])
        for start in range(0, len(order), len(topic_readers)):
            chunk = order[start : start + len(topic_readers)]
            rounds.append((-lags[topic][chunk[0]], topic, start, chunk))
    rounds.sort(key=lambda r: r[:3])
    total, count = layout.total, layout.count
    for _, topic, _, chunk in rounds:
        # Equal lags (a quiet group) fall back to balancing partition counts.
        takers = heapq.nsmallest(len(chunk), readers[topic], key=lambda m: (total[m], count[m], m))
        for partition, member_id in zip(chunk, takers, strict=True):
            layout.give(topic, partition, member_id)
    return layout


def _per_topic_greedy(
    snapshot: GroupSnapshot, readers: dict[str, list[str]], lags: dict[str, tuple[int, ...]]
) -> _Layout:
    """The seed's algorithm: per topic, heaviest partition to (fewest, least lag) reader."""
    layout = _Layout(list(snapshot.members), lags)
    for topic, topic_readers in readers.items():
        heap = [(0, 0, member_id) for member_id in topic_readers]
        for partition in _heaviest_first(lags[topic]):
            count, amount, member_id = heap[0]
            heapq.heapreplace(heap, (count + 1, amount + lags[topic][partition], member_id))
            layout.give(topic, partition, member_id)
    return layout


def _from_previous(
    snapshot: GroupSnapshot,
    readers: dict[str, list[str]],
    lags: dict[str, tuple[int, ...]],
    before: Mapping[TopicPartition, str],
) -> _Layout:
    """Step 3: previous owners keep what the per-topic rule allows; the rest is filled in."""
    layout = _Layout(list(snapshot.members), lags)
    free: dict[str, list[int]] = {}
    for topic, topic_readers in readers.items():
        share, extra = divmod(len(lags[topic]), len(topic_readers))
        kept: dict[str, list[int]] = {}
        for partition in range(len(lags[topic])):
            owner = before.get((topic, partition))
            if owner is not None and topic in snapshot.members.get(owner, ()):
                kept.setdefault(owner, []).append(partition)
        for member_id in sorted(kept):
            allowed = share + 1 if extra and len(kept[member_id]) > share else share
            extra -= allowed > share
            for partition in kept[member_id][:allowed]:
                layout.give(topic, partition, member_id)
        free[topic] = [p for p in _heaviest_first(lags[topic]) if not layout.owners[topic][p]]
    for topic in sorted(free, key=lambda t: (-max((lags[t][p] for p in free[t]), default=0), t)):
        if free[topic]:
            _fill_topic(layout, topic, readers[topic], free[topic])
    return layout


def _fill_topic(layout: _Layout, topic: str, readers: list[str], free: list[int]) -> None:
    """Give ``free`` (heaviest first) to the lightest readers the per-topic rule allows."""
    share, extra = divmod(len(layout.owners[topic]), len(readers))
    in_topic = {m: len(layout.held[m].get(topic, ())) for m in readers}
    extra -= sum(1 for m in readers if in_topic[m] > share)
    heap = [
        (layout.total[m], layout.count[m], m) for m in readers if in_topic[m] < share + (extra > 0)
    ]
    heapq.heapify(heap)
    for partition in free:
        while in_topic[heap[0][2]] >= share + (extra > 0):
            heapq.heappop(heap)
        member_id = heapq.heappop(heap)[2]
        layout.give(topic, partition, member_id)
        in_topic[member_id] += 1
        extra -= in_topic[member_id] > share
        heapq.heappush(heap, (layout.total[member_id], layout.count[member_id], member_id))


def _improve(
    layout: _Layout, subscriptions: Mapping[str, frozenset[str]], steps: list[_Step] | None = None
) -> _Layout:
    """Step 2: relieve the heaviest member, one best swap or transfer at a time;
    each step taken is appended to ``steps``."""
    total = layout.total
    budget = _RELIEF_BUDGET
    while budget > 0 and total:
        giver = max(total, key=lambda m: (total[m], m))
        lighter = sorted((m for m in total if total[m] < total[giver]), key=lambda m: (total[m], m))
        budget -= len(lighter) // 8  # sorting costs about that many holdings' worth
        for taker in lighter:
            budget -= len(layout.held[giver])
            step = _relief(layout, giver, taker, subscriptions)
            if step is not None:
                layout.apply(step)
                if steps is not None:
                    steps.append(step)
                break
            if budget <= 0:
                return layout
        else:
            break
    return layout


def _relief(
    layout: _Layout, giver: str, taker: str, subscriptions: Mapping[str, frozenset[str]]
) -> _Step | None:
    """The swap or transfer that best evens ``giver`` and ``taker``, if one helps.

    Moving lag ``d`` from giver to taker lowers the pair's maximum exactly when
    ``0 < d < gap``; the best ``d`` is the one nearest ``gap / 2``.
    """
    gap = layout.total[giver] - layout.total[taker]
    options: list[tuple[int, str, int, int]] = []  # (|2d - gap|, topic, given, returned)
    for topic, mine in sorted(layout.held[giver].items()):
        if not mine or topic not in subscriptions[taker]:
            continue
        lags = layout.lags[topic]
        theirs = sorted(layout.held[taker].get(topic, ()), key=lambda p: (lags[p], p))
        values = [lags[p] for p in theirs]
        for partition in mine:
            lag = lags[partition]
            if len(mine) > len(theirs) and 0 < lag < gap:
                options.append((abs(2 * lag - gap), topic, partition, -1))
            # The swap partner nearest lag - gap/2 is the best one; it helps only
            # if it also lies inside (lag - gap, lag).
            index = bisect_left(values, lag - gap / 2)
            for near in theirs[max(index - 1, 0) : index + 1]:
                d = lag - lags[near]
                if 0 < d < gap:
                    options.append((abs(2 * d - gap), topic, partition, near))
    if not options:
        return None
    _, topic, given, returned = min(options)
    return (topic, given, taker, returned)
