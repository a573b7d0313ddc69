"""What ``lag`` builds plans on: a plan in the making, and a heaviest-first deal.

:class:`Layout` keeps each member's partitions and total lag up to date as partitions
change hands; :func:`deal` hands out partitions heaviest first under the count caps
of :class:`Caps` (a count-optimal share per member, shared within a subscription) or
:class:`Quotas` (a share per member and topic, which never strands a partition).
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, insort
from collections import Counter
from collections.abc import Hashable, Mapping, Sequence
from typing import final

from fairstream.assign.model import TopicPartition

__all__ = ["Caps", "Layout", "Owners", "Quotas", "Step", "deal"]

Step = tuple[str, int, str, str, int]
"""One relief step: (topic, partition given, taker, topic and partition returned or -1)."""

Owners = dict[str, list[str]]
"""topic -> owner of each partition."""


@final
class Layout:
    """A plan being built: owners per partition, partitions and total lag per member."""

    __slots__ = ("count", "held", "lags", "owners", "total")

    def __init__(self, members: Sequence[str], lags: Mapping[str, tuple[int, ...]]) -> None:
        self.lags = lags
        self.owners = {topic: [""] * len(values) for topic, values in lags.items()}
        self.total = dict.fromkeys(sorted(members), 0)
        self.count = dict.fromkeys(self.total, 0)
        self.held: dict[str, dict[str, list[int]]] = {member_id: {} for member_id in self.total}

    @classmethod
    def of(
        cls, members: Sequence[str], lags: Mapping[str, tuple[int, ...]], owners: Owners
    ) -> Layout:
        layout = cls(members, lags)
        for topic, topic_owners in owners.items():
            for partition, member_id in enumerate(topic_owners):
                layout.give(topic, partition, member_id)
        return layout

    def copy(self) -> Layout:
        twin = Layout.__new__(Layout)
        twin.lags = self.lags
        twin.owners = {topic: list(owners) for topic, owners in self.owners.items()}
        twin.total = dict(self.total)
        twin.count = dict(self.count)
        twin.held = {
            m: {t: list(ps) for t, ps in topics.items()} for m, topics in self.held.items()
        }
        return twin

    def give(self, topic: str, partition: int, member_id: str) -> None:
        self.owners[topic][partition] = member_id
        self.held[member_id].setdefault(topic, []).append(partition)
        self.total[member_id] += self.lags[topic][partition]
        self.count[member_id] += 1

    def take(self, topic: str, partition: int) -> None:
        member_id = self.owners[topic][partition]
        self.held[member_id][topic].remove(partition)
        if not self.held[member_id][topic]:
            del self.held[member_id][topic]
        self.total[member_id] -= self.lags[topic][partition]
        self.count[member_id] -= 1

    def apply(self, step: Step) -> None:
        """Move ``given`` to ``taker`` and, for a swap, ``returned`` back to its giver."""
        topic, given, taker, back_topic, returned = step
        giver = self.owners[topic][given]
        self.take(topic, given)
        self.give(topic, given, taker)
        if returned >= 0:
            self.take(back_topic, returned)
            self.give(back_topic, returned, giver)

    def worst(self) -> int:
        return max(self.total.values(), default=0)

    def moves(self, before: Mapping[TopicPartition, str]) -> int:
        return sum(
            1
            for (topic, partition), member_id in before.items()
            if topic in self.owners
            and partition < len(self.owners[topic])
            and self.owners[topic][partition] != member_id
        )


@final
class Caps:
    """How many partitions each member may still be dealt: its count-optimal share.

    Members are grouped (by subscription for a fresh plan, one each for a re-plan);
    a group's members may hold ``low`` each and ``extra`` of them one more, so the
    heaviest-first deal decides which of them carry the extra one.
    """

    __slots__ = ("count", "extra", "group", "low")

    def __init__(
        self, groups: Mapping[str, Hashable], shares: Mapping[str, int], count: Mapping[str, int]
    ) -> None:
        # Small ints for keys: comparing two equal subscriptions of 1,000 topics is slow.
        ids: dict[Hashable, int] = {}
        self.group = {m: ids.setdefault(key, len(ids)) for m, key in sorted(groups.items())}
        self.count = count
        self.low: dict[int, int] = {}
        self.extra: dict[int, int] = Counter()
        for member_id, key in self.group.items():
            self.low[key] = min(self.low.get(key, shares[member_id]), shares[member_id])
        for member_id, key in self.group.items():
            self.extra[key] += shares[member_id] > self.low[key]

    def open(self, member_id: str, topic: str) -> bool:
        key, held = self.group[member_id], self.count[member_id]
        return held < self.low[key] or (held == self.low[key] and self.extra[key] > 0)

    def pool(self, topic: str) -> None:
        """No short list: the deal walks all open members, lightest first."""
        return None

    def done(self, member_id: str) -> bool:
        """Closed for good: ``extra`` only shrinks."""
        return not self.open(member_id, "")

    def took(self, member_id: str, topic: str) -> None:
        key = self.group[member_id]
        if self.count[member_id] == self.low[key] + 1:
            self.extra[key] -= 1


@final
class Quotas:
    """Per member and topic, what a count-optimal plan gives it: a deal that never sticks."""

    __slots__ = ("holders", "left", "share")

    def __init__(self, owners: Owners) -> None:
        self.holders = {topic: sorted(set(topic_owners)) for topic, topic_owners in owners.items()}
        self.left = Counter(
            (member_id, topic)
            for topic, topic_owners in owners.items()
            for member_id in topic_owners
        )
        self.share = Counter(
            member_id for topic_owners in owners.values() for member_id in topic_owners
        )

    def pool(self, topic: str) -> list[str]:
        """The members with a quota in ``topic``, few beside all open members."""
        return self.holders[topic]

    def open(self, member_id: str, topic: str) -> bool:
        return self.left[(member_id, topic)] > 0

    def done(self, member_id: str) -> bool:
        return self.share[member_id] == 0

    def took(self, member_id: str, topic: str) -> None:
        self.left[(member_id, topic)] -= 1
        self.share[member_id] -= 1


def deal(
    layout: Layout,
    subscriptions: Mapping[str, frozenset[str]],
    readers: Mapping[str, list[str]],
    loose: Mapping[str, list[int]],
    caps: Caps | Quotas,
) -> bool:
    """Deal ``loose`` partitions heaviest first; False when one had to exceed a cap.

    Each topic goes in rounds of one partition per subscriber, the rounds of all
    topics heaviest first, each round's heaviest partition to its lightest open
    subscriber (a subscriber takes a second one only when no other is open). A
    partition no open subscriber can take goes to its lightest subscriber.
    """
    lags, total, count = layout.lags, layout.total, layout.count
    rounds: list[tuple[int, str, int, list[int]]] = []
    for topic, partitions in loose.items():
        order = _heaviest_first(lags[topic], partitions)
        size = len(readers[topic])
        for start in range(0, len(order), size):
            chunk = order[start : start + size]
            rounds.append((-lags[topic][chunk[0]], topic, start, chunk))
    rounds.sort(key=lambda r: r[:3])
    # Open members, lightest first; one that can take nothing more leaves for good.
    ranked = sorted((total[m], count[m], m) for m in count if not caps.done(m))
    within = True
    for _, topic, _, chunk in rounds:
        left = chunk
        while left:
            takers: list[str] = []
            index = len(ranked)
            pool = caps.pool(topic)
            if pool is not None:
                takers = heapq.nsmallest(
                    len(left),
                    (m for m in pool if caps.open(m, topic)),
                    key=lambda m: (total[m], count[m], m),
                )
            else:
                index = 0
            while index < len(ranked) and len(takers) < len(left):
                member_id = ranked[index][2]
                if caps.done(member_id):
                    del ranked[index]
                    continue
                if topic in subscriptions[member_id] and caps.open(member_id, topic):
                    takers.append(member_id)
                index += 1
            forced = not takers
            if forced:
                within = False
                takers = [min(readers[topic], key=lambda m: (total[m], count[m], m))]
            given = 0
            for member_id in takers:
                # Each give may close the group's last extra place on the next taker.
                if not forced and not caps.open(member_id, topic):
                    continue
                entry = (total[member_id], count[member_id], member_id)
                at = bisect_left(ranked, entry)
                if at < len(ranked) and ranked[at] == entry:
                    del ranked[at]
                layout.give(topic, left[given], member_id)
                given += 1
                caps.took(member_id, topic)
                if not caps.done(member_id):
                    insort(ranked, (total[member_id], count[member_id], member_id))
            left = left[given:]
    return within


def _heaviest_first(lags: Sequence[int], partitions: list[int]) -> list[int]:
    return sorted(partitions, key=lambda partition: (-lags[partition], partition))
