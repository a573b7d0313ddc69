"""The CLI's group inspection commands: ``lag`` (offsets per partition) and ``plan``.

``plan`` runs the pure planners on a JSON document, or on a live group read from the
cluster (what-if); ``lag`` shows a group's committed and end offsets with the open
KIP-333 shadow ranges. Imported only by :mod:`fairstream.cli`.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from fairstream.cli._kafka import add_bootstrap, check_bootstrap
from fairstream.errors import ConfigError

if TYPE_CHECKING:
    from rich.table import Table

    from fairstream.assign import Assignment, Assignor, GroupSnapshot, PlanStats

__all__ = ["add_lag", "add_plan"]


# --- lag ----------------------------------------------------------------------------


def add_lag(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "lag",
        help="show a group's committed offset, end offset, lag and open shadow ranges",
        description=(
            "Per partition of the group's topics: the committed offset, the end offset (a "
            "fetch's high watermark), the lag (records still to read), the records retention "
            "deleted before the group read them (committed offset below the log start), and "
            "the KIP-333 shadow ranges left open in the commit metadata by parallel rebalance "
            "(records below the committed offset still to be replayed). The title (JSON: "
            "protocol) names the assignment protocol the group runs, e.g. roundrobin while "
            "other clients' consumers share it. A partition the group never committed shows "
            "committed '-' and the lag the group would have from --auto-offset-reset (where "
            "its consumers would start): the same lag the lag assignor plans with."
        ),
    )
    add_bootstrap(parser)
    parser.add_argument("--group", metavar="G", required=True, help="the consumer group")
    _add_reset(parser)
    parser.add_argument(
        "--topics",
        metavar="T1,T2",
        default=None,
        help="comma-separated topics (default: those the group's members subscribe to)",
    )
    parser.add_argument(
        "--format", choices=["json", "table"], default="table", help="output (default: table)"
    )
    parser.set_defaults(run=_run_lag)


def _add_reset(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--auto-offset-reset",
        choices=["latest", "earliest"],
        default="latest",
        help="the group's auto.offset.reset, for partitions it never committed: latest "
        "counts them as 0 lag, earliest as everything retained (default: latest)",
    )


def _run_lag(args: argparse.Namespace) -> int:
    import anyio

    if not args.bootstrap:
        raise ConfigError(
            "--bootstrap", None, "no cluster given", "pass --bootstrap or set FAIRSTREAM_BOOTSTRAP"
        )
    topics = sorted({t.strip() for t in (args.topics or "").split(",") if t.strip()})
    reset = args.auto_offset_reset
    protocol, rows = anyio.run(
        _read_lag, check_bootstrap(args.bootstrap), args.group, topics, reset
    )
    if args.format == "json":
        document = {"group": args.group, "protocol": protocol, "auto_offset_reset": reset}
        print(json.dumps(document | {"partitions": rows}))
        return 0
    # The protocol the group runs: during a migration, the one all its clients share.
    running = f", protocol {protocol}" if protocol else ", no members"
    table = _table(f"group {args.group}: lag per partition{running}", "topic")
    for column in ("partition", "committed", "end", "lag", "deleted unread", "shadow records"):
        table.add_column(column, justify="right")
    table.add_column("shadow ranges")

    def number(value: int | None) -> str:
        return "-" if value is None else f"{value:,}"

    for row in rows:
        table.add_row(
            row["topic"],
            str(row["partition"]),
            number(row["committed"]),
            number(row["end"]),
            number(row["lag"]),
            number(row["deleted_unread"]),
            number(row["shadow_records"]),
            " ".join(f"[{a:,}, {b:,})" for a, b in row["shadow"]) or "-",
        )
    if any(row["committed"] is None for row in rows):
        table.caption = (
            f"committed -: never committed; its lag counts from auto.offset.reset={reset} "
            f"({'nothing behind' if reset == 'latest' else 'everything retained is behind'})"
        )
        table.caption_justify = "left"
    _print(table)
    return 0


async def _read_lag(
    bootstrap: str, group_id: str, topics: list[str], reset: Literal["latest", "earliest"]
) -> tuple[str | None, list[dict[str, Any]]]:
    """The protocol the group runs (``None`` without members) and one row per partition."""
    from aiokafka import TopicPartition

    from fairstream import BrokerAdmin
    from fairstream.assign import partition_lag
    from fairstream.ranges import decode_shadow

    async with BrokerAdmin(bootstrap) as admin:
        group = await admin.describe_group(group_id)
        if not topics:
            topics = sorted({t for member in group.members.values() for t in member.topics})
            if not topics:
                raise ConfigError(
                    "--group",
                    group_id,
                    "has no active members to name its topics",
                    "name them with --topics",
                )
        counts = await admin.partition_counts(topics)
        missing = sorted(set(topics) - counts.keys())
        if missing:
            raise ConfigError(
                "--topics", ",".join(missing), "not found on the cluster", "check the spelling"
            )
        tps = [TopicPartition(t, p) for t in sorted(counts) for p in range(counts[t])]
        ends = await admin.end_offsets(tps)
        starts = await admin.log_start_offsets(tps)
        commits = await admin.committed_offsets(group_id, tps)
    # Kafka answers "Dead" for a group it never saw, tansu "Empty": what tells an
    # unknown (or mistyped) group from an idle one is that it holds nothing at all.
    if not group.members and all(commit is None for commit in commits.values()):
        raise ConfigError(
            "--group",
            group_id,
            f"unknown group: no members and no committed offsets on {', '.join(topics)}",
            "check the group id (fairstream lag shows groups that consumed these topics)",
        )
    rows = []
    for tp in tps:
        commit = commits[tp]
        shadow = decode_shadow(commit.metadata) if commit is not None else []
        rows.append(
            {
                "topic": tp.topic,
                "partition": tp.partition,
                "committed": None if commit is None else commit.offset,
                "end": ends[tp],
                # Never committed: where auto_offset_reset would start, as the assignor counts.
                "lag": partition_lag(
                    ends[tp], None if commit is None else commit.offset, starts[tp], reset
                ),
                # A committed offset below the log start: retention deleted the records between.
                "deleted_unread": None if commit is None else max(starts[tp] - commit.offset, 0),
                "shadow": [[r.start, r.end] for r in shadow],
                "shadow_records": sum(map(len, shadow)),
            }
        )
    return group.protocol or None, rows


# --- plan ---------------------------------------------------------------------------


def add_plan(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "plan",
        help="show how a strategy assigns a group's partitions, with lag figures",
        description=(
            "Offline: read a JSON document (members, partitions, optional lag and previous) "
            "and print the chosen strategy's assignment with its figures. Live what-if: "
            "with --group, read the group's members, subscriptions, current assignment and "
            "lags from the cluster and show the current assignment beside every strategy's, "
            "what each strategy would move from the current owners (from -> to) and the "
            "busiest member's lag now and after, and whether lag with its min_improvement "
            "would re-plan at all (the rule of App(replan_interval=...))."
        ),
    )
    parser.add_argument(
        "--strategy",
        metavar="{range,roundrobin,sticky,fair,lag}",
        help="assignment strategy (required offline; with --group, show only this one)",
    )
    parser.add_argument(
        "--input",
        metavar="FILE|-",
        default="-",
        help="JSON document to plan (default: - for stdin), e.g. "
        '{"members": {"c0": ["t1"], "c1": ["t1"]}, "partitions": {"t1": 3}, '
        '"lag": {"t1": [900, 50, 60]}, "previous": {"c0": {"t1": [0]}}}; lag and previous '
        "are optional",
    )
    parser.add_argument(
        "--format", choices=["json", "table"], default="table", help="output (default: table)"
    )
    add_bootstrap(parser, what="the cluster for --group")
    parser.add_argument("--group", metavar="G", help="plan the live consumer group G (what-if)")
    _add_reset(parser)
    parser.add_argument(
        "--min-improvement",
        type=float,
        default=None,
        metavar="FRACTION",
        help="lag only: keep partitions with their previous owners unless another plan "
        "lowers the busiest member's lag by more than this fraction (default: 0.1; 0 "
        "always takes the lowest)",
    )
    parser.set_defaults(run=_run_plan, usage=parser.format_usage())


def _planner(name: str, args: argparse.Namespace) -> Assignor:
    """The strategy's planner, with ``--min-improvement`` applied to ``lag``."""
    from fairstream.assign import GroupSnapshot, resolve
    from fairstream.assign.lag import plan as lag_plan

    assignor = resolve(name, field="--strategy")
    if args.min_improvement is None:
        return assignor
    if name != "lag":
        raise ConfigError(
            "--min-improvement", args.min_improvement, "only the lag strategy takes it"
        )
    margin: float = args.min_improvement
    try:
        lag_plan(GroupSnapshot(members={}, partitions={}), min_improvement=margin)
    except ConfigError as exc:
        raise ConfigError("--min-improvement", margin, exc.problem, exc.hint) from None
    return lambda snapshot, previous: lag_plan(snapshot, previous, min_improvement=margin)


