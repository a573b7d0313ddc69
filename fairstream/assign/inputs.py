"""Read the planner's JSON document (``fairstream plan`` input) into plain data.

The document::

    {"members": {"c0": ["t1", "t2"]}, "partitions": {"t1": 3, "t2": 1},
     "lag": {"t1": [100000, 50000, 60000]}, "previous": {"c0": {"t1": [0]}}}

``lag`` and ``previous`` are optional. Every mistake becomes a
:class:`~fairstream.errors.PlanError` whose ``where`` is the JSON key path
(``lag.t1``, ``previous.c0.t1``), so the CLI can print one line that points at it.
Parsing text is not I/O: the caller reads the file or stdin.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from fairstream.assign.model import Assignment, GroupSnapshot
from fairstream.errors import PlanError

__all__ = ["parse_document", "read_document"]

_KEYS = ("members", "partitions", "lag", "previous")

# The planner is built and measured for 100k partitions x 1,000 members (a plan in
# under 5 s, benchmarks/RESULTS.md); at 1M it still answers in seconds. A document is
# a few bytes per partition count, so a typo like 100000000 would otherwise plan for
# minutes without a word: past this it is refused instead.
_MAX_PARTITIONS = 1_000_000


def read_document(text: str) -> tuple[GroupSnapshot, Assignment | None]:
    """Parse JSON text into a snapshot and the optional previous assignment.

    :raises PlanError: the text is not JSON (with line and column) or the document
        is inconsistent.
    """
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise PlanError(
            f"malformed JSON at line {exc.lineno} column {exc.colno}: {exc.msg}",
            hint="fix the input document; `fairstream plan --help` shows one",
        ) from exc
    return parse_document(document)


def parse_document(document: object) -> tuple[GroupSnapshot, Assignment | None]:
    """Check a decoded JSON document and build the planner's input from it.

    :raises PlanError: a key is missing, unknown or of the wrong type, the values
        contradict each other (see :class:`GroupSnapshot`), or the topics have more
        than 1,000,000 partitions in all.
    """
    root = _object(document, "", "the input document")
    for key in root:
        if key not in _KEYS:
            raise PlanError(f"unknown key {key!r}", where=key, hint=f"use only {', '.join(_KEYS)}")
    for key in _KEYS[:2]:
        if key not in root:
            raise PlanError(f"the input has no {key!r}", where=key, hint=f"add {_EXAMPLES[key]}")
    members = {
        member_id: frozenset(_strings(topics, f"members.{member_id}"))
        for member_id, topics in _object(root["members"], "members", "members").items()
    }
    partitions = {
        topic: _integer(count, f"partitions.{topic}", "a partition count")
        for topic, count in _object(root["partitions"], "partitions", "partitions").items()
    }
    _check_size(partitions)
    lag = {
        topic: tuple(_numbers(values, f"lag.{topic}", "lag"))
        for topic, values in _object(root.get("lag") or {}, "lag", "lag").items()
    }
    snapshot = GroupSnapshot(members=members, partitions=partitions, lag=lag)
    if root.get("previous") is None:
        return snapshot, None
    previous = {
        member_id: {
            topic: _numbers(values, f"previous.{member_id}.{topic}", "a partition list")
            for topic, values in _object(
                topics, f"previous.{member_id}", "a member's previous partitions"
            ).items()
        }
        for member_id, topics in _object(root["previous"], "previous", "previous").items()
    }
    return snapshot, Assignment.from_json(previous, snapshot)


_EXAMPLES = {
    "members": '"members": {"c0": ["t1"]} (member -> subscribed topics)',
    "partitions": '"partitions": {"t1": 3} (topic -> partition count)',
    "lag": '"lag": {"t1": [10, 0, 5]} (topic -> one lag per partition)',
    "previous": '"previous": {"c0": {"t1": [0, 1]}} (member -> topic -> partitions)',
    "a member's previous partitions": '{"t1": [0, 1]} (topic -> partitions)',
}


def _check_size(partitions: Mapping[str, int]) -> None:
    total = sum(max(count, 0) for count in partitions.values())  # < 0: the model refuses
    if total > _MAX_PARTITIONS:
        largest = max(partitions, key=lambda topic: partitions[topic])
        raise PlanError(
            f"{total:,} partitions in all, more than the planner takes ({_MAX_PARTITIONS:,} "
            "at most; it is measured at 100,000 partitions x 1,000 members)",
            where=f"partitions.{largest}",
            hint="check the partition counts, or plan fewer topics at a time",
        )


def _object(value: object, where: str, what: str) -> Mapping[str, object]:
    if not isinstance(value, dict):
        raise PlanError(
            f"{what} must be a JSON object, not {_kind(value)}",
            where=where,
            hint=f"write {_EXAMPLES.get(what, '{...}')}",
        )
    return value


def _strings(value: object, where: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise PlanError(
            f"a subscription must be a list of topic names, not {_kind(value)}",
            where=where,
            hint='write e.g. ["t1", "t2"]',
        )
    return value


def _numbers(value: object, where: str, what: str) -> list[int]:
    if not isinstance(value, list):
        raise PlanError(
            f"{what} must be a list of whole numbers, not {_kind(value)}",
            where=where,
            hint="write e.g. [0, 1, 2]",
        )
    return [
        _integer(item, f"{where}[{index}]", f"an entry of {what}")
        for index, item in enumerate(value)
    ]


def _integer(value: object, where: str, what: str) -> int:
    # Ranges (>= 0, < partition count) are the model's to check, so its messages
    # are the same for JSON and for Python callers.
    if isinstance(value, bool) or not isinstance(value, int):
        raise PlanError(
            f"{what} must be a whole number, not {_kind(value)}", where=where, hint="write e.g. 3"
        )
    return value


def _kind(value: object) -> str:
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "a list"
    return json.dumps(value)
