"""Checks of assignor settings that the App runs when it is built, not at the first join."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from fairstream.assign import strategy_names
from fairstream.errors import ConfigError

__all__ = ["COOPERATIVE_STRATEGIES", "Cooperative", "check_cooperative", "check_replan_interval"]

Cooperative = bool | Literal["upgrade"]
"""``True``: rebalance cooperatively (KIP-429); ``"upgrade"``: rebalance eagerly but
offer the cooperative protocols too, the first step of a rolling upgrade."""

COOPERATIVE_STRATEGIES = frozenset({"sticky", "lag"})
"""The strategies that keep partitions with their owners, the point of KIP-429:
under ``fair``, ``range`` or ``roundrobin`` a join moves partitions regardless."""


def check_replan_interval(strategy: str | Sequence[str], interval_s: float | None) -> float | None:
    """``interval_s`` if re-planning on drift can use it.

    :raises ConfigError: an interval without the ``lag`` strategy, or not above 0.
    """
    if interval_s is not None and ("lag" not in strategy_names(strategy) or not interval_s > 0):
        raise ConfigError(
            "replan_interval",
            interval_s,
            "re-planning on drift needs the lag strategy and an interval above 0 seconds",
            "offer 'lag' in assignor and give seconds, e.g. 300",
        )
    return interval_s


def check_cooperative(strategy: str | Sequence[str], cooperative: Cooperative) -> Cooperative:
    """``cooperative`` if every offered strategy can plan for cooperative members.

    :raises ConfigError: cooperative with a strategy other than ``sticky`` and ``lag``,
        or a value other than ``True``, ``False`` and ``"upgrade"``.
    """
    if cooperative not in (True, False, "upgrade"):
        raise ConfigError(
            "cooperative", cooperative, "unknown mode", "use True, False or 'upgrade'"
        )
    if cooperative and (other := sorted(set(strategy_names(strategy)) - COOPERATIVE_STRATEGIES)):
        raise ConfigError(
            "cooperative",
            other,
            "cooperative rebalancing needs a strategy that keeps partitions with their owners",
            "use assignor='sticky' or assignor='lag'",
        )
    return cooperative
