"""``fairstream asyncapi``: the app's topics and payloads as an AsyncAPI 3.0 document."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import yaml  # type: ignore[import-untyped]

from fairstream.asyncapi import asyncapi
from fairstream.cli import main
from tests.cli.asyncapi_app import Order, app


def _refs(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref":
                yield value
            else:
                yield from _refs(value)
    elif isinstance(node, list):
        for value in node:
            yield from _refs(value)


def _resolve(document: dict[str, Any], ref: str) -> Any:
    node: Any = document
    for part in ref.removeprefix("#/").split("/"):
        node = node[part]
    return node


def _payload(document: dict[str, Any], topic: str) -> dict[str, Any]:
    (ref,) = document["channels"][topic]["messages"].values()
    return _resolve(document, ref["$ref"])["payload"]  # type: ignore[no-any-return]


def test_every_topic_is_a_channel_with_its_handlers_payload() -> None:
    document = asyncapi(app)
    assert document["asyncapi"] == "3.0.0"
    assert document["info"] == {"title": "billing", "version": "1.0.0"}
    assert [s["host"] for s in document["servers"].values()] == ["kafka-a:9092", "kafka-b:9092"]
    assert set(document["channels"]) == {
        "orders",
        "audit",
        "raw",
        "notes",
        "events",
        "custom",
        "payments",
        "receipts",
    }
    assert _payload(document, "raw") == {"type": "string", "format": "binary"}
    assert _payload(document, "notes") == {"type": "string"}  # a batch: each record's
    assert _payload(document, "events") == {"type": "object"}
    assert _payload(document, "custom") == {}  # its own decoder: any payload
    # A pydantic model: its schema, and the models it names, under components.
    assert _payload(document, "orders") == {"$ref": "#/components/schemas/Order"}
    schemas = document["components"]["schemas"]
    assert schemas["Order"]["properties"]["items"]["items"] == {"$ref": "#/components/schemas/Item"}
    assert schemas["Item"] == Order.model_json_schema()["$defs"]["Item"]
    receive = document["operations"]["on_order.receive"]
    assert receive["action"] == "receive"
    assert receive["bindings"]["kafka"]["groupId"]["enum"] == ["billing"]
    for ref in _refs(document):  # every reference resolves inside the document
        assert _resolve(document, ref) is not None, ref


def test_publishers_are_send_operations_with_the_handlers_return_type() -> None:
    document = asyncapi(app)
    (operation,) = [op for op in document["operations"].values() if op["action"] == "send"]
    assert operation["channel"] == {"$ref": "#/channels/receipts"}
    assert _payload(document, "receipts") == {"$ref": "#/components/schemas/Order"}
    assert "bindings" not in operation  # the group binding is for receiving


def test_the_command_prints_json_or_yaml(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["asyncapi", "tests.cli.asyncapi_app:app", "--title", "Billing"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == asyncapi(app, title="Billing")
    assert main(["asyncapi", "tests.cli.asyncapi_app:app", "--format", "yaml"]) == 0
    assert yaml.safe_load(capsys.readouterr().out) == asyncapi(app)


def test_a_bad_app_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["asyncapi", "tests.cli.asyncapi_app:nothing"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "has no attribute 'nothing'" in err