def _run_plan(args: argparse.Namespace) -> int:
    from fairstream.assign import STRATEGIES, read_document, stats

    if args.group is not None:
        return _run_whatif(args)
    if args.input == "-" and sys.stdin.isatty():
        # Nothing piped in: waiting for a JSON document typed by hand looks like a hang.
        print(args.usage, end="", file=sys.stderr)
        raise ConfigError(
            "--input",
            "-",
            "nothing to plan: standard input is a terminal",
            "pipe a JSON document in, give --input FILE, or plan a live group with --group G",
        )
    if args.strategy is None:
        raise ConfigError(
            "--strategy", None, "no strategy given", f"choose one of {', '.join(STRATEGIES)}"
        )
    assignor = _planner(args.strategy, args)
    snapshot, previous = read_document(_read_input(args.input))
    result = assignor(snapshot, previous)
    figures = stats(snapshot, result, previous)
    if args.format == "json":
        document = {
            "strategy": args.strategy,
            "assignment": result.to_json(),
            "stats": dataclasses.asdict(figures),
        }
        print(json.dumps(document))
        return 0
    from fairstream.assign import member_lags

    lags = member_lags(snapshot, result)
    table = _table(f"fairstream plan --strategy {args.strategy}", "member")
    for column in ("partitions", "lag"):
        table.add_column(column, justify="right")
    table.add_column("assigned")
    for member_id, topics in result.members.items():
        table.add_row(
            member_id, str(result.count(member_id)), f"{lags[member_id]:,}", _compact(topics)
        )
    _print(table, _figures_table({args.strategy: figures}))
    return 0


