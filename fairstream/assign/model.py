"""The planner's plain data: what a group looks like, and who gets which partition.

Everything here is a frozen value checked once in ``__post_init__``, so a strategy
can trust its input and the CLI, the runtime adapters and the Spark pipeline get
the same :class:`~fairstream.errors.PlanError` for the same mistake.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from fairstream.errors import PlanError

__all__ = [
    "Assignment",
    "Assignor",
    "GroupSnapshot",
    "PlanStats",
    "TopicPartition",
    "partition_lag",
]

TopicPartition = tuple[str, int]
"""``(topic, partition)``: plain tuples keep the planner free of aiokafka."""


def _is_count(value: object) -> bool:
    # bool is an int subclass; JSON ``true`` must not pass as a partition count.
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def partition_lag(
    end: int,
    committed: int | None,
    log_start: int,
    auto_offset_reset: Literal["latest", "earliest"],
) -> int:
    """Records a group has still to read in one partition (KAFKA-5337's rule).

    The one definition of lag: the lag assignor's reading, ``fairstream lag`` and
    ``app.stats()`` all call it, so they agree after retention deletes records. A
    committed offset below the log start counts from the log start (the records
    between are gone, nobody will read them). Without a commit, ``auto.offset.reset``
    decides where the group would start: ``latest`` means nothing is behind,
    ``earliest`` means everything retained is.
    """
    if committed is not None:
        return max(end - max(committed, log_start), 0)
    return 0 if auto_offset_reset == "latest" else max(end - log_start, 0)


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupSnapshot:
    """A consumer group at one moment: members, partition counts and lags.

    ``members`` maps member_id to the topics it subscribes to, ``partitions`` a
    topic to its partition count, ``lag`` a topic to one lag per partition (a
    topic missing from ``lag`` has zero lag everywhere). ``instance_ids`` maps the
    member_id of each static member (KIP-345) to its ``group.instance.id``: a static
    member keeps its instance id across restarts, its member id changes, so the
    assignors that deal by order (``range``, ``roundrobin``) order by the instance id
    (:meth:`kafka_order`).

    :raises PlanError: a member subscribes to a topic missing from ``partitions``,
        a count or lag is negative, a lag list has the wrong length, or an instance
        id belongs to no member or to two.
    """

    members: Mapping[str, frozenset[str]]
    partitions: Mapping[str, int]
    lag: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    instance_ids: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for topic, count in self.partitions.items():
            if not _is_count(count):
                raise PlanError(
                    f"topic {topic!r} has partition count {count!r}",
                    where=f"partitions.{topic}",
                    hint="give a whole number >= 0",
                )
        for member_id, topics in self.members.items():
            unknown = sorted(set(topics) - self.partitions.keys())
            if unknown:
                raise PlanError(
                    f"member {member_id!r} subscribes to unknown topic {unknown[0]!r}",
                    where=f"members.{member_id}",
                    hint="add the topic's partition count under 'partitions' or drop it "
                    "from the subscription",
                )
        for topic, lags in self.lag.items():
            _check_lags(topic, lags, self.partitions)
        _check_instance_ids(self.instance_ids, self.members)

    def kafka_order(self, member_ids: Iterable[str]) -> list[str]:
        """``member_ids`` in the order Kafka's range and round-robin assignors deal to.

        Static members first, by instance id, then the others by member id (Kafka's
        ``MemberInfo.compareTo``): a static member that restarts with a new member id
        keeps its place, so it keeps its partitions.
        """
        static = self.instance_ids
        return sorted(
            member_ids,
            key=lambda m: (0, static[m], "") if m in static else (1, "", m),
        )

    def lag_of(self, topic: str, partition: int) -> int:
        """The lag of one partition; zero when the snapshot has no lag for its topic."""
        lags = self.lag.get(topic)
        return lags[partition] if lags else 0

    def subscribers(self) -> dict[str, list[str]]:
        """Topic -> sorted member ids subscribed to it, for every topic someone reads."""
        readers: dict[str, list[str]] = {}
        for member_id in sorted(self.members):
            for topic in self.members[member_id]:
                readers.setdefault(topic, []).append(member_id)
        return {topic: readers[topic] for topic in sorted(readers)}

    def topic_lags(self, topic: str) -> tuple[int, ...]:
        """One lag per partition of ``topic`` (zeros when unknown)."""
        return self.lag.get(topic) or (0,) * self.partitions[topic]


def _check_instance_ids(instance_ids: Mapping[str, str], members: Mapping[str, object]) -> None:
    seen: dict[str, str] = {}
    for member_id, instance_id in sorted(instance_ids.items()):
        where = f"instance_ids.{member_id}"
        if member_id not in members:
            raise PlanError(
                f"instance id {instance_id!r} is given for unknown member {member_id!r}",
                where=where,
                hint="give instance ids only for members listed under 'members'",
            )
        other = seen.setdefault(instance_id, member_id)
        if other != member_id:
            raise PlanError(
                f"instance id {instance_id!r} belongs to both {other!r} and {member_id!r}",
                where=where,
                hint="a group.instance.id names one member at most",
            )


def _check_lags(topic: str, lags: Sequence[int], partitions: Mapping[str, int]) -> None:
    where = f"lag.{topic}"
    if topic not in partitions:
        raise PlanError(
            f"lag is given for unknown topic {topic!r}",
            where=where,
            hint="add the topic's partition count under 'partitions' or drop its lag",
        )
    if len(lags) != partitions[topic]:
        raise PlanError(
            f"lag for topic {topic!r} has {len(lags)} values but the topic has "
            f"{partitions[topic]} partitions",
            where=where,
            hint="give one value per partition",
        )
    for partition, value in enumerate(lags):
        if not _is_count(value):
            raise PlanError(
                f"lag of {topic!r} partition {partition} is {value!r}",
                where=f"{where}[{partition}]",
                hint="a lag is the number of records behind, a whole number >= 0",
            )


@dataclass(frozen=True, slots=True)
class Assignment:
    """Who owns what: member_id -> topic -> sorted partitions.

    Every member of the planned group appears, possibly with no topics. The
    constructor normalises: partitions become sorted tuples, topics with no
    partitions are dropped, so two equal plans compare equal.

    :raises PlanError: a partition is owned by two members (as :meth:`from_json`).
    """

    members: Mapping[str, Mapping[str, tuple[int, ...]]]

    def __post_init__(self) -> None:
        normal = {
            member_id: {
                topic: tuple(sorted(partitions))
                for topic, partitions in sorted(topics.items())
                if partitions
            }
            for member_id, topics in sorted(self.members.items())
        }
        _check_one_owner(normal)
        object.__setattr__(self, "members", normal)

    @classmethod
    def from_owners(cls, members: Iterable[str], owners: Mapping[str, Sequence[str]]) -> Assignment:
        """Build from ``topic -> owner of each partition`` (index = partition)."""
        plan: dict[str, dict[str, list[int]]] = {member_id: {} for member_id in members}
        for topic, topic_owners in owners.items():
            for partition, member_id in enumerate(topic_owners):
                plan[member_id].setdefault(topic, []).append(partition)
        return cls({m: {t: tuple(ps) for t, ps in topics.items()} for m, topics in plan.items()})

    @classmethod
    def from_json(
        cls,
        data: Mapping[str, Mapping[str, Sequence[int]]],
        snapshot: GroupSnapshot | None = None,
        *,
        where: str = "previous",
    ) -> Assignment:
        """Read ``{"c0": {"t1": [0, 2]}}``; with a snapshot, reject partitions it lacks.

        :raises PlanError: a partition is out of range, on an unknown topic, or
            owned by two members.
        """
        for member_id, topics in sorted(data.items()):
            for topic, partitions in sorted(topics.items()):
                key = f"{where}.{member_id}.{topic}"
                if snapshot is not None and topic not in snapshot.partitions:
                    raise PlanError(
                        f"member {member_id!r} owned a partition of unknown topic {topic!r}",
                        where=key,
                        hint="list only topics that appear under 'partitions'",
                    )
                for partition in partitions:
                    _check_owned(key, topic, partition, snapshot)
        _check_one_owner(data, where)
        return cls({m: {t: tuple(ps) for t, ps in ts.items()} for m, ts in data.items()})

    def to_json(self) -> dict[str, dict[str, list[int]]]:
        """Plain JSON data: member -> topic -> sorted partition list (``{}`` when idle)."""
        return {m: {t: list(ps) for t, ps in topics.items()} for m, topics in self.members.items()}

    def owner_map(self) -> dict[TopicPartition, str]:
        """``(topic, partition) -> member_id`` for every assigned partition."""
        return {
            (topic, partition): member_id
            for member_id, topics in self.members.items()
            for topic, partitions in topics.items()
            for partition in partitions
        }

    def count(self, member_id: str) -> int:
        """How many partitions ``member_id`` holds (0 for an unknown member)."""
        return sum(len(ps) for ps in self.members.get(member_id, {}).values())


def _check_one_owner(members: Mapping[str, Mapping[str, Sequence[int]]], where: str = "") -> None:
    """Raise the one error for a partition two members own, whoever builds the plan."""
    per_topic: dict[str, list[int]] = {}
    for topics in members.values():
        for topic, partitions in topics.items():
            per_topic.setdefault(topic, []).extend(partitions)
    if all(len(set(ps)) == len(ps) for ps in per_topic.values()):
        return  # the common case, at C speed: planners build every plan through here
    seen: dict[TopicPartition, str] = {}
    for member_id, topics in sorted(members.items()):
        for topic, partitions in sorted(topics.items()):
            for partition in partitions:
                other = seen.setdefault((topic, partition), member_id)
                if other != member_id:
                    raise PlanError(
                        f"partition {topic}[{partition}] is owned by both {other!r} "
                        f"and {member_id!r}",
                        where=".".join(filter(None, (where, member_id, topic))),
                        hint="give each partition to one member at most",
                    )


def _check_owned(key: str, topic: str, partition: int, snapshot: GroupSnapshot | None) -> None:
    if not _is_count(partition):
        raise PlanError(
            f"partition {partition!r} of topic {topic!r} is not a partition number",
            where=key,
            hint="list whole numbers >= 0",
        )
    if snapshot is not None and partition >= snapshot.partitions[topic]:
        raise PlanError(
            f"partition {topic}[{partition}] does not exist; the topic has "
            f"{snapshot.partitions[topic]} partitions",
            where=key,
            hint=f"use partitions 0..{snapshot.partitions[topic] - 1} or drop it"
            if snapshot.partitions[topic]
            else "the topic has no partitions; drop it",
        )


Assignor = Callable[[GroupSnapshot, Assignment | None], Assignment]
"""A strategy: a pure function from a snapshot (and the previous plan) to a plan."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanStats:
    """How good a plan is: its worst member's lag against the lower bound, and churn."""

    max_member_lag: int
    lag_lower_bound: float
    count_spread: int
    moved: int
