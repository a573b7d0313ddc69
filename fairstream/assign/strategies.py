"""The strategy names the CLI, the runtime and the Spark pipeline agree on."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from fairstream.assign.fair import plan as fair_plan
from fairstream.assign.lag import plan as lag_plan
from fairstream.assign.model import Assignment, Assignor, GroupSnapshot
from fairstream.assign.range import plan as range_plan
from fairstream.assign.roundrobin import plan as roundrobin_plan
from fairstream.assign.sticky import plan as sticky_plan
from fairstream.errors import ConfigError

__all__ = ["STRATEGIES", "plan", "resolve"]

STRATEGIES: Mapping[str, Assignor] = MappingProxyType(
    {
        "range": range_plan,
        "roundrobin": roundrobin_plan,
        "sticky": sticky_plan,
        "fair": fair_plan,
        "lag": lag_plan,
    }
)
"""Strategy name -> planner; the names are the CLI's ``--strategy`` values."""


def resolve(strategy: str, *, field: str = "strategy") -> Assignor:
    """The planner for a strategy name, checked where the name enters (config, CLI).

    :raises ConfigError: ``strategy`` is not one of :data:`STRATEGIES`; ``field``
        names the setting in the message.
    """
    assignor = STRATEGIES.get(strategy)
    if assignor is None:
        raise ConfigError(
            field,
            strategy,
            "unknown assignment strategy",
            f"choose one of {', '.join(STRATEGIES)}",
        )
    return assignor


def plan(strategy: str, snapshot: GroupSnapshot, previous: Assignment | None = None) -> Assignment:
    """Run the named strategy, so callers can take the name from config or the CLI.

    :raises ConfigError: ``strategy`` is not one of :data:`STRATEGIES`.
    """
    return resolve(strategy)(snapshot, previous)
