"""Decoders are picked once from the handler's type hint (or given), and fail clearly."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pydantic
import pytest

from fairstream import App, ConfigError, DecodeError, Record
from fairstream.runtime._decode import decoder_for

if TYPE_CHECKING:
    from fairstream import Record as TypingOnlyRecord


class Order(pydantic.BaseModel):
    id: int
    amount: float


async def by_bytes(record: Record[bytes]) -> None: ...
async def by_text(record: Record[str]) -> None: ...
async def by_json(record: Record[dict[str, Any]]) -> None: ...
async def by_model(record: Record[Order]) -> None: ...
async def unannotated(record) -> None: ...  # type: ignore[no-untyped-def]
async def batch_of_models(records: list[Record[Order]]) -> None: ...
async def by_set(record: Record[set[int]]) -> None: ...


@pytest.mark.parametrize(
    ("handler", "raw", "value"),
    [
        (by_bytes, b"\xff", b"\xff"),
        (unannotated, b"\xff", b"\xff"),
        (by_text, "héllo".encode(), "héllo"),
        (by_json, b'{"a": 1}', {"a": 1}),
        (by_model, b'{"id": 1, "amount": 2.5}', Order(id=1, amount=2.5)),
        (by_json, None, None),
    ],
    ids=["bytes", "unannotated", "str", "json", "pydantic", "tombstone"],
)
def test_decoder_follows_the_type_hint(handler: Any, raw: bytes | None, value: object) -> None:
    assert decoder_for(handler, batch=False, decoder=None)(raw) == value


def test_batch_handlers_use_the_element_type() -> None:
    decode = decoder_for(batch_of_models, batch=True, decoder=None)
    assert decode(b'{"id": 2, "amount": 1}') == Order(id=2, amount=1)


def test_explicit_decoder_wins() -> None:
    assert decoder_for(by_json, batch=False, decoder=lambda raw: len(raw or b""))(b"abc") == 3


@pytest.mark.parametrize(
    ("handler", "raw", "message"),
    [
        (by_text, b"\xff\xfe", "value is not valid UTF-8"),
        (by_json, b"{oops", "value is not valid JSON"),
        (by_json, b"\xff\xfe{}", "value is not valid UTF-8"),
        (by_model, b'{"id": "x"}', "value is not a valid Order"),
    ],
)
def test_undecodable_values_raise_decode_error(handler: Any, raw: bytes, message: str) -> None:
    with pytest.raises(DecodeError, match=message):
        decoder_for(handler, batch=False, decoder=None)(raw)


def test_unsupported_type_is_a_config_error_naming_the_fix() -> None:
    with pytest.raises(ConfigError, match="pass decoder="):
        decoder_for(by_set, batch=False, decoder=None)


# --- the handler's signature, checked at registration (issue #22, defect 6) ---------


def _register(handler: Any, *, batch: bool = False) -> None:
    App(bootstrap="127.0.0.1:1", group_id="g").subscriber("t", batch=batch)(handler)


async def two_required(record: Record[bytes], session: object) -> None: ...
async def keyword_required(record: Record[bytes], *, session: object) -> None: ...
async def batch_two_required(records: list[Record[bytes]], flush: bool) -> None: ...
async def keyword_only_record(*, record: Record[bytes]) -> None: ...


@pytest.mark.parametrize(
    ("handler", "batch", "message"),
    [
        pytest.param(
            two_required,
            False,
            "handler='two_required': requires parameter 'session' besides the record",
            id="second-positional",
        ),
        pytest.param(
            keyword_required,
            False,
            "handler='keyword_required': requires parameter 'session' besides the record",
            id="keyword-only",
        ),
        pytest.param(
            batch_two_required,
            True,
            "handler='batch_two_required': requires parameter 'flush' besides the list of records",
            id="batch",
        ),
        pytest.param(
            keyword_only_record,
            False,
            "handler='keyword_only_record': takes no positional argument",
            id="record-keyword-only",
        ),
    ],
)
def test_handler_the_engine_cannot_call_is_refused_at_registration(
    handler: Any, batch: bool, message: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        _register(handler, batch=batch)
    assert str(caught.value).startswith(message)


def test_explicit_decoder_does_not_skip_the_signature_check() -> None:
    with pytest.raises(ConfigError, match="requires parameter 'session'"):
        decoder_for(two_required, batch=False, decoder=lambda raw: raw)


class Service:
    async def handle(self, record: Record[str], retries: int = 3) -> None: ...


async def optional_extras(
    record: Record[dict[str, Any]], session: TypingOnlyRecord[bytes] | None = None, *, n: int = 1
) -> None: ...
async def variadic(*records: Record[str], **options: object) -> None: ...
async def batch_with_default(records: list[Record[Order]], flush: bool = True) -> None: ...


@pytest.mark.parametrize(
    ("handler", "batch", "raw", "value"),
    [
        (Service().handle, False, b"x", "x"),
        (optional_extras, False, b'{"a": 1}', {"a": 1}),
        (variadic, False, b"x", "x"),
        (batch_with_default, True, b'{"id": 1, "amount": 2}', Order(id=1, amount=2)),
    ],
    ids=["bound-method", "defaults-and-typing-only-extra", "variadic", "batch-default"],
)
def test_extra_parameters_with_defaults_are_accepted(
    handler: Any, batch: bool, raw: bytes, value: object
) -> None:
    _register(handler, batch=batch)
    assert decoder_for(handler, batch=batch, decoder=None)(raw) == value


async def typing_only(record: TypingOnlyRecord[dict[str, Any]]) -> None: ...


def test_annotation_imported_only_for_type_checking_is_a_config_error() -> None:
    with pytest.raises(ConfigError) as caught:
        _register(typing_only)
    message = str(caught.value)
    assert message.startswith(
        "handler='typing_only': annotation 'TypingOnlyRecord[dict[str, Any]]'"
    )
    assert "name 'TypingOnlyRecord' is not defined" in message
    assert "TYPE_CHECKING" in message
    assert "\n" not in message


def test_local_pydantic_model_under_postponed_annotations_is_a_config_error() -> None:
    class LocalOrder(pydantic.BaseModel):
        id: int

    async def handle(record: Record[LocalOrder]) -> None: ...

    with pytest.raises(ConfigError) as caught:
        _register(handle)
    message = str(caught.value)
    assert message.startswith(
        "handler='test_local_pydantic_model_under_postponed_annotations_is_a_config_error"
        ".<locals>.handle': annotation 'Record[LocalOrder]' of parameter 'record' cannot be "
        "resolved (NameError: name 'LocalOrder' is not defined)"
    )
    assert "define models at module level" in message
