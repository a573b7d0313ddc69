"""Checks of a frozen config's fields, for the classes in :mod:`fairstream.config`.

Dataclasses do not check annotations, so ``concurrency=2.5`` or
``commit_interval=float("nan")`` would pass construction and fail later inside the
task group, far from the mistake. Each config's ``__post_init__`` runs these and
raises :class:`~fairstream.errors.ConfigError` naming the bad field.
"""

from __future__ import annotations

import math
import types
import typing
from collections.abc import Mapping
from dataclasses import fields
from typing import Any, Literal

from fairstream.errors import ConfigError

__all__ = ["check_positive", "check_types"]


def check_types(config: object, namespace: Mapping[str, Any], prefix: str = "") -> None:
    """Reject a field whose value does not match its annotation.

    ints must be ints (a bool is not one), floats finite numbers, and Literal fields
    one of their values. ``namespace`` resolves the annotations, which are strings: the
    globals of the module that defines the class (its ``__module__`` says
    ``fairstream``, where users import it from).
    """
    hints = typing.get_type_hints(type(config), globalns=dict(namespace))
    for name in (f.name for f in fields(config)):  # type: ignore[arg-type]
        value = getattr(config, name)
        hint = hints[name]
        problem = _mismatch(value, hint)
        if problem:
            raise ConfigError(prefix + name, value, problem)


def _mismatch(value: object, hint: object) -> str | None:
    """Why ``value`` does not fit ``hint`` (``None`` if it does)."""
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        options = typing.get_args(hint)
        if any(_mismatch(value, option) is None for option in options):
            return None
        return "must be " + " or ".join(dict.fromkeys(_expected(option) for option in options))
    if typing.get_origin(hint) is Literal:
        # By type too: True == 1, but acks=True is not acks=1.
        allowed = typing.get_args(hint)
        if any(value == option and type(value) is type(option) for option in allowed):
            return None
        return f"must be {_expected(hint)}"
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return f"must be a number, not {type(value).__name__}"
        return None if math.isfinite(value) else "must be a finite number"
    if hint is int and isinstance(value, bool):
        return "must be an int, not bool"
    cls = typing.cast(type, typing.get_origin(hint) or hint)
    if isinstance(value, cls):
        return None
    return f"must be {_expected(cls)}, not {type(value).__name__}"


def _expected(hint: object) -> str:
    if typing.get_origin(hint) is Literal:
        return "one of " + ", ".join(repr(v) for v in typing.get_args(hint))
    if hint is type(None):
        return "None"
    name = getattr(hint, "__name__", repr(hint))
    return f"{'an' if name[0] in 'aeiou' else 'a'} {name}"


def check_positive(name: str, value: float, *, allow_zero: bool = False) -> None:
    """Reject a count, size or duration below 0, or at 0 unless ``allow_zero``.

    Zero is allowed where it means "do not wait" (a linger, a backoff, a timeout) or
    "any" (a KIP-333 threshold); elsewhere zero has no working meaning (no record in
    flight, a commit loop that never sleeps).
    """
    if value < 0 or (value == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise ConfigError(name, value, f"must be {bound}")
