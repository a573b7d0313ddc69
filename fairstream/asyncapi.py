"""An AsyncAPI 3.0 document of an app: its topics, what it receives and sends, and the payloads.

``fairstream asyncapi module:app`` prints it (JSON, or YAML with ``--format yaml``);
:func:`asyncapi` builds it as a dict, for a service that serves its own docs.

Each subscribed topic is a channel with a ``receive`` operation per handler, its
message's payload schema taken from the handler's type hint, as the decoder is:
``Record[bytes]`` (or no hint) a binary string, ``Record[str]`` a string,
``Record[dict]``/``list``/``int``/``float``/``bool`` JSON of that type, a pydantic
model its ``model_json_schema()`` (models it names go to
``components/schemas``). A handler with its own ``decoder=`` gets an empty
schema: any payload. Each ``@app.publisher`` topic of a handler is a ``send``
operation whose payload is the handler's return type (``Order | None`` sends an
``Order``; no hint, any payload).
The app's ``group_id`` is each receive operation's Kafka binding.
"""

from __future__ import annotations

import re
import types
import typing
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from fairstream.runtime import App

__all__ = ["asyncapi", "payload_schema"]

_JSON_TYPES: dict[Any, str] = {
    dict: "object",
    list: "array",
    int: "integer",
    float: "number",
    bool: "boolean",
}


@dataclass(frozen=True, slots=True, kw_only=True)
class _Operation:
    name: str
    action: str  # "receive" or "send"
    topic: str
    value_type: Any


def payload_schema(value_type: Any) -> tuple[dict[str, Any], str | None, dict[str, Any]]:
    """(JSON schema, content type, schemas it refers to) of a value of ``value_type``.

    ``None`` (an explicit decoder) is any payload: an empty schema, no content type.
    """
    if value_type is None:
        return {}, None, {}
    if value_type in (bytes, typing.Any, object):
        return {"type": "string", "format": "binary"}, "application/octet-stream", {}
    if value_type is str:
        return {"type": "string"}, "text/plain", {}
    origin = typing.get_origin(value_type) or value_type
    if origin in _JSON_TYPES:
        return {"type": _JSON_TYPES[origin]}, "application/json", {}
    if hasattr(value_type, "model_json_schema"):
        schema = value_type.model_json_schema(ref_template="#/components/schemas/{model}")
        defs = schema.pop("$defs", {})
        name = schema.get("title", value_type.__name__)
        return {"$ref": f"#/components/schemas/{name}"}, "application/json", {**defs, name: schema}
    return {}, None, {}


def _key(text: str) -> str:
    """A component key AsyncAPI allows (``^[a-zA-Z0-9.\\-_]+$``)."""
    return re.sub(r"[^A-Za-z0-9.\-_]", "_", text)


def _without_none(hint: Any) -> Any:
    """``Order | None`` sends an ``Order`` (``None`` sends nothing)."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        rest = [arg for arg in typing.get_args(hint) if arg is not type(None)]
        return rest[0] if len(rest) == 1 else None
    return hint


def _operations(app: App) -> Iterator[_Operation]:
    for sub in app.subscribers:
        for topic in sub.topics:
            name = sub.name if len(sub.topics) == 1 else f"{sub.name}.{topic}"
            yield _Operation(name=name, action="receive", topic=topic, value_type=sub.value_type)
        for topic in sub.publishes:  # @app.publisher: what the handler returns
            sent = _without_none(sub.result_type)
            yield _Operation(
                name=f"{sub.name}.{topic}", action="send", topic=topic, value_type=sent
            )


def asyncapi(app: App, *, title: str | None = None, version: str = "1.0.0") -> dict[str, Any]:
    """The app's AsyncAPI 3.0 document, as a dict ready for ``json.dumps``."""
    channels: dict[str, Any] = {}
    operations: dict[str, Any] = {}
    messages: dict[str, Any] = {}
    schemas: dict[str, Any] = {}
    for op in _operations(app):
        channel = _key(op.topic)
        message = _key(f"{op.name}.{op.action}")  # the operation's and its message's id
        schema, content_type, refs = payload_schema(op.value_type)
        schemas.update(refs)
        messages[message] = {"name": message, "payload": schema} | (
            {"contentType": content_type} if content_type else {}
        )
        entry = channels.setdefault(channel, {"address": op.topic, "messages": {}})
        entry["messages"][message] = {"$ref": f"#/components/messages/{message}"}
        operation: dict[str, Any] = {
            "action": op.action,
            "channel": {"$ref": f"#/channels/{channel}"},
            "messages": [{"$ref": f"#/channels/{channel}/messages/{message}"}],
        }
        if op.action == "receive":
            operation["bindings"] = {
                "kafka": {"groupId": {"type": "string", "enum": [app.group_id]}}
            }
        operations[message] = operation
    document: dict[str, Any] = {
        "asyncapi": "3.0.0",
        "info": {"title": title or app.group_id, "version": version},
        "defaultContentType": "application/json",
    }
    if app.bootstrap:
        document["servers"] = dict(_servers(app.bootstrap.split(",")))
    document |= {"channels": channels, "operations": operations}
    document["components"] = {"messages": messages} | ({"schemas": schemas} if schemas else {})
    return document


def _servers(hosts: Iterable[str]) -> Iterator[tuple[str, dict[str, str]]]:
    for i, host in enumerate(h.strip() for h in hosts if h.strip()):
        yield f"kafka-{i}" if i else "kafka", {"host": host, "protocol": "kafka"}
