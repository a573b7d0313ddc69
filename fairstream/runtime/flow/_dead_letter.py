"""What a dead-lettered record carries, and the smaller copies to try when it does not fit.

A failed record is copied to its dead-letter topic with the facts of the failure added
as headers, so the copy is larger than the original: a record near the size limit no
longer fits. Stopping the partition for that would break the promise that dead
letters keep it flowing, so the copy sheds its largest part (value, the record's own
headers, key), then the next, until it fits; each dropped part is recorded as
``fairstream.<part>.dropped=<bytes>``. The original stays in its topic until retention
removes it, and the source headers say where.

The failure is told by ``fairstream.error.type``, ``.message`` (its first
:data:`MESSAGE_LIMIT` characters: a validation error's every field and reason fit) and
``.traceback``: Python's traceback of the error, chained causes included, cut to its
last :data:`TRACEBACK_LIMIT` bytes, where the frame that raised and the error are.
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass
from typing import Any

from fairstream.runtime._record import Headers

__all__ = [
    "MESSAGE_LIMIT",
    "TRACEBACK_LIMIT",
    "DeadLetterCopy",
    "bounded_traceback",
    "dead_letter_copies",
    "dead_letter_headers",
]

MESSAGE_LIMIT = 4000
"""Characters of the error message kept in ``fairstream.error.message``."""
TRACEBACK_LIMIT = 4096
"""Bytes of the traceback kept in ``fairstream.error.traceback``: its end, where it raised."""


@dataclass(frozen=True, slots=True, kw_only=True)
class DeadLetterCopy:
    """One candidate record for the dead-letter topic; ``dropped`` maps part to bytes."""

    key: bytes | None
    value: bytes | None
    headers: Headers
    dropped: tuple[tuple[str, int], ...] = ()


def bounded_traceback(error: BaseException) -> bytes:
    """The traceback of ``error`` as UTF-8, its last :data:`TRACEBACK_LIMIT` bytes at most.

    The end is kept: the innermost frames and the error line say most; a cut start
    begins with ``...``.
    """
    text = "".join(traceback.format_exception(error)).encode("utf-8", "replace")
    if len(text) <= TRACEBACK_LIMIT:
        return text
    tail = text[len(text) - TRACEBACK_LIMIT + 4 :]
    # Cut at a line start, so no frame line (or UTF-8 character) is split.
    return b"...\n" + tail[tail.find(b"\n") + 1 :]


def _failure_headers(raw: Any, error: BaseException, attempts: int) -> Headers:
    message = str(error)[:MESSAGE_LIMIT]
    return (
        ("fairstream.error.type", type(error).__name__.encode()),
        ("fairstream.error.message", message.encode("utf-8", "replace")),
        ("fairstream.error.traceback", bounded_traceback(error)),
        ("fairstream.source.topic", raw.topic.encode()),
        ("fairstream.source.partition", str(raw.partition).encode()),
        ("fairstream.source.offset", str(raw.offset).encode()),
        ("fairstream.attempts", str(attempts).encode()),
    )


def dead_letter_headers(raw: Any, error: BaseException, attempts: int) -> Headers:
    """The record's own headers plus where it came from and why it failed."""
    return (*tuple(raw.headers), *_failure_headers(raw, error, attempts))


def dead_letter_copies(raw: Any, error: BaseException, attempts: int) -> list[DeadLetterCopy]:
    """The whole copy first, then copies without the largest remaining part, one more each.

    Parts that are empty are never dropped, so there are as many smaller copies as the
    record has non-empty parts; the failure headers stay in every copy.
    """
    own = tuple(raw.headers)
    sizes = {
        "value": len(raw.value or b""),
        "headers": sum(len(k.encode()) + len(v or b"") for k, v in own),
        "key": len(raw.key or b""),
    }
    largest_first = sorted((part for part, size in sizes.items() if size), key=lambda p: -sizes[p])
    failure = _failure_headers(raw, error, attempts)
    copies = []
    for count in range(len(largest_first) + 1):
        dropped = tuple((part, sizes[part]) for part in largest_first[:count])
        gone = {part for part, _ in dropped}
        notes = tuple((f"fairstream.{part}.dropped", str(size).encode()) for part, size in dropped)
        copies.append(
            DeadLetterCopy(
                key=None if "key" in gone else raw.key,
                value=None if "value" in gone else raw.value,
                headers=(*(() if "headers" in gone else own), *failure, *notes),
                dropped=dropped,
            )
        )
    return copies
