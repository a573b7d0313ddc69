"""Turning record bytes into the value type a handler asks for.

The decoder is chosen once, from the handler's type hint (``Record[bytes]``,
``Record[str]``, ``Record[dict]``, ``Record[MyModel]`` for a pydantic model) or
an explicit ``decoder=``, so the per-record path does no type inspection.
"""

from __future__ import annotations

import json
import typing
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from fairstream.errors import ConfigError
from fairstream.runtime._signature import record_annotation, record_parameter

__all__ = ["DecodeError", "Decoder", "decoder_for", "passthrough"]

T_co = TypeVar("T_co", covariant=True)


class Decoder(Protocol[T_co]):
    """Turns a record's value bytes (``None`` for a tombstone) into a value."""

    def __call__(self, raw: bytes | None, /) -> T_co: ...


class DecodeError(Exception):
    """A record's value could not be decoded; it goes straight to the error policy."""


def passthrough(raw: bytes | None) -> bytes | None:
    """The decoder of ``Record[bytes]`` handlers; the engine skips calling it."""
    return raw


def _text(raw: bytes | None) -> str | None:
    if raw is None:
        return None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DecodeError(f"value is not valid UTF-8: {exc}") from exc


def _json(raw: bytes | None) -> Any:
    if raw is None:
        return None
    # Decode as UTF-8 first: json.loads(bytes) guesses UTF-16/32 from a BOM-like
    # start, and would report invalid UTF-8 as a puzzling UTF-16 error.
    text = _text(raw)
    try:
        return json.loads(text)  # type: ignore[arg-type]
    except json.JSONDecodeError as exc:
        raise DecodeError(f"value is not valid JSON: {exc}") from exc


def _model(model: Any) -> Decoder[Any]:
    def decode(raw: bytes | None) -> Any:
        if raw is None:
            return None
        try:
            return model.model_validate_json(raw)
        except ValueError as exc:  # pydantic.ValidationError is a ValueError
            first = str(exc).splitlines()
            raise DecodeError(f"value is not a valid {model.__name__}: {first[0]}") from exc

    return decode


def _value_type(hint: Any, batch: bool) -> Any:
    """The ``T`` of the handler's ``Record[T]`` (or ``list[Record[T]]``) hint."""
    if hint is None:
        return bytes
    if batch and typing.get_origin(hint) in (list, typing.Sequence):
        (hint,) = typing.get_args(hint) or (bytes,)
    args = typing.get_args(hint)
    return args[0] if args else bytes


def decoder_for(
    handler: Callable[..., Any], *, batch: bool, decoder: Decoder[Any] | None
) -> Decoder[Any]:
    """Pick the decoder for a handler: the explicit one, else from its type hint.

    The handler's signature is checked first, whatever the decoder, so that a handler
    the engine cannot call fails at registration rather than on every record.

    :raises ConfigError: the handler does not take exactly one record (or list), its
        record annotation cannot be resolved, or no decoder fits it.
    """
    parameter = record_parameter(handler, batch=batch)
    if decoder is not None:
        return decoder
    value_type = _value_type(record_annotation(handler, parameter), batch)
    if value_type in (bytes, typing.Any, object) or value_type is type(None):
        return passthrough
    if value_type is str:
        return _text
    origin = typing.get_origin(value_type) or value_type
    if origin in (dict, list, int, float, bool):
        return _json
    if hasattr(value_type, "model_validate_json"):
        return _model(value_type)
    raise ConfigError(
        "handler",
        getattr(handler, "__qualname__", handler),
        f"cannot decode record values into {value_type!r}",
        "annotate Record[bytes|str|dict|<pydantic model>] or pass decoder=",
    )
