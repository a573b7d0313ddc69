"""The strategy names the CLI, the runtime and the Spark pipeline agree on."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType

from fairstream.assign.fair import plan as fair_plan
from fairstream.assign.lag import plan as lag_plan
from fairstream.assign.model import Assignment, Assignor, GroupSnapshot
from fairstream.assign.range import plan as range_plan
from fairstream.assign.roundrobin import plan as roundrobin_plan
from fairstream.assign.sticky import plan as sticky_plan
from fairstream.errors import ConfigError

__all__ = ["STRATEGIES", "plan", "resolve", "strategy_names"]

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


def strategy_names(value: str | Sequence[str], *, field: str = "assignor") -> tuple[str, ...]:
    """Strategy names in order of preference, from one name, a comma list or a sequence.

    Kafka's ``partition.assignment.strategy`` is such a list: a group runs the first
    protocol every member offers, so old and new members can share it during a roll.
    ``"lag,roundrobin"`` (the form of an environment variable or a command-line
    option) and ``["lag", "roundrobin"]`` are the same list.

    :raises ConfigError: not a name or a sequence of names, no name at all, an
        unknown name, or a name listed twice; ``field`` names the setting.
    """
    names = [n for n in value.split(",") if n.strip()] if isinstance(value, str) else value
    if not isinstance(names, Sequence) or not all(isinstance(n, str) for n in names):
        raise ConfigError(
            field,
            value,
            "must be a strategy name or a list of them",
            "e.g. 'lag' or ['lag', 'roundrobin', 'range']",
        )
    strategies = tuple(name.strip() for name in names)
    if not any(strategies):
        raise ConfigError(
            field,
            value,
            "names no assignment strategy",
            f"give one or more of {', '.join(STRATEGIES)}, in order of preference",
        )
    for index, name in enumerate(strategies):
        resolve(name, field=field)
        if name in strategies[:index]:
            raise ConfigError(
                field, value, f"names {name!r} twice", "list each strategy once, best first"
            )
    return strategies


def plan(strategy: str, snapshot: GroupSnapshot, previous: Assignment | None = None) -> Assignment:
    """Run the named strategy, so callers can take the name from config or the CLI.

    :raises ConfigError: ``strategy`` is not one of :data:`STRATEGIES`.
    """
    return resolve(strategy)(snapshot, previous)
