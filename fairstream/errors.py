"""The one exception tree of fairstream.

::

    FairstreamError                 root: catch this to catch everything we raise
    ├── ConfigError(ValueError)     a setting, argument or environment variable is wrong
    ├── PlanError(ValueError)       the planner got inconsistent input (members, lags, ...)
    ├── BrokerError                 talking to Kafka failed; ``retriable`` as aiokafka says
    │   └── MembershipError         the group will not keep this member as it is configured
    ├── HandlerError                a handler failed for good (after retries)
    ├── HandoffFailed               raised by a shadow handoff: it stopped at one record
    ├── CommitError                 an offset commit was refused or could not be sent
    ├── BackfillError               a Spark backfill job failed; nothing was committed
    ├── StreamError                 a Spark streaming query failed; its checkpoint resumes it
    └── DataLossError               records went away before they were read (failOnDataLoss)

Each error keeps its facts as attributes and builds a one-line message that says
what went wrong, where, and what to do, so a CLI can print ``str(exc)`` alone and
logs can bind the attributes.
"""

from __future__ import annotations

__all__ = [
    "BackfillError",
    "BrokerError",
    "CommitError",
    "ConfigError",
    "DataLossError",
    "FairstreamError",
    "HandlerError",
    "HandoffFailed",
    "MembershipError",
    "PlanError",
    "StreamError",
    "describe",
]


class FairstreamError(Exception):
    """Base class of every error fairstream raises on purpose."""


class ConfigError(FairstreamError, ValueError):
    """A setting is missing or invalid.

    ``field`` names the setting (``"assignor"``, ``"FAIRSTREAM_BOOTSTRAP"``,
    ``"--chunk"``), ``value`` the rejected value (``None`` when it is missing,
    left out of the message), ``hint`` what to do instead.
    """

    def __init__(self, field: str, value: object, problem: str, hint: str = "") -> None:
        self.field = field
        self.value = value
        self.problem = problem
        self.hint = hint
        message = f"{field}: {problem}" if value is None else f"{field}={value!r}: {problem}"
        if hint:
            message += f"; {hint}"
        super().__init__(message)


class PlanError(FairstreamError, ValueError):
    """The planner's input is inconsistent.

    ``where`` locates the problem in the input (``"lag.orders"``,
    ``"members.c0"``) so a user can find it in their JSON.
    """

    def __init__(self, problem: str, *, where: str = "", hint: str = "") -> None:
        self.problem = problem
        self.where = where
        self.hint = hint
        message = problem
        if where:
            message += f" (input key {where})"
        if hint:
            message += f"; {hint}"
        super().__init__(message)


def describe(exc: BaseException) -> str:
    """``Name: message`` on one line, for logs and for exceptions wrapped into ours.

    aiokafka's errors already start their ``str()`` with the class name, so the
    usual ``f"{type(exc).__name__}: {exc}"`` prints it twice; some carry a
    paragraph of advice and a summary (``CommitFailedError``): the summary is kept,
    and line breaks and runs of spaces become one space.
    """
    name = type(exc).__name__
    texts = [arg for arg in exc.args if isinstance(arg, str) and arg.strip()]
    # Only an error made of messages has a summary among them: a UnicodeDecodeError's
    # args are the encoding, the bytes and positions, and a reason, and its str() says
    # them in one sentence (the shortest arg alone was "utf-8").
    summarized = len(texts) > 1 and len(texts) == len(exc.args)
    text = min(texts, key=len) if summarized else str(exc)
    text = " ".join(text.split())
    if not text or text == name:
        return name
    return text if text.startswith(f"{name}:") else f"{name}: {text}"


class BrokerError(FairstreamError):
    """Talking to the Kafka cluster failed.

    ``retriable`` mirrors aiokafka's flag: a retriable error may go away if the
    same call is made again later.
    """

    def __init__(self, message: str, *, bootstrap: str = "", retriable: bool = False) -> None:
        self.bootstrap = bootstrap
        self.retriable = retriable
        if bootstrap:
            message = f"{message} (bootstrap {bootstrap})"
        super().__init__(message)


