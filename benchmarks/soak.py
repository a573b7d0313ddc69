"""Reliability soak: the long versions of the tests/reliability scenarios.

Each scenario produces N records with unique ids, injects its fault, and counts
every id end to end (a handled or dead-lettered record counts once; a record
never seen is lost; a second sighting is a duplicate). The scenarios are the
same functions the quick suite asserts on, only larger:

- kill -9 + restart: ``fairstream run`` SIGKILLed at 30%, restarted (tansu:
  dynamic member, evicted after the session timeout; noida: same instance id);
- rebalance storm: one member stays, ``--storm-events`` joins and leaves of three
  others over ``--storm-seconds`` while the records are produced;
- broker restart: a dedicated noida broker restarted ``--restarts`` times on its
  data directory while a static member consumes (noida only: tansu is memory-only);
- handler errors: 5% of records always fail (dead-lettered after 3 attempts),
  10% fail once (retried);
- poison: 1 record in 100 is invalid UTF-8, invalid JSON, ~1 MB invalid, ~1 MB
  valid, or an empty key and value (capped at ``--poison-records``);
- broker outage: a dedicated noida broker stopped for ``--outage`` seconds while
  ``fairstream run`` consumes, then started on its data (``outage-term``: SIGTERM
  sent during the outage, a second process finishes; noida only);
- flaky network: tansu behind a TCP fault proxy that adds latency, resets every
  connection and blackholes them, ``--flaky-rounds`` times (tansu only: noida cannot
  advertise the proxy's port);
- retention skip: the group committed a tenth of each partition, then the first
  third was deleted (``DeleteRecords``; noida only: tansu does not serve it); every
  record left is handled and the deleted unread ones are counted in ``app.stats()``;
- combined (only with ``--only combined``): a storm of ``--storm-events`` joins and
  leaves over ``--storm-seconds``, a kill -9 of a ``fairstream run`` member and a
  restart of a dedicated noida broker in one run, with ``parallel_rebalance=True``;
- storm variants (only with ``--only``): ``storm-pr`` with parallel rebalance,
  ``storm-coop`` and ``storm-pr-coop`` with cooperative rebalancing (KIP-429,
  ``assignor="sticky"``), ``storm-sticky`` and ``storm-pr-sticky`` their eager twins
  under the same assignor, so that a pair differs by the protocol alone;
  ``storm-pr-leave`` and ``storm-pr-coop-leave`` as ``storm-pr`` and ``storm-pr-coop``
  but a static member that goes leaves its group (``leave_group_on_stop``).

    python benchmarks/soak.py                         # everything, 200k records
    python benchmarks/soak.py --records 20000 --only storm kill --engines noida
    python benchmarks/soak.py --only storm-pr-sticky storm-pr-coop --engines noida
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path

import anyio

# Run as a script from the repository root: the scenarios live with the tests.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fairstream import logs
from fairstream.testing import EmbeddedBroker
from tests.reliability.checker import Result
from tests.reliability.combined import combined_faults
from tests.reliability.flaky import flaky_network
from tests.reliability.outage import broker_outage
from tests.reliability.retention import retention_skip
from tests.reliability.scenarios import (
    broker_restart,
    handler_failures,
    kill_and_restart,
    poison_records,
    rebalance_storm,
)


@dataclasses.dataclass(frozen=True, slots=True)
class StormVariant:
    """How every member of a storm consumes (:func:`rebalance_storm`'s arguments)."""

    parallel_rebalance: bool = False
    assignor: str = "fair"
    cooperative: bool = False
    leaves: bool = False


STORM_VARIANTS = {
    "storm": StormVariant(),
    "storm-pr": StormVariant(parallel_rebalance=True),
    "storm-sticky": StormVariant(assignor="sticky"),
    "storm-pr-sticky": StormVariant(parallel_rebalance=True, assignor="sticky"),
    "storm-coop": StormVariant(assignor="sticky", cooperative=True),
    "storm-pr-coop": StormVariant(parallel_rebalance=True, assignor="sticky", cooperative=True),
    "storm-pr-leave": StormVariant(parallel_rebalance=True, leaves=True),
    "storm-pr-coop-leave": StormVariant(
        parallel_rebalance=True, assignor="sticky", cooperative=True, leaves=True
    ),
}
"""The storm's rows: parallel rebalance or not, eager or cooperative (KIP-429). The
cooperative rows use ``sticky`` (cooperative refuses the default ``fair``), so the
``*-sticky`` rows are their eager twins: the pair differs by the protocol only. In the
``*-leave`` rows a static member that goes leaves its group
(``ConsumerConfig.leave_group_on_stop``); elsewhere it stays until it comes back, and
noida, which never evicts, holds its partitions (and the rebalance) meanwhile."""
SCENARIOS = (
    "kill",
    "storm",
    "restart",
    "errors",
    "poison",
    "outage",
    "outage-term",
    "flaky",
    "retention",
    "combined",
    "kill-pr",
    *(name for name in STORM_VARIANTS if name != "storm"),
)
OPT_IN = ("combined", "kill-pr", *(name for name in STORM_VARIANTS if name != "storm"))
"""Run only when named with --only: the parallel-rebalance, sticky and cooperative
rows and the long combined run."""
DEFAULT = tuple(name for name in SCENARIOS if name not in OPT_IN)
ENGINE_OF = {
    "outage": "noida",
    "outage-term": "noida",
    "flaky": "tansu",
    "retention": "noida",
    "combined": "noida",
}
"""Scenarios that run on one engine only, and that engine."""
HEADER = ("scenario", "engine", "records", "lost", "duplicated", "seconds")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Long reliability scenarios on the embedded brokers; prints a table of "
        "records, lost, duplicated and seconds per scenario (markdown, for RESULTS.md).",
    )
    parser.add_argument("--records", type=int, default=200_000, help="records per scenario")
    parser.add_argument("--partitions", type=int, default=6, help="partitions per topic")
    parser.add_argument("--storm-events", type=int, default=20, help="joins + leaves")
    parser.add_argument("--storm-seconds", type=float, default=60.0, help="storm length")
    parser.add_argument("--restarts", type=int, default=3, help="broker restarts (noida)")
    parser.add_argument(
        "--poison-records", type=int, default=20_000, help="records in the poison scenario"
    )
    parser.add_argument("--seed", type=int, default=2026, help="seed of the handler errors")
    parser.add_argument("--outage", type=float, default=30.0, help="seconds the broker is away")
    parser.add_argument("--flaky-rounds", type=int, default=3, help="rounds of network faults")
    parser.add_argument(
        "--engines",
        nargs="+",
        choices=["noida", "tansu"],
        default=["noida", "tansu"],
        help="embedded brokers to run each scenario on (a scenario that needs one runs there only)",
    )
    parser.add_argument(
        "--only",
        nargs="+",
        choices=SCENARIOS,
        default=list(DEFAULT),
        help="scenarios to run (default: all but combined and the storm and kill variants: "
        "*-pr run with App(parallel_rebalance=True), which tansu refuses (it consumes "
        "plainly there); storm-coop and storm-pr-coop rebalance cooperatively (KIP-429, "
        "assignor sticky) and storm-sticky and storm-pr-sticky are their eager twins; "
        "storm-pr-leave and storm-pr-coop-leave: static members that go leave the group)",
    )
    parser.add_argument(
        "--log-level",
        default="CRITICAL",
        help="fairstream's log level on stderr (default CRITICAL: the errors scenario "
        "dead-letters thousands of records, each an error event)",
    )
    return parser.parse_args(argv)


