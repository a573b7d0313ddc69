"""A failed record says why: its traceback in the log (once) and in the dead letter, and
every field a validation error names."""

from __future__ import annotations

import json
from typing import Any

import anyio
import pydantic
import pytest
from structlog.testing import capture_logs

from fairstream import DeadLetterPolicy, HandlerError, Record, RetryPolicy, SchedulerConfig
from fairstream.logs import configure
from fairstream.runtime.flow._dead_letter import TRACEBACK_LIMIT, bounded_traceback
from tests.support.backends import Backend

RETRY_TWICE = RetryPolicy(attempts=3, backoff=0.01)
QUICK = SchedulerConfig(commit_interval=0.1)


def _charge(amount: int) -> None:
    raise RuntimeError(f"card declined for {amount}")


def _events(stderr: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]


async def _fail_first(backend: Backend, group_id: str, values: list[bytes], handler: Any) -> Any:
    """Run ``handler`` over ``values``, of which the first fails; return its dead letter.

    ``handler`` sets ``handler.done`` on the last record: in one partition, the first
    one was dead-lettered by then.
    """
    topic = await backend.create_topic(1)
    await backend.produce(topic, [(0, value) for value in values])
    app = backend.app(group_id=group_id, retry=RETRY_TWICE, scheduler=QUICK)
    app.subscriber(topic)(handler)
    async with app:
        with anyio.fail_after(30):
            await handler.done.wait()
    (dead,) = await backend.read_all(f"{topic}.dlq", 1, expected=1)
    return dead


def _charging() -> Any:
    async def handle(record: Record[dict[str, int]]) -> None:
        if record.offset == 1:
            handle.done.set()  # type: ignore[attr-defined]
        else:
            _charge(record.value["amount"])

    handle.done = anyio.Event()  # type: ignore[attr-defined]
    return handle


async def test_a_failure_is_logged_once_with_its_frames_and_dead_lettered_with_them(
    backend: Backend, group_id: str, capsys: pytest.CaptureFixture[str]
) -> None:
    configure("json", "INFO")
    dead = await _fail_first(backend, group_id, [b'{"amount": 7}', b"{}"], _charging())

    events = _events(capsys.readouterr().err)
    with_traceback = [e for e in events if "exception" in e]
    assert [e["event"] for e in with_traceback] == ["record_dead_lettered"]
    (failure,) = with_traceback[0]["exception"]
    assert failure["exc_type"] == "RuntimeError"
    assert failure["exc_value"] == "card declined for 7"
    assert [frame["name"] for frame in failure["frames"]][-2:] == ["handle", "_charge"]
    assert [e["attempt"] for e in events if e["event"] == "handler_retry"] == [1, 2]

    headers = dict(dead.headers)
    assert headers["fairstream.error.type"] == b"RuntimeError"
    assert headers["fairstream.error.message"] == b"card declined for 7"
    trace = headers["fairstream.error.traceback"]
    assert trace.startswith(b"Traceback (most recent call last):")
    assert b"in _charge\n" in trace
    assert trace.endswith(b"RuntimeError: card declined for 7\n")


async def test_the_console_log_shows_the_usual_traceback_once(
    backend: Backend, group_id: str, capsys: pytest.CaptureFixture[str]
) -> None:
    configure("console", "INFO")
    await _fail_first(backend, group_id, [b'{"amount": 7}', b"{}"], _charging())

    err = capsys.readouterr().err
    assert err.count("Traceback (most recent call last)") == 1
    assert "in _charge" in err
    assert "RuntimeError: card declined for 7" in err


class Order(pydantic.BaseModel):
    sku: str
    quantity: int
    price: float


def _ordering() -> Any:
    async def handle(record: Record[Order]) -> None:
        handle.done.set()  # type: ignore[attr-defined]

    handle.done = anyio.Event()  # type: ignore[attr-defined]
    return handle


async def test_a_validation_error_keeps_every_field_and_reason(
    backend: Backend, group_id: str, capsys: pytest.CaptureFixture[str]
) -> None:
    configure("json", "INFO")
    invalid = b'{"quantity": "two", "price": "free"}'
    valid = b'{"sku": "a", "quantity": 1, "price": 2.5}'
    dead = await _fail_first(backend, group_id, [invalid, valid], _ordering())

    message = dict(dead.headers)["fairstream.error.message"].decode()
    assert message == (
        "value is not a valid Order: 3 validation errors: sku: Field required; "
        "quantity: Input should be a valid integer, unable to parse string as an integer "
        "(input: 'two'); price: Input should be a valid number, unable to parse string as "
        "a number (input: 'free')"
    )
    (event,) = [e for e in _events(capsys.readouterr().err) if e["event"] == "record_dead_lettered"]
    assert event["error"] == f"DecodeError: {message}"
    # The pydantic error the message came from is in the traceback, as its cause.
    assert [e["exc_type"] for e in event["exception"]] == ["DecodeError", "ValidationError"]


def test_a_dead_letter_traceback_keeps_its_last_4_kb() -> None:
    error = ValueError("0")
    for n in range(1, 100):  # a long chain of causes: about 20 KB of traceback
        try:
            raise ValueError(str(n)) from error
        except ValueError as exc:
            error = exc
    trace = bounded_traceback(error)
    assert len(trace) <= TRACEBACK_LIMIT == 4096
    assert trace.startswith(b"...\n")
    assert trace.endswith(b"ValueError: 99\n")


@pytest.mark.parametrize("policy", ["skip", "stop"])
async def test_a_skipped_or_stopping_failure_carries_its_traceback_too(
    backend: Backend, group_id: str, policy: str
) -> None:
    topic = await backend.create_topic(1)
    await backend.produce(topic, [(0, b'{"amount": 7}'), (0, b"{}")])
    app = backend.app(
        group_id=group_id,
        retry=RETRY_TWICE,
        scheduler=QUICK,
        dead_letter=DeadLetterPolicy(on_error=policy),  # type: ignore[arg-type]
    )
    handle = app.subscriber(topic)(_charging())
    with capture_logs() as logs:
        try:
            async with app:
                with anyio.fail_after(30):
                    await handle.done.wait()
        except HandlerError:
            assert policy == "stop"

    failures = [e for e in logs if "exc_info" in e]
    assert [e["event"] for e in failures] == [
        "record_skipped" if policy == "skip" else "handler_failed"
    ]
    assert str(failures[0]["exc_info"]) == "card declined for 7"
