"""fairstream: fair, rebalance-friendly asyncio Kafka consumers.

The public API lives here; ``fairstream.assign`` (pure planning),
``fairstream.testing`` (brokers and the in-memory kit) and ``fairstream.spark``
(backfills) are imported explicitly.

The consumer's names (``App``, ``Record``, ...) load with the runtime on first use,
so ``import fairstream.spark`` in a Spark worker, or ``fairstream.assign`` in a
planner, does not import aiokafka and anyio: a Spark query's streaming-source
process and each Python worker start ~0.2 s sooner (``benchmarks/RESULTS.md``).
"""

import importlib
from typing import TYPE_CHECKING

from fairstream._policies import DeadLetterPolicy, RetryPolicy
from fairstream._public import show_public_paths as _show_public_paths
from fairstream.config import (
    ConsumerConfig,
    ParallelRebalance,
    ProducerConfig,
    SchedulerConfig,
    SecurityConfig,
)
from fairstream.errors import (
    BackfillError,
    BrokerError,
    CommitError,
    ConfigError,
    DataLossError,
    FairstreamError,
    HandlerAborted,
    HandlerCancelled,
    HandlerError,
    HandoffFailed,
    MembershipError,
    PlanError,
    StreamError,
)

if TYPE_CHECKING:
    from fairstream.runtime import (
        App,
        AppStats,
        BrokerAdmin,
        CallNext,
        DecodeError,
        Decoder,
        HandlerLatency,
        Health,
        Middleware,
        PartitionStats,
        Record,
        load_app,
        make_assignor,
        serve_status,
    )

__all__ = [
    "App",
    "AppStats",
    "BackfillError",
    "BrokerAdmin",
    "BrokerError",
    "CallNext",
    "CommitError",
    "ConfigError",
    "ConsumerConfig",
    "DataLossError",
    "DeadLetterPolicy",
    "DecodeError",
    "Decoder",
    "FairstreamError",
    "HandlerAborted",
    "HandlerCancelled",
    "HandlerError",
    "HandlerLatency",
    "HandoffFailed",
    "Health",
    "MembershipError",
    "Middleware",
    "ParallelRebalance",
    "PartitionStats",
    "PlanError",
    "ProducerConfig",
    "Record",
    "RetryPolicy",
    "SchedulerConfig",
    "SecurityConfig",
    "StreamError",
    "load_app",
    "make_assignor",
    "serve_status",
]

__version__ = "0.1.0"


# Reprs and docs say ``fairstream.SchedulerConfig``; ``fairstream.runtime`` does the same
# for its names when it is imported.
_show_public_paths(globals(), __all__, __name__)


_SUBMODULES = frozenset({"assign", "logs"})
"""Modules that ``import fairstream`` made reachable while it imported the runtime
(``fairstream.logs.configure(...)``): still reachable, imported on first use."""


def __getattr__(name: str) -> object:
    """A runtime name, imported on first use (see the module's docstring)."""
    if name in _SUBMODULES:
        return importlib.import_module(f"fairstream.{name}")
    if name not in __all__:
        raise AttributeError(f"module 'fairstream' has no attribute {name!r}")
    import fairstream.runtime

    value = getattr(fairstream.runtime, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