class MembershipError(BrokerError):
    """The group will not keep this member as it is configured: retrying cannot help.

    Another process runs with the same static ``instance_id`` (the broker fences one
    of the two, and a member that rejoined would fence the other in turn), or the
    group chose a protocol this member never offered. ``group_id`` names the group,
    ``instance_id`` the static member id (``None`` when that is not the problem),
    ``hint`` what to change.
    """

    def __init__(
        self, problem: str, *, group_id: str, instance_id: str | None = None, hint: str
    ) -> None:
        self.group_id = group_id
        self.instance_id = instance_id
        self.problem = problem
        self.hint = hint
        where = f"group {group_id!r}"
        if instance_id is not None:
            where += f", instance_id {instance_id!r}"
        super().__init__(f"this member cannot stay in {where}: {problem}; {hint}")


class HandlerError(FairstreamError):
    """A handler failed on a record after every retry, and the policy is to stop."""

    def __init__(
        self, *, topic: str, partition: int, offset: int, attempts: int, cause: BaseException
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.attempts = attempts
        self.cause = cause
        super().__init__(
            f"handler failed on {topic}[{partition}]@{offset} after {attempts} attempt(s): "
            f"{type(cause).__name__}: {cause}; the offset was not committed, fix the handler "
            "or choose on_error='dead_letter' to move on"
        )


class HandoffFailed(FairstreamError):
    """Raised by a ``ParallelRebalance(handoff=...)`` callable that stopped at one record.

    ``offset`` is the record it failed on: every record of the range below it was
    handled, none above it was. The runtime counts ``[range.start, offset)`` as done,
    runs the record at ``offset`` in process through the App's retry and dead-letter
    policy, and hands the rest of the range off again (docs, "Parallel rebalance").
    Any other exception from a handoff says nothing of what was done, so the shadow
    replays the whole range it was given.
    """

    def __init__(self, offset: int, *, cause: BaseException | None = None) -> None:
        self.offset = offset
        self.cause = cause
        reason = "" if cause is None else f": {type(cause).__name__}: {cause}"
        super().__init__(f"the shadow handoff failed at offset {offset}{reason}")


class HandlerAborted(FairstreamError):
    """A handler raised a ``BaseException`` that is not an error (``KeyboardInterrupt``,
    ``SystemExit`` or a subclass of the user's own): the app committed what was handled
    and stopped. ``App`` re-raises ``KeyboardInterrupt`` and ``SystemExit`` themselves,
    so a process ends the way Python programs do; other kinds arrive as this error.
    """

    def __init__(self, *, topic: str, partition: int, offset: int, cause: BaseException) -> None:
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.cause = cause
        super().__init__(
            f"handler raised {type(cause).__name__} on {topic}[{partition}]@{offset}; "
            "the app committed what was handled and stopped. Raise an Exception subclass "
            "to have the record retried and dead-lettered instead"
        )


class HandlerCancelled(Exception):
    """A handler raised ``CancelledError`` that fairstream did not cause.

    Typically it awaited a task or future that something else cancelled. Only
    fairstream's own cancellation (revoke timeout, shutdown) may end a handler quietly;
    this one is a handler failure like any other: retried, then the dead-letter policy.
    """

    def __init__(self) -> None:
        super().__init__(
            "the handler raised CancelledError that fairstream did not cause (did it await "
            "a task that was cancelled?); treated as a handler failure"
        )


class CommitError(FairstreamError):
    """Committing offsets failed; the records will be delivered again."""

    def __init__(self, message: str, *, group_id: str) -> None:
        self.group_id = group_id
        super().__init__(f"{message} (group {group_id!r}); uncommitted records will be redelivered")


class BackfillError(FairstreamError):
    """A backfill job failed; no offset was committed for it."""


class StreamError(FairstreamError):
    """A Spark streaming query failed; the group was committed only for finished batches."""


class DataLossError(FairstreamError):
    """Records the source still owed are gone: deleted by retention before they were
    read, or a topic deleted and created again (its offsets went back). Spark's Kafka
    source fails the query on this by default (``failOnDataLoss``), and so does ours."""

    def __init__(self, *, topic: str, partition: int, lost: str) -> None:
        self.topic = topic
        self.partition = partition
        self.lost = lost
        super().__init__(
            f"{topic} partition {partition}: {lost}; set failOnDataLoss=false to go on without them"
        )
