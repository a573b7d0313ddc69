"""What happens when a handler fails: how often it is retried, then where the record goes.

Apart from :mod:`fairstream.config` because these are a subscriber's choices (each
``@app.subscriber`` may set its own) where the config classes describe the app's
clients and scheduler. The dead-letter policy checks its topic names against Kafka's
rule when built, not when the first record fails long after start.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from fairstream._field_checks import check_positive, check_types
from fairstream.errors import ConfigError

__all__ = ["DeadLetterPolicy", "OnError", "RetryPolicy"]

OnError = Literal["dead_letter", "skip", "stop"]


def _check_types(config: object, prefix: str = "") -> None:
    # This module's names resolve the hints: the public classes say they live in ``fairstream``.
    check_types(config, globals(), prefix)


@dataclass(frozen=True, slots=True, kw_only=True)
class RetryPolicy:
    """How often a failing handler is retried, with exponential backoff."""

    attempts: int = 3
    backoff: float = 0.1
    multiplier: float = 2.0
    max_backoff: float = 5.0

    def __post_init__(self) -> None:
        _check_types(self, "retry.")
        check_positive("retry.attempts", self.attempts)
        check_positive("retry.backoff", self.backoff, allow_zero=True)
        if self.multiplier < 1:
            raise ConfigError("retry.multiplier", self.multiplier, "must be >= 1")
        check_positive("retry.max_backoff", self.max_backoff, allow_zero=True)

    def delay(self, attempt: int) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1-based)."""
        return float(min(self.max_backoff, self.backoff * self.multiplier ** (attempt - 1)))


@dataclass(frozen=True, slots=True, kw_only=True)
class DeadLetterPolicy:
    """What happens to a record whose handler failed every attempt.

    ``dead_letter`` publishes it to ``topic_suffix`` appended to its topic (with
    the error in headers) and moves on; ``skip`` logs an error and moves on;
    ``stop`` stops the app with :class:`~fairstream.errors.HandlerError` and
    commits nothing past the record.
    """

    on_error: OnError = "dead_letter"
    topic_suffix: str = ".dlq"

    def __post_init__(self) -> None:
        _check_types(self)
        if not self.topic_suffix:
            raise ConfigError("topic_suffix", self.topic_suffix, "must not be empty")
        # Checked here, not at the first failure: a broker refuses (or, noida, takes)
        # an illegal name only when the first dead letter is sent, long after start.
        problem = _topic_name_problem(self.topic_suffix, whole=False)
        if problem is not None:
            raise ConfigError(
                "topic_suffix",
                self.topic_suffix,
                f"{problem}, so no dead-letter topic could be named with it",
                "choose a suffix such as '.dlq'",
            )

    def topic_for(self, topic: str) -> str:
        return f"{topic}{self.topic_suffix}"

    def check_topics(self, topics: Sequence[str]) -> None:
        """The dead-letter topic of each of ``topics`` is a name Kafka accepts.

        :raises ConfigError: naming the topic, the suffix and the rule it breaks.
        """
        if self.on_error != "dead_letter":
            return
        for topic in topics:
            name = self.topic_for(topic)
            problem = _topic_name_problem(name)
            if problem is not None:
                raise ConfigError(
                    "topic_suffix",
                    self.topic_suffix,
                    f"the dead-letter topic of topic {topic!r} would be {name!r}, which {problem}",
                    "choose a topic_suffix that keeps it a legal name (e.g. '.dlq')",
                )


_TOPIC_MAX = 249
"""Kafka's longest topic name (``Topic.MAX_NAME_LENGTH``)."""
_TOPIC_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")


def _topic_name_problem(name: str, *, whole: bool = True) -> str | None:
    """What makes ``name`` an illegal Kafka topic name (``None``: it is legal).

    Kafka's rule (``org.apache.kafka.common.internals.Topic.validate``): 1 to 249 of
    ``a-z A-Z 0-9 . _ -``, and not ``.`` or ``..``. ``whole=False`` checks a part of
    a name (a suffix): its characters, and that it leaves room for a one-letter topic.
    """
    bad = sorted(set(name) - _TOPIC_CHARS)
    if bad:
        shown = ", ".join(repr(c) for c in bad)
        return f"has {shown}: Kafka allows only a-z, A-Z, 0-9, '.', '_' and '-' in topic names"
    if whole and len(name) > _TOPIC_MAX:
        return f"is {len(name)} characters long: Kafka allows at most {_TOPIC_MAX} in a topic name"
    if not whole and len(name) >= _TOPIC_MAX:
        return (
            f"is {len(name)} characters long, leaving no room for a topic name within "
            f"Kafka's limit of {_TOPIC_MAX} characters"
        )
    if whole and name in ("", ".", ".."):
        return "is not a topic name Kafka allows ('', '.' and '..' are not)"
    return None