Runner = Callable[[str, bool, Path], Awaitable[Result]]


def runners(args: argparse.Namespace) -> dict[str, Runner]:
    n, parts = args.records, args.partitions

    async def kill(bootstrap: str, static: bool, work: Path, pr: bool = False) -> Result:
        outcome = await kill_and_restart(
            bootstrap,
            static=static,
            records=n,
            partitions=parts,
            workdir=work,
            delay=0.0001,
            parallel_rebalance=pr,
            wait_limit=1_800,
        )
        # Anything duplicated outside the uncommitted window is a bug: say so loudly.
        # With parallel rebalance the open shadow ranges (commit metadata) are
        # uncommitted too, and the window read from offsets alone does not hold them.
        extra = outcome.result.duplicated_ids - outcome.window
        if extra and not pr:
            print(f"!! {len(extra)} duplicates outside the uncommitted window", file=sys.stderr)
        return outcome.result

    async def storm(bootstrap: str, static: bool, work: Path, variant: StormVariant) -> Result:
        outcome = await rebalance_storm(
            bootstrap,
            static=static,
            records=n,
            partitions=parts,
            events=args.storm_events,
            seconds=args.storm_seconds,
            workdir=work,
            parallel_rebalance=variant.parallel_rebalance,
            assignor=variant.assignor,
            cooperative=variant.cooperative,
            leaves=variant.leaves,
            wait_limit=1_800,
        )
        for crash in outcome.crashes:
            print(f"!! member crashed during the storm: {crash}", file=sys.stderr)
        if not outcome.crashes:
            return outcome.result
        # A crash is a failure even when the restarted member lost nothing: show it.
        label = f"{outcome.result.scenario}, {len(outcome.crashes)} member crash(es)"
        return dataclasses.replace(outcome.result, scenario=label)

    async def restart(bootstrap: str, static: bool, work: Path) -> Result:
        outcome = await broker_restart(
            records=n, partitions=parts, restarts=args.restarts, workdir=work, wait_limit=1_800
        )
        return outcome.result

    async def errors(bootstrap: str, static: bool, work: Path) -> Result:
        outcome = await handler_failures(
            bootstrap,
            static=static,
            records=n,
            partitions=parts,
            permanent_rate=0.05,
            transient_rate=0.10,
            seed=args.seed,
            workdir=work,
            wait_limit=1_800,
        )
        return outcome.result

    async def poison(bootstrap: str, static: bool, work: Path) -> Result:
        outcome = await poison_records(
            bootstrap,
            static=static,
            records=args.poison_records,
            partitions=parts,
            every=100,
            large=1_000_000,
            workdir=work,
            wait_limit=1_800,
        )
        return outcome.result

    async def outage(bootstrap: str, static: bool, work: Path, term: bool = False) -> Result:
        outcome = await broker_outage(
            records=n,
            partitions=parts,
            outage=args.outage,
            workdir=work,
            sigterm_during_outage=term,
            wait_limit=1_800,
        )
        if (outcome.ready_during, outcome.ready_after) != (503, 200):
            print(
                f"!! /ready answered {outcome.ready_during} in the outage, "
                f"{outcome.ready_after} after",
                file=sys.stderr,
            )
        if outcome.unhandled_below_commit:
            print(f"!! committed past: {outcome.unhandled_below_commit}", file=sys.stderr)
        if outcome.exit_code or outcome.last_exit_code:
            print(f"!! exit codes {outcome.exit_code}, {outcome.last_exit_code}", file=sys.stderr)
        return outcome.result

    async def flaky(bootstrap: str, static: bool, work: Path) -> Result:
        outcome = await flaky_network(
            records=n, partitions=parts, workdir=work, rounds=args.flaky_rounds, wait_limit=1_800
        )
        return outcome.result

    async def retention(bootstrap: str, static: bool, work: Path) -> Result:
        outcome = await retention_skip(
            bootstrap, static=static, records=n, partitions=parts, workdir=work, wait_limit=1_800
        )
        if outcome.counted != outcome.deleted_unread:
            print(
                f"!! {outcome.deleted_unread} records deleted unread, "
                f"{outcome.counted} counted in app.stats()",
                file=sys.stderr,
            )
        return outcome.result

    async def combined(bootstrap: str, static: bool, work: Path) -> Result:
        outcome = await combined_faults(
            records=n,
            partitions=parts,
            events=args.storm_events,
            seconds=args.storm_seconds,
            workdir=work,
            wait_limit=1_800,
        )
        for crash in outcome.crashes:
            print(f"!! member crashed in the combined run: {crash}", file=sys.stderr)
        if outcome.exit_code:
            print(f"!! the process exited {outcome.exit_code} on SIGTERM", file=sys.stderr)
        if outcome.not_on_broker:
            # The broker's loss, not the consumer's: the row counts what the broker kept.
            print(
                f"!! {outcome.not_on_broker} acknowledged records were not on the broker "
                "after its restart (counted out of the row's records)",
                file=sys.stderr,
            )
        return outcome.result

    storms: dict[str, Runner] = {
        name: partial(storm, variant=variant) for name, variant in STORM_VARIANTS.items()
    }
    return {
        **storms,
        "combined": combined,
        "retention": retention,
        "outage": outage,
        "outage-term": partial(outage, term=True),
        "flaky": flaky,
        "kill": kill,
        "restart": restart,
        "errors": errors,
        "poison": poison,
        "kill-pr": partial(kill, pr=True),
    }


