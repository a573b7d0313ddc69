"""Checking, at registration, that a handler can be called the way the engine calls it.

The engine calls a handler with one positional argument: the record, or the list of
records for ``batch=True``. A handler that needs more would fail with ``TypeError`` on
every record, and each record would be retried and dead-lettered (or skipped and
committed) without the handler ever running; so the mismatch is a
:class:`~fairstream.errors.ConfigError` when the handler is registered.
"""

from __future__ import annotations

import inspect
import types
import typing
from collections.abc import Callable
from typing import Any

from fairstream.errors import ConfigError

__all__ = ["record_annotation", "record_parameter"]

_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
_EXAMPLE = "define it as 'async def handle(record: Record) -> None'"


def _name(handler: Callable[..., Any]) -> str:
    return str(getattr(handler, "__qualname__", handler))


def record_parameter(handler: Callable[..., Any], *, batch: bool) -> inspect.Parameter:
    """The parameter the record (or list of records) is passed in.

    :raises ConfigError: the handler cannot be called with exactly one positional
        argument: it takes none, or it requires another parameter.
    """
    what = "the list of records" if batch else "the record"
    params = list(inspect.signature(handler).parameters.values())
    if not params or params[0].kind not in (*_POSITIONAL, inspect.Parameter.VAR_POSITIONAL):
        raise ConfigError("handler", _name(handler), "takes no positional argument", _EXAMPLE)
    for extra in params[1:]:
        if extra.default is inspect.Parameter.empty and extra.kind not in (
            inspect.Parameter.VAR_POSITIONAL,
            inspect.Parameter.VAR_KEYWORD,
        ):
            raise ConfigError(
                "handler",
                _name(handler),
                f"requires parameter {extra.name!r} besides {what}, but fairstream passes "
                f"only {what}",
                f"give {extra.name!r} a default or remove it",
            )
    return params[0]


def record_annotation(handler: Callable[..., Any], parameter: inspect.Parameter) -> Any:
    """The parameter's type hint, resolved (``None`` if it has none).

    Only this one annotation is resolved: another parameter's or the return type's
    may name something imported under ``TYPE_CHECKING`` without harm.

    :raises ConfigError: the annotation names something that does not exist at run
        time (``Record`` imported under ``TYPE_CHECKING``, a model defined inside a
        function of a module with postponed annotations).
    """
    hint = parameter.annotation
    if hint is inspect.Parameter.empty:
        return None
    if not isinstance(hint, str):
        return hint
    # get_type_hints() evaluates strings as Python does; given only this annotation,
    # it cannot trip over the others.
    holder = types.SimpleNamespace(__annotations__={parameter.name: hint})
    namespace = getattr(inspect.unwrap(handler), "__globals__", {})
    try:
        return typing.get_type_hints(holder, globalns=namespace)[parameter.name]
    except Exception as exc:  # NameError mostly; SyntaxError, TypeError for odd strings
        raise ConfigError(
            "handler",
            _name(handler),
            f"annotation {hint!r} of parameter {parameter.name!r} cannot be resolved "
            f"({type(exc).__name__}: {exc})",
            "import what it names at run time (not under 'if TYPE_CHECKING:'), define "
            "models at module level, or pass decoder=",
        ) from exc
