"""Turning record bytes into the value type a handler asks for.

The decoder is chosen once, from the handler's type hint (``Record[bytes]``,
``Record[str]``, ``Record[dict]``, ``Record[MyModel]`` for a pydantic model) or
an explicit ``decoder=``, so the per-record path does no type inspection.
"""

from __future__ import annotations

import inspect
import json
import types
import typing
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar

from fairstream.errors import ConfigError
from fairstream.runtime._record import Record, with_key
from fairstream.runtime._signature import record_annotation, record_parameter

__all__ = [
    "DecodeError",
    "Decoder",
    "decoder_for",
    "decoding_keys",
    "key_decoder_for",
    "passthrough",
    "result_type_of",
    "value_type_of",
]

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
            raise DecodeError(
                f"value is not a valid {model.__name__}: {_validation_errors(exc)}"
            ) from exc

    return decode


def _validation_errors(exc: ValueError) -> str:
    """Every field and reason of a pydantic ``ValidationError``, on one line.

    ``2 validation errors: qty: Input should be a valid integer (input: 'x'); sku: Field
    required`` - a dead letter's message and the log line say what to fix in each field,
    not only that something failed. Another ``ValueError`` keeps its own text.
    """
    errors = getattr(exc, "errors", None)
    if not callable(errors):
        return str(exc)
    details = errors(include_url=False)
    parts = []
    for error in details:
        field = ".".join(str(part) for part in error["loc"]) or "(value)"
        reason = f"{field}: {error['msg']}"
        if error["type"] != "missing":
            reason += f" (input: {error['input']!r:.80})"
        parts.append(reason)
    count = f"{len(details)} validation error{'s' if len(details) != 1 else ''}"
    return f"{count}: {'; '.join(parts)}"


def _record_args(hint: Any, batch: bool) -> tuple[Any, ...]:
    """The type arguments of the handler's ``Record[V, K]`` (or ``list[Record]``) hint."""
    if hint is None:
        return ()
    if batch and typing.get_origin(hint) in (list, typing.Sequence):
        (hint,) = typing.get_args(hint) or (bytes,)
    return typing.get_args(hint)


def _value_type(hint: Any, batch: bool) -> Any:
    """The ``V`` of the handler's ``Record[V]`` (or ``list[Record[V]]``) hint."""
    args = _record_args(hint, batch)
    return args[0] if args else bytes


def _decoder_of(value_type: Any) -> Decoder[Any] | None:
    """The decoder for bytes into ``value_type``; ``None`` when none fits."""
    if value_type in (bytes, typing.Any, object) or value_type is type(None):
        return passthrough
    if value_type is str:
        return _text
    origin = typing.get_origin(value_type) or value_type
    if origin in (dict, list, int, float, bool):
        return _json
    if hasattr(value_type, "model_validate_json"):
        return _model(value_type)
    return None


def value_type_of(handler: Callable[..., Any], *, batch: bool, decoder: Decoder[Any] | None) -> Any:
    """The type a handler's record values decode into; ``None`` with an explicit decoder
    (what it returns is its own business). For documents such as AsyncAPI."""
    if decoder is not None:
        return None
    return _value_type(record_annotation(handler, record_parameter(handler, batch=batch)), batch)


def result_type_of(handler: Callable[..., Any]) -> Any:
    """What a handler's hint says it returns (``None``: no hint, or one that does not
    resolve at run time); what ``@app.publisher`` sends, for documents."""
    try:
        return typing.get_type_hints(inspect.unwrap(handler)).get("return")
    except Exception:  # a hint naming what exists only for type checkers
        return None


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
    chosen = _decoder_of(value_type)
    if chosen is None:
        raise ConfigError(
            "handler",
            getattr(handler, "__qualname__", handler),
            f"cannot decode record values into {value_type!r}",
            "annotate Record[bytes|str|dict|<pydantic model>] or pass decoder=",
        )
    return chosen


def key_decoder_for(
    handler: Callable[..., Any], *, batch: bool, key_decoder: Decoder[Any] | None
) -> Decoder[Any]:
    """The key decoder: the explicit one, else from the ``K`` of a ``Record[V, K]`` hint.

    ``Record[V]`` (or a ``K`` of ``bytes | None``) keeps keys as bytes: :func:`passthrough`,
    and the runtime adds nothing per record.

    :raises ConfigError: no decoder fits the key type.
    """
    if key_decoder is not None:
        return key_decoder
    args = _record_args(record_annotation(handler, record_parameter(handler, batch=batch)), batch)
    if len(args) < 2:
        return passthrough
    key_type = args[1]
    if typing.get_origin(key_type) in (typing.Union, types.UnionType):
        rest = [a for a in typing.get_args(key_type) if a is not type(None)]
        key_type = rest[0] if len(rest) == 1 else key_type
    chosen = _decoder_of(key_type)
    if chosen is None:
        raise ConfigError(
            "handler",
            getattr(handler, "__qualname__", handler),
            f"cannot decode record keys into {args[1]!r}",
            "annotate Record[V, bytes|str|dict|<pydantic model>] or pass key_decoder=",
        )
    return chosen


def _key_of(decode: Decoder[Any], record: Record[Any]) -> Record[Any, Any]:
    try:
        return with_key(record, decode(record.key))
    except DecodeError as exc:
        raise DecodeError(f"key: {exc}".replace("key: value ", "key ", 1)) from exc


def decoding_keys(
    handler: Callable[[Any], Awaitable[None]], decode: Decoder[Any], *, batch: bool
) -> Callable[[Any], Awaitable[None]]:
    """``handler`` called with its record's (each batch record's) key decoded by ``decode``.

    Wrapped around the middlewares, so they see the key the handler sees. A key that
    does not decode fails the call like a handler error: retried, then the
    subscriber's error policy (the record, key as sent, may be dead-lettered).
    """
    if batch:

        async def call_batch(records: list[Record[Any]]) -> None:
            await handler([_key_of(decode, record) for record in records])

        return call_batch

    async def call(record: Record[Any]) -> None:
        await handler(_key_of(decode, record))

    return call