def markdown(rows: list[tuple[str, ...]]) -> str:
    widths = [max(len(row[i]) for row in [HEADER, *rows]) for i in range(len(HEADER))]

    def line(cells: tuple[str, ...]) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"

    rule = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return "\n".join([line(HEADER), rule, *(line(row) for row in rows)])


async def soak(args: argparse.Namespace) -> list[tuple[str, ...]]:
    rows: list[tuple[str, ...]] = []
    run = runners(args)
    with tempfile.TemporaryDirectory(prefix="fairstream-soak-") as tmp:
        work = Path(tmp)
        for engine in args.engines:
            broker = EmbeddedBroker(engine)
            await anyio.to_thread.run_sync(broker.start)
            try:
                # noida never evicts a member: every member gets an instance id there.
                static = not broker.info.evicts_dead_members
                for name in args.only:
                    if name == "restart" and not broker.info.restartable:
                        continue
                    if ENGINE_OF.get(name, engine) != engine:
                        continue
                    started = time.monotonic()
                    result = await run[name](broker.bootstrap, static, work)
                    scenario, records, lost, duplicated, seconds = result.row()
                    rows.append((scenario, engine, records, lost, duplicated, seconds))
                    print(
                        f"{scenario} on {engine}: {lost} lost, {duplicated} duplicated "
                        f"({time.monotonic() - started:.0f} s)",
                        file=sys.stderr,
                    )
            finally:
                await anyio.to_thread.run_sync(broker.stop)
    return rows


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logs.configure("console", args.log_level)
    rows = anyio.run(soak, args)
    print(markdown(rows))
    lost = sum(int(row[3].replace(",", "")) for row in rows)
    return 1 if lost else 0


if __name__ == "__main__":
    sys.exit(main())
