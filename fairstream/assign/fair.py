"""``fair``: KIP-49's count-balanced assignment, made count-optimal.

KIP-49 hands out the most constrained partitions first (topics with the fewest
subscribers), each to the subscriber holding the fewest partitions, ties going to
the member with the fewest partitions still open to it (the most constrained
consumer), then to the smaller member_id. That greedy reproduces the KIP's example
but is not always optimal under heterogeneous subscriptions, so
:func:`balance` then follows chains of moves (each partition to another subscriber
of its topic) from the fullest members to emptier ones until no chain can take
load from a member holding ``a`` partitions to one holding ``a - 2`` or fewer.
That condition is what makes an assignment count-optimal: it minimises the
largest load, and the sum of squares, over all valid assignments. With partitions
to keep (``sticky``) the chains first move only newly placed ones, so a kept
partition moves only when no count-optimal plan can keep it.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Mapping

from fairstream.assign.model import Assignment, GroupSnapshot, TopicPartition

__all__ = ["balance", "even_counts", "plan"]

Held = dict[str, dict[str, list[int]]]
"""member_id -> topic -> partitions it holds, in the order they were given."""

Pinned = Mapping[str, Mapping[str, int]]
"""member_id -> topic -> how many of the first partitions it holds may not move."""


def plan(snapshot: GroupSnapshot, previous: Assignment | None = None) -> Assignment:
    """Count-optimal plan from scratch; ``previous`` is ignored (see ``sticky``)."""
    return Assignment.from_owners(snapshot.members, balance(snapshot, {}))


def balance(
    snapshot: GroupSnapshot,
    kept: Mapping[TopicPartition, str],
    readers: dict[str, list[str]] | None = None,
) -> dict[str, list[str]]:
    """Topic -> owner per partition: ``kept`` stays where possible, the rest is filled in.

    Every partition of ``kept`` must be valid for its member (present, subscribed);
    a kept partition only moves when a count-optimal plan cannot do without it.
    ``readers`` is ``snapshot.subscribers()``, for a caller that has it already.
    """
    if readers is None:
        readers = snapshot.subscribers()
    load = dict.fromkeys(sorted(snapshot.members), 0)
    held: Held = {member_id: {} for member_id in load}
    for (topic, partition), member_id in sorted(kept.items()):
        held[member_id].setdefault(topic, []).append(partition)
        load[member_id] += 1
    # Kept partitions lead each list and every move takes from a list's end, so
    # pinning a prefix pins exactly them.
    pinned = {m: {t: len(ps) for t, ps in topics.items()} for m, topics in held.items()}
    _fill(snapshot, readers, held, load)
    # First balance moving newly placed partitions only, then, if a chain is left,
    # anything. The first pass ends count-optimal given ``kept``, so the second
    # moves a kept partition only when no count-optimal plan keeps them all; a
    # cooperative second round relies on that (its first plan kept them all).
    for fixed in (pinned, {}):
        _level_off(snapshot, held, load, fixed)
        _even_out(snapshot, readers, held, load, fixed)
    owners = {topic: [""] * snapshot.partitions[topic] for topic in readers}
    for member_id, topics in held.items():
        for topic, partitions in topics.items():
            for partition in partitions:
                owners[topic][partition] = member_id
    return owners


def even_counts(
    snapshot: GroupSnapshot, readers: dict[str, list[str]], held: Held, load: dict[str, int]
) -> None:
    """Make ``held`` count-optimal, moving the partitions each member was given last first."""
    _level_off(snapshot, held, load, {})
    _even_out(snapshot, readers, held, load, {})


def _fill(
    snapshot: GroupSnapshot, readers: dict[str, list[str]], held: Held, load: dict[str, int]
) -> None:
    """KIP-49's greedy for every partition nobody holds yet."""
    taken = {(t, p) for topics in held.values() for t, ps in topics.items() for p in ps}
    free = {
        topic: [p for p in range(snapshot.partitions[topic]) if (topic, p) not in taken]
        for topic in readers
    }
    # Partitions each member could still be given; shrinks as topics are done.
    open_to = {m: sum(len(free[t]) for t in snapshot.members[m]) for m in load}
    for topic in sorted(readers, key=lambda t: (len(readers[t]), t)):
        if not free[topic]:
            continue
        # Within one topic every reader's open count drops by the same amount, so
        # the value at the topic's start orders them correctly throughout.
        heap = [(load[m], open_to[m], m) for m in readers[topic]]
        heapq.heapify(heap)
        for partition in free[topic]:
            count, still_open, member_id = heap[0]
            heapq.heapreplace(heap, (count + 1, still_open, member_id))
            held[member_id].setdefault(topic, []).append(partition)
            load[member_id] = count + 1
        for member_id in readers[topic]:
            open_to[member_id] -= len(free[topic])


