"""One log stream: with ``--log-format json`` every stderr line is a JSON object,
the standard library's loggers (aiokafka, uvicorn, the user's own) included, at the
level ``--log-level`` sets."""

from __future__ import annotations

import json
import logging
import logging.config
import os
import signal
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
import structlog

from fairstream import logs
from tests.conftest import Broker, TopicFactory
from tests.support.kafka_helpers import produce

REPO = Path(__file__).parents[2]


async def _run_app(
    bootstrap: str, topic: str, group_id: str, level: str, **env: str
) -> list[dict[str, object]]:
    """``fairstream run`` the log app until it has logged a handled record; its stderr."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("FAIRSTREAM_")}
    options = ["--bootstrap", bootstrap, "--log-format", "json", "--log-level", level]
    process = await anyio.open_process(
        [sys.executable, "-m", "fairstream", "run", "tests.cli.log_app:app", *options],
        cwd=REPO,
        env=clean | {"LOG_TOPIC": topic, "LOG_GROUP": group_id} | env,
        stderr=subprocess.PIPE,
    )
    async with process:
        assert process.stderr is not None
        text = b""
        with anyio.fail_after(60):
            async for chunk in process.stderr:
                text += chunk
                if b"looks odd" in text:
                    break
        process.send_signal(signal.SIGTERM)
        with anyio.fail_after(60):
            text += b"".join([chunk async for chunk in process.stderr])
            assert await process.wait() == 0, text.decode()
    lines = text.decode().splitlines()
    assert lines
    return [json.loads(line) for line in lines]  # every line, or this fails


def _from(events: list[dict[str, object]], logger: str) -> list[dict[str, object]]:
    return [e for e in events if str(e.get("logger", "")).startswith(logger)]


@pytest.mark.broker
@pytest.mark.parametrize(
    ("level", "quiet", "aiokafka_levels", "shop_levels"),
    [
        pytest.param("INFO", "0", {"info"}, ["info", "warning"], id="info"),
        pytest.param("WARNING", "0", set(), ["warning"], id="warning"),
        pytest.param("INFO", "1", set(), ["info", "warning"], id="info-aiokafka-quieted"),
    ],
)
async def test_every_stderr_line_is_json_at_the_chosen_level(
    broker: Broker,
    make_topic: TopicFactory,
    group_id: str,
    level: str,
    quiet: str,
    aiokafka_levels: set[str],
    shop_levels: list[str],
) -> None:
    topic = await make_topic(partitions=1)
    await produce(broker.bootstrap, topic, [(0, b"x")])
    events = await _run_app(broker.bootstrap, topic, group_id, level, LOG_QUIET_AIOKAFKA=quiet)
    # aiokafka's INFO lines (joining the group, the assignment) follow --log-level,
    # unless the app quieted aiokafka itself.
    assert {e["level"] for e in _from(events, "aiokafka")} & {"info"} == aiokafka_levels
    shop = _from(events, "shop")
    assert [e["level"] for e in shop] == shop_levels
    assert shop[-1]["event"] == "order 0 looks odd"
    # The handler's record coordinates reach stdlib lines too.
    assert (shop[-1]["topic"], shop[-1]["partition"], shop[-1]["offset"]) == (topic, 0, 0)
    (warned,) = _from(events, "py.warnings")
    assert "the shop's settings are the defaults" in str(warned["event"])
    assert any(e["event"] == "consumer_stopped" for e in events) == (level == "INFO")


def test_uvicorns_own_handlers_give_way_to_the_json_stream(
    capsys: pytest.CaptureFixture[str],
) -> None:
    uvicorn_config = pytest.importorskip("uvicorn.config", reason="uvicorn is a dev dependency")
    logging.config.dictConfig(uvicorn_config.LOGGING_CONFIG)  # what uvicorn.run() does
    try:
        logs.configure("json", "INFO")
        logging.getLogger("uvicorn.error").info("Application startup complete.")
        logging.getLogger("uvicorn.access").info(
            '%s - "%s %s HTTP/%s" %d', "127.0.0.1:5000", "GET", "/health", "1.1", 200
        )
        try:
            raise ValueError("bad request body")
        except ValueError:
            logging.getLogger("uvicorn.error").exception("Exception in ASGI application")
        structlog.get_logger().info("order_received", amount=3)
    finally:
        for name in ("uvicorn", "uvicorn.access"):
            logging.getLogger(name).propagate = True
    lines = capsys.readouterr().err.splitlines()
    events = [json.loads(line) for line in lines]
    assert [(e["logger"], e["level"]) for e in events[:3]] == [
        ("uvicorn.error", "info"),
        ("uvicorn.access", "info"),
        ("uvicorn.error", "error"),
    ]
    assert events[1]["event"] == '127.0.0.1:5000 - "GET /health HTTP/1.1" 200'
    assert events[2]["exception"][0]["exc_type"] == "ValueError"
    assert events[3]["event"] == "order_received"


def test_configuring_twice_keeps_one_handler(capsys: pytest.CaptureFixture[str]) -> None:
    logs.configure("json", "INFO")
    logs.configure("console", "WARNING")
    logging.getLogger("shop").info("not shown at WARNING")
    logging.getLogger("shop").warning("shown once")
    err = capsys.readouterr().err
    assert err.count("shown once") == 1 and "not shown" not in err
    assert not err.startswith("{")  # the console renderer, the last one configured
