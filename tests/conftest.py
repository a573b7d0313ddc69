"""Shared fixtures: one real broker per engine for the whole run, fresh names per test.

Set ``FAIRSTREAM_BOOTSTRAP=host:port`` to run the same suite against an external
cluster instead of the embedded engines, or ``FAIRSTREAM_TEST_ENGINE=noida`` (or
``tansu``) to run the engine-parametrized tests on that engine alone. Every test that
needs a real broker is marked ``broker``, so ``-m "not broker"`` runs the rest.
"""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import hypothesis
import pytest
import structlog

from fairstream.testing import ENGINES, EmbeddedBroker, EngineInfo
from tests.support.backends import Backend, KafkaBackend, MemoryBackend
from tests.support.kafka_helpers import create_topic
from tests.support.xdist_files import FileScheduling

# Hypothesis fails an example that runs past 200 ms by default: a timing bound that a
# loaded machine breaks (a Spark planning property failed so in a busy run). Speed is
# measured by benchmarks, never by tests, so the suite runs without deadlines.
hypothesis.settings.register_profile("fairstream", deadline=None)
hypothesis.settings.load_profile("fairstream")

EXTERNAL = os.environ.get("FAIRSTREAM_BOOTSTRAP")


@dataclass(frozen=True)
class Broker:
    """What a test needs to know about the broker it runs on."""

    engine: str
    bootstrap: str
    info: EngineInfo | None  # None for an external cluster: assume real Kafka
    process: EmbeddedBroker | None = None

    @property
    def keeps_commit_metadata(self) -> bool:
        return self.info is None or self.info.keeps_commit_metadata

    def instance_id(self, name: str) -> str | None:
        """A static member id where the engine needs one (see ENGINES' quirks).

        noida never evicts a member, and answers a commit racing a rebalance with
        ILLEGAL_GENERATION, after which a client rejoins under a new member id and
        the old id stalls the group. A static instance id replaces the old member.
        """
        if self.info is not None and not self.info.evicts_dead_members:
            return name
        return None


ONLY_ENGINE = os.environ.get("FAIRSTREAM_TEST_ENGINE")
_ENGINE_PARAMS = ["external"] if EXTERNAL else [ONLY_ENGINE] if ONLY_ENGINE else list(ENGINES)


def pytest_configure(config: pytest.Config) -> None:
    if ONLY_ENGINE is not None and ONLY_ENGINE not in ENGINES:
        raise pytest.UsageError(
            f"FAIRSTREAM_TEST_ENGINE={ONLY_ENGINE!r} is not a broker engine; "
            f"set it to one of {', '.join(sorted(ENGINES))}, or unset it for all"
        )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark ``broker`` every test that reaches the embedded brokers through the fixtures
    below, or is parametrized by ``engine``, whether or not its module says so; the
    in-memory backend's cases are not."""
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        on_memory = params.get("backend") == "memory"
        uses_brokers = "_brokers" in getattr(item, "fixturenames", ()) or "engine" in params
        if uses_brokers and not on_memory:
            item.add_marker(pytest.mark.broker)


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> FileScheduling | None:
    """``--dist loadfile`` (``make test``) as :class:`FileScheduling` spreads it."""
    return FileScheduling(config, log) if config.getvalue("dist") == "loadfile" else None


def _plain_traceback_chain() -> list[structlog.typing.Processor]:
    """structlog's default chain, its console renderer drawing tracebacks plainly.

    With rich installed the default renderer draws each logged exception with rich,
    ~50 ms of CPU apiece: the reliability tests log thousands (retries, dead
    letters), and rich tracebacks made tests/reliability/test_bad_input.py take
    108 s instead of 34 s. The line format is the default's, so what a test reads
    of a log line is unchanged; only the traceback under it is drawn as Python does.
    """
    *chain, renderer = structlog.get_config()["processors"]
    colors = renderer.colors if isinstance(renderer, structlog.dev.ConsoleRenderer) else False
    plain = structlog.dev.ConsoleRenderer(
        colors=colors, exception_formatter=structlog.dev.plain_traceback
    )
    return [*chain, plain]


@pytest.fixture(autouse=True)
def _fresh_logging() -> Iterator[None]:
    """Undo logs.configure() calls (in-process CLI tests) so tests do not see each other's;
    each test starts on structlog's defaults with plain tracebacks."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    structlog.reset_defaults()
    structlog.configure(processors=_plain_traceback_chain())
    yield
    structlog.reset_defaults()
    root.handlers[:] = handlers
    root.setLevel(level)
    logging.captureWarnings(False)


@pytest.fixture(scope="session")
def _brokers() -> Iterator[dict[str, Broker]]:
    started: dict[str, Broker] = {}
    yield started
    for broker in started.values():
        if broker.process is not None:
            broker.process.stop()


def _get_broker(brokers: dict[str, Broker], engine: str) -> Broker:
    if engine not in brokers:
        if engine == "external":
            assert EXTERNAL is not None
            brokers[engine] = Broker(engine, EXTERNAL, None)
        else:
            process = EmbeddedBroker(engine).start()  # type: ignore[arg-type]
            brokers[engine] = Broker(engine, process.bootstrap, process.info, process)
    return brokers[engine]


@pytest.fixture(params=_ENGINE_PARAMS)
def broker(request: pytest.FixtureRequest, _brokers: dict[str, Broker]) -> Broker:
    """A running broker; parametrized so a test runs on every engine."""
    return _get_broker(_brokers, request.param)


@pytest.fixture(params=[*_ENGINE_PARAMS, "memory"])
def backend(request: pytest.FixtureRequest, _brokers: dict[str, Broker]) -> Backend:
    """Where the behaviour suite runs: each real engine, and the in-memory kit."""
    if request.param == "memory":
        return MemoryBackend()
    broker = _get_broker(_brokers, request.param)
    evicts = broker.info is None or broker.info.evicts_dead_members
    return KafkaBackend(broker.engine, broker.bootstrap, evicts)


@pytest.fixture
def noida(_brokers: dict[str, Broker]) -> Broker:
    """The noida engine (or the external cluster): keeps commit metadata, restartable."""
    return _get_broker(_brokers, "external" if EXTERNAL else "noida")


@pytest.fixture
def own_noida(noida: Broker) -> Iterator[Broker]:
    """A noida of this test alone, stopped after it (the external cluster where set).

    For tests that leave static members behind: noida never evicts them, and a test
    that runs them as subprocesses cannot make them leave (a static member does not
    send LeaveGroup). Starting one costs ~0.1 s.
    """
    if noida.process is None:
        yield noida
        return
    process = EmbeddedBroker("noida").start()
    try:
        yield Broker("noida", process.bootstrap, process.info, process)
    finally:
        process.stop()


@pytest.fixture
def tansu(_brokers: dict[str, Broker]) -> Broker:
    """The tansu engine: evicts members whose process died."""
    if EXTERNAL:
        return _get_broker(_brokers, "external")
    return _get_broker(_brokers, "tansu")


@pytest.fixture
def group_id(request: pytest.FixtureRequest) -> str:
    """A group id no other test uses (noida never evicts dead members)."""
    return f"g-{request.node.name[:40]}-{uuid.uuid4().hex[:8]}"


TopicFactory = Callable[..., Awaitable[str]]


@pytest.fixture
async def make_topic(broker: Broker) -> AsyncIterator[TopicFactory]:
    """Create uniquely named topics on the test's broker: ``await make_topic(partitions=3)``."""

    async def factory(partitions: int = 3, prefix: str = "t") -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:10]}"
        await create_topic(broker.bootstrap, name, partitions)
        return name

    yield factory
