"""Which partitions a query reads: Spark's ``subscribe``, ``subscribePattern`` or ``assign``.

Spark's Kafka source takes exactly one of the three: a list of topics, a regular
expression matched against the cluster's topic names at every trigger (so a new
matching topic is picked up), or JSON naming the partitions of each topic
(``{"orders": [0, 1]}``). A pattern is matched against the whole name, as Java's
``Pattern.matches`` does.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from fairstream.errors import ConfigError
from fairstream.spark.cluster import GroupClient
from fairstream.spark.planning import PartitionState

__all__ = ["Subscription", "subscription"]

_KINDS = ("subscribe", "subscribePattern", "assign")


@dataclass(frozen=True, slots=True)
class Subscription:
    """One of: ``topics`` (subscribe), ``pattern`` (subscribePattern), or ``assigned``
    partitions per topic (assign, whose topics are ``topics`` too)."""

    topics: tuple[str, ...] = ()
    pattern: str | None = None
    assigned: Mapping[str, frozenset[int]] | None = None

    def covers(self, topic: str) -> bool:
        """Whether ``topic`` is read (a checkpoint's topics must all be)."""
        if self.pattern is not None:
            return re.fullmatch(self.pattern, topic) is not None
        return topic in self.topics

    def states(self, client: GroupClient, *, quiet: bool = True) -> list[PartitionState]:
        """The read partitions' states, a pattern matched against the topics now there.

        :raises ConfigError: an assigned partition its topic does not have.
        """
        topics: Sequence[str] = self.topics
        if self.pattern is not None:
            topics = sorted(t for t in client.topic_names() if self.covers(t))
            if not topics:
                return []
        states = client.states(topics, quiet=quiet)
        if self.assigned is None:
            return states
        found = {(s.topic, s.partition) for s in states}
        for topic, partitions in sorted(self.assigned.items()):
            missing = sorted(p for p in partitions if (topic, p) not in found)
            if missing:
                raise ConfigError(
                    "assign", f"{topic}: {missing}", "no such partition", "check the topic"
                )
        return [s for s in states if s.partition in self.assigned[s.topic]]


def subscription(given: Mapping[str, str]) -> Subscription:
    """The subscription from Spark's options (lower-cased keys).

    :raises ConfigError: none or more than one of the three, or a bad value.
    """
    named = [kind for kind in _KINDS if kind.lower() in given]
    if len(named) != 1:
        raise ConfigError(
            "subscribe",
            None,
            f"give exactly one of {', '.join(_KINDS)}" + (f" (got {named})" if named else ""),
            "e.g. .option('subscribe', 'orders,payments')",
        )
    kind = named[0]
    text = given[kind.lower()]
    if kind == "subscribe":
        topics = tuple(t.strip() for t in text.split(",") if t.strip())
        if not topics:
            raise ConfigError("subscribe", text, "no topics", "e.g. 'orders,payments'")
        return Subscription(topics=topics)
    if kind == "subscribePattern":
        try:
            re.compile(text)
        except re.error as exc:
            raise ConfigError(
                kind, text, f"not a regular expression ({exc})", "e.g. 'orders-.*'"
            ) from None
        return Subscription(pattern=text)
    try:
        parsed = json.loads(text)
        assigned = {
            str(topic): frozenset(int(p) for p in partitions)
            for topic, partitions in parsed.items()
        }
    except (ValueError, AttributeError, TypeError):
        raise ConfigError(
            kind, text, "not JSON of partitions per topic", '{"orders": [0, 1]}'
        ) from None
    if not assigned or not all(assigned.values()):
        raise ConfigError(kind, text, "names no partitions", '{"orders": [0, 1]}')
    return Subscription(topics=tuple(sorted(assigned)), assigned=assigned)