def _level_off(snapshot: GroupSnapshot, held: Held, load: dict[str, int], fixed: Pinned) -> None:
    """Direct bulk moves from members above the average load to members below it.

    A cheap first pass for a lopsided start (a sticky plan after many members
    joined): a giver never drops below the rounded-up average nor a taker rises
    above the rounded-down one, so nothing overshoots. The chains that follow
    make the result count-optimal.
    """
    if not load:
        return
    floor, rest = divmod(sum(load.values()), len(load))
    ceiling = floor + (rest > 0)
    hungry = [m for m, n in load.items() if n < floor]
    for giver in [m for m, n in load.items() if n > ceiling]:
        for taker in hungry:
            want = min(load[giver] - ceiling, floor - load[taker])
            if want > 0:
                moved = _spread(held, fixed, giver, taker, snapshot.members[taker], want)
                load[giver] -= moved
                load[taker] += moved
        hungry = [m for m in hungry if load[m] < floor]


def _even_out(
    snapshot: GroupSnapshot,
    readers: dict[str, list[str]],
    held: Held,
    load: dict[str, int],
    fixed: Pinned,
) -> None:
    """Move partitions along chains until no chain goes from ``a`` to ``a - 2`` or less.

    Levels are settled from the top: when nothing at the highest open load ``a``
    reaches a member below ``a - 1``, every member it reaches is final, because a
    later chain from a lower level could only end inside that set at a load it
    is not allowed to raise.
    """
    subscriptions = snapshot.members
    settled: set[str] = set()
    while len(settled) < len(load):
        top = max(n for m, n in load.items() if m not in settled)
        sources = [m for m, n in load.items() if n == top and m not in settled]
        found = _find_chain(sources, top, readers, held, load, settled, fixed)
        if isinstance(found, set):
            settled |= found
            continue
        source, sink = found[0][0], found[-1][2]
        # Halve the gap, but never push the source below the next level down: a
        # source that sank under others would have to take partitions back.
        below = max(n for m, n in load.items() if n < top and m not in settled)
        amount = min((top - load[sink]) // 2, top - below)
        if len(found) == 1:
            # A direct move may take from every topic the two share, in one go.
            amount = _spread(held, fixed, source, sink, subscriptions[sink], amount)
        else:
            amount = min(amount, *(_spare(held, fixed, giver, topic) for giver, topic, _ in found))
            for giver, topic, taker in found:
                _shift(held, giver, topic, taker, amount)
        load[source] -= amount
        load[sink] += amount


def _spread(
    held: Held, fixed: Pinned, giver: str, taker: str, readable: frozenset[str], limit: int
) -> int:
    """Move up to ``limit`` partitions the taker can read, one topic at a time; say how many.

    Each partition comes from the topic where the giver holds the most more than the
    taker, so a joiner of a group reading two 12-partition topics gets 6 of each, as
    Kafka's sticky assignor gives it, not 12 of one: equal counts, equal moves, and
    every topic spread across its readers.
    """
    mine, theirs = held[giver], held[taker]
    heap = [
        (len(theirs.get(t, ())) - len(mine[t]), t)
        for t in sorted(mine.keys() & readable)
        if _spare(held, fixed, giver, t) > 0
    ]
    heapq.heapify(heap)
    moved = 0
    while heap and moved < limit:
        difference, topic = heap[0]
        _shift(held, giver, topic, taker, 1)
        moved += 1
        if _spare(held, fixed, giver, topic) > 0:
            heapq.heapreplace(heap, (difference + 2, topic))
        else:
            heapq.heappop(heap)
    return moved


def _spare(held: Held, fixed: Pinned, member_id: str, topic: str) -> int:
    """How many of ``member_id``'s partitions of ``topic`` may move."""
    return len(held[member_id].get(topic, ())) - fixed.get(member_id, {}).get(topic, 0)


def _shift(held: Held, giver: str, topic: str, taker: str, limit: int) -> int:
    """Move up to ``limit`` of giver's partitions of ``topic``, newest first; say how many."""
    if limit <= 0:
        return 0
    partitions = held[giver][topic]
    moving = partitions[-limit:]
    del partitions[-limit:]
    if not partitions:
        del held[giver][topic]
    held[taker].setdefault(topic, []).extend(moving)
    return len(moving)


def _find_chain(
    sources: list[str],
    top: int,
    readers: dict[str, list[str]],
    held: Held,
    load: dict[str, int],
    settled: set[str],
    fixed: Pinned,
) -> list[tuple[str, str, str]] | set[str]:
    """The shortest chain of ``(giver, topic, taker)`` moves, or every member reached."""
    parent: dict[str, tuple[str, str] | None] = dict.fromkeys(sources)
    queue = deque(sources)
    seen_topics: set[str] = set()
    while queue:
        giver = queue.popleft()
        for topic in sorted(held[giver]):
            if topic in seen_topics or not _spare(held, fixed, giver, topic):
                continue
            seen_topics.add(topic)
            for taker in readers[topic]:
                if taker in parent or taker in settled:
                    continue
                parent[taker] = (giver, topic)
                if load[taker] <= top - 2:
                    return _chain_to(taker, parent)
                queue.append(taker)
    return set(parent)


def _chain_to(sink: str, parent: dict[str, tuple[str, str] | None]) -> list[tuple[str, str, str]]:
    chain: list[tuple[str, str, str]] = []
    taker = sink
    step = parent[taker]
    while step is not None:
        giver, topic = step
        chain.append((giver, topic, taker))
        taker = giver
        step = parent[taker]
    chain.reverse()
    return chain