def _read_input(source: str) -> str:
    if source == "-":
        return sys.stdin.read()
    try:
        return Path(source).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
        raise ConfigError(
            "--input", source, f"cannot read the file ({reason})", "give a JSON file or - for stdin"
        ) from exc


def _run_whatif(args: argparse.Namespace) -> int:
    import anyio

    from fairstream.assign import STRATEGIES, member_lags, stats
    from fairstream.assign.lag import MIN_IMPROVEMENT
    from fairstream.assign.replan import lag_replan, replan
    from fairstream.cli._replan import move_rows, verdict

    if not args.bootstrap:
        raise ConfigError(
            "--bootstrap",
            None,
            "--group needs a cluster",
            "pass --bootstrap or set FAIRSTREAM_BOOTSTRAP",
        )
    check_bootstrap(args.bootstrap)
    names = [args.strategy] if args.strategy else list(STRATEGIES)
    planners = {name: _planner(name, args) for name in names}

    async def read_group() -> tuple[GroupSnapshot, Assignment]:
        from fairstream import BrokerAdmin

        async with BrokerAdmin(args.bootstrap) as admin:
            return await admin.group_snapshot(args.group, auto_offset_reset=args.auto_offset_reset)

    snapshot, current = anyio.run(read_group)
    if not snapshot.members:
        raise ConfigError(
            "--group",
            args.group,
            "the group has no active members",
            "start its consumers first, or plan offline with --input",
        )
    plans = {"current": current} | {
        name: plan(snapshot, current) for name, plan in planners.items()
    }
    figures = {name: stats(snapshot, result, current) for name, result in plans.items()}
    replans = {name: replan(snapshot, current, plans[name]) for name in planners}
    margin = MIN_IMPROVEMENT if args.min_improvement is None else args.min_improvement
    # The drift watch's rule, whichever strategies are shown: lag re-plans iff it moves.
    lag = (
        replans["lag"]
        if "lag" in replans
        else lag_replan(snapshot, current, min_improvement=margin)
    )
    if args.format == "json":
        document = {
            "group": args.group,
            "plans": {
                name: {"assignment": result.to_json(), "stats": dataclasses.asdict(figures[name])}
                | (replans[name].to_json() if name in replans else {})
                for name, result in plans.items()
            },
            "lag_replan": {"min_improvement": margin, "would_replan": bool(lag.moves)},
        }
        print(json.dumps(document))
        return 0
    table = _table(f"group {args.group}: partitions / lag per member", "member")
    for name in plans:
        table.add_column(name, justify="right")
    lags = {name: member_lags(snapshot, result) for name, result in plans.items()}
    for member_id in sorted(snapshot.members):
        table.add_row(
            member_id,
            *(f"{plans[n].count(member_id)} / {lags[n][member_id]:,}" for n in plans),
        )
    summary = _table("re-plan from the current assignment", "plan")
    for column in ("moves", "busiest lag now -> after"):
        summary.add_column(column, justify="right")
    moves = _table("partitions each plan moves", "plan")
    for column in ("partition", "from", "to"):
        moves.add_column(column)
    for name, change in replans.items():
        summary.add_row(
            name, str(len(change.moves)), f"{change.busiest_now:,} -> {change.busiest_after:,}"
        )
        for row in move_rows(change.moves):
            moves.add_row(name, *row)
    _print(table, _figures_table(figures), summary, *([moves] if moves.row_count else []))
    print(verdict(lag, margin))
    return 0


def _table(title: str, first: str) -> Table:
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    table.add_column(first)
    return table


def _figures_table(figures: Mapping[str, PlanStats]) -> Table:
    table = _table("figures", "plan")
    for column in ("max member lag", "lower bound", "ratio", "count spread", "moved"):
        table.add_column(column, justify="right")
    for name, f in figures.items():
        ratio = f.max_member_lag / f.lag_lower_bound if f.lag_lower_bound else 1.0
        table.add_row(
            name,
            f"{f.max_member_lag:,}",
            f"{f.lag_lower_bound:,.0f}",
            f"{ratio:.3f}",
            str(f.count_spread),
            str(f.moved),
        )
    return table


def _print(*tables: Table) -> None:
    from rich.console import Console

    console = Console()
    for table in tables:
        console.print(table)


def _compact(topics: Mapping[str, tuple[int, ...]]) -> str:
    """``t1:0-2,5 t2:1``: runs of partitions written as ranges."""
    parts = []
    for topic, partitions in topics.items():
        runs: list[list[int]] = []
        for p in partitions:
            if runs and p == runs[-1][1] + 1:
                runs[-1][1] = p
            else:
                runs.append([p, p])
        spans = ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)
        parts.append(f"{topic}:{spans}")
    return " ".join(parts)
