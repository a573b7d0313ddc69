"""Decoders are picked once from the handler's type hint (or given), and fail clearly."""

from __future__ import annotations

from typing import Any

import pydantic
import pytest

from fairstream import ConfigError, DecodeError, Record
from fairstream.runtime._decode import decoder_for


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
