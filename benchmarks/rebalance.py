"""Cooperative rebalancing (KIP-429): a member joins, then leaves, a group under live traffic.

Eager (``cooperative=False``) and cooperative (``cooperative=True``) members side by
side in one run, ``--repeat`` times each, interleaved. Each run: a fresh topic of
``--partitions`` partitions and a fresh group; a producer thread writes one record
to every partition ``--rate`` times a second; ``--members`` members (App,
``assignor="sticky"``, heartbeat every ``--heartbeat-ms``) handle them with a no-op
handler (or one sleeping ``--handler-ms``). Once the group is settled, one more
member joins; once settled again, that member leaves (stops and sends a LeaveGroup:
``leave_group_on_stop``). The group counts as settled once, for a whole second, every
partition was handled by exactly one member, by the expected members, balanced.

Measured for each rebalance, from the join (or leave) to the settled group:

- ``retained gap``: the longest time a retained partition (the same owner before
  and after) went unhandled: what a rebalance costs the partitions it need not touch;
- ``moved served``: until the last moved partition was handled by its new owner;
- ``settled``: until the last assignment of the rebalance completed (the last
  ``partitions_assigned`` or ``cooperative_assignment`` event of any member);
- ``handled``: records handled between the join (leave) and ``settled``, and that
  as a share of the records produced in the same window;
- ``revoked``: partitions revoked by any member in the window;
- per run: ``lost`` (produced, never handled: must be 0) and ``duplicates``
  (handlings of an offset after its first; in brackets those of partitions that
  kept their owner through both rebalances).

``steady gap`` is the longest gap of any partition in the ``--steady-s`` seconds
before the join, when nothing rebalances: the floor a retained gap cannot go below
(a fetch round trip; tansu answers a fetch in ~200 ms).

``--slow-s`` makes the first record of partition 0 handled after the join, and again
after the leave, take that long (the issue's measurement: the group waits for the
revoke of a member busy with a slow record); partition 0 is then left out of the
retained gap.

On an embedded tansu broker unless ``--engine noida`` or ``--bootstrap`` (or
``FAIRSTREAM_BOOTSTRAP``). tansu holds every JoinGroup round open for about half
the session timeout (~3 s at ``--session-timeout-ms 6000``, Kafka's minimum; ~5 s
at 10000), so each round of a rebalance costs that (a cooperative move takes two).
On noida every member is static (noida never evicts a member, and answers a dynamic
one's JoinGroup late); the joining one leaves by instance id::

    python benchmarks/rebalance.py --repeat 3
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import logging
import os
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import anyio
import structlog
from _common import cluster, create_topic
from confluent_kafka import KafkaError, Message, Producer

import fairstream
from fairstream import App, ConsumerConfig, Record

ASSIGNED = frozenset({"partitions_assigned", "cooperative_assignment"})
WATCHED = ASSIGNED | {"partitions_revoked", "partitions_lost"}
MODES = {False: "eager", True: "cooperative"}
QUIET = frozenset({"producer_idempotence_unavailable"})
"""Events not shown: on tansu every App says its (unused) producer is not idempotent."""


@dataclass(slots=True)
class Trace:
    """Who handled which partition when, what was produced, what the runtime logged."""

    handled: dict[int, list[tuple[float, str]]] = field(default_factory=lambda: defaultdict(list))
    handlings: Counter[tuple[int, int]] = field(default_factory=Counter)
    produced: list[tuple[float, int, int]] = field(default_factory=list)
    """(send time, partition, offset) of every record the broker acknowledged."""
    failed: int = 0
    events: list[tuple[float, str, int]] = field(default_factory=list)
    """(time, event, partitions) of the runtime's rebalance events."""
    slow_from: float | None = None
    slowed: bool = False

    def owners(self, start: float, end: float) -> dict[int, set[str]]:
        return {p: {m for t, m in stamps if start <= t < end} for p, stamps in self.handled.items()}

    def longest_gap(self, partition: int, start: float, end: float) -> float:
        stamps = [t for t, _ in self.handled[partition] if start < t < end]
        return max(b - a for a, b in itertools.pairwise([start, *stamps, end]))

    def first_by(self, partition: int, member: str, after: float) -> float:
        return next(
            (t for t, m in self.handled[partition] if t > after and m == member), float("nan")
        )


TRACE: list[Trace] = []
"""The trace of the run in progress: the structlog processor writes its events there."""


def configure_logs(verbose: bool) -> None:
    """Note the runtime's rebalance events with their time; show warnings (info: verbose)."""

    def record_events(
        _logger: object, method: str, event: structlog.typing.EventDict
    ) -> structlog.typing.EventDict:
        name = event.get("event")
        if TRACE and name in WATCHED:
            TRACE[-1].events.append((time.monotonic(), name, len(event.get("partitions", ()))))
        if method == "debug" or (method == "info" and not verbose) or name in QUIET:
            raise structlog.DropEvent
        return event

    structlog.configure(
        processors=[
            record_events,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="%H:%M:%S"),
            structlog.dev.ConsoleRenderer(colors=False),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.INFO),
        logger_factory=lambda *_: structlog.PrintLogger(sys.stderr),
        cache_logger_on_first_use=False,
    )
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)


def produce(
    bootstrap: str, topic: str, partitions: int, rate: float, trace: Trace, stop: threading.Event
) -> None:
    """One record to every partition ``rate`` times a second until ``stop``; then flush."""

    def delivered(sent: float, err: KafkaError | None, msg: Message) -> None:
        if err is None:
            trace.produced.append((sent, msg.partition(), msg.offset()))
        else:
            trace.failed += 1

    out = Producer({"bootstrap.servers": bootstrap, "linger.ms": 2})
    began = time.monotonic()
    for round_ in itertools.count():
        if stop.is_set():
            break
        time.sleep(max(0.0, began + round_ / rate - time.monotonic()))
        for partition in range(partitions):
            sent = time.monotonic()
            out.produce(topic, b"live", partition=partition, on_delivery=partial(delivered, sent))
        out.poll(0)
    if out.flush(30):
        raise SystemExit("the producer could not deliver its last records within 30 s")


def member(
    args: argparse.Namespace,
    bootstrap: str,
    group_id: str,
    topic: str,
    name: str,
    *,
    leaves: bool = False,
    **kw: Any,
) -> App:
    app = App(
        bootstrap=bootstrap,
        group_id=group_id,
        assignor="sticky",
        consumer=ConsumerConfig(
            heartbeat_interval_ms=args.heartbeat_ms,
            session_timeout_ms=args.session_timeout_ms,
            leave_group_on_stop=leaves,
        ),
        **kw,
    )
    trace, sleep = TRACE[-1], args.handler_ms / 1000

    @app.subscriber(topic)
    async def handle(record: Record[bytes]) -> None:
        now = time.monotonic()
        trace.handled[record.partition].append((now, name))
        trace.handlings[record.partition, record.offset] += 1
        if record.partition == 0 and trace.slow_from is not None and not trace.slowed:
            trace.slowed = now >= trace.slow_from
            if trace.slowed:
                await anyio.sleep(args.slow_s)
        if sleep:
            await anyio.sleep(sleep)

    return app


async def serve(app: App, stop: anyio.Event) -> None:
    async with app:
        await stop.wait()


@dataclass(frozen=True, slots=True)
class Phase:
    """One rebalance: a join or a leave."""

    retained_gap: float
    moved_served: float
    settled: float
    handled: int
    produced: int
    revoked: int
    moved: frozenset[int]


@dataclass(frozen=True, slots=True)
class Run:
    mode: str
    steady_gap: float
    join: Phase
    leave: Phase
    lost: int
    duplicates: int
    retained_duplicates: int
    """Duplicates of partitions that kept their owner through both rebalances."""


def phase(trace: Trace, start: float, end: float, slow: bool) -> Phase:
    """What the rebalance that began at ``start`` did, until the group settled at ``end``.

    Owners are read in the second before ``start`` and the second after ``end``.
    """
    before, after = trace.owners(start - 1.0, start), trace.owners(end, end + 1.0)
    retained = [p for p in after if before[p] == after[p] and not (slow and p == 0)]
    moved = [p for p in after if before[p] != after[p]]
    served = [trace.first_by(p, next(iter(after[p])), start) - start for p in moved]
    assigned = [t for t, event, _ in trace.events if event in ASSIGNED and start <= t <= end]
    settled = max(assigned, default=float("nan"))
    return Phase(
        retained_gap=max((trace.longest_gap(p, start, end) for p in retained), default=0.0),
        moved_served=max(served, default=0.0),
        settled=settled - start,
        handled=sum(start <= t <= settled for stamps in trace.handled.values() for t, _ in stamps),
        produced=sum(start <= t <= settled for t, _, _ in trace.produced),
        revoked=sum(
            n for t, event, n in trace.events if event == "partitions_revoked" and start <= t <= end
        ),
        moved=frozenset(moved),
    )


async def scenario(args: argparse.Namespace, bootstrap: str, engine: str, coop: bool) -> Run:
    """Members join, the group settles, one more joins and settles, then it leaves."""
    topic, group_id = f"rebalance-{uuid.uuid4().hex[:8]}", f"bench-{uuid.uuid4().hex[:8]}"
    await create_topic(bootstrap, topic, args.partitions)
    trace = Trace()
    TRACE.append(trace)
    stop_producing = threading.Event()
    producer = threading.Thread(
        target=produce,
        args=(bootstrap, topic, args.partitions, args.rate, trace, stop_producing),
        daemon=True,
    )

    def settled_on(members: set[str]) -> bool:
        now = time.monotonic()
        owners = trace.owners(now - 1.0, now)
        if len(owners) < args.partitions or any(len(o) != 1 for o in owners.values()):
            return False
        load = Counter(m for o in owners.values() for m in o)
        return set(load) == members and max(load.values()) - min(load.values()) <= 1

    async def settle(members: set[str]) -> float:
        """When the group was settled on ``members``; returns a second later."""
        with anyio.fail_after(args.timeout):
            while not settled_on(members):  # noqa: ASYNC110 - a condition over the trace
                await anyio.sleep(0.05)
        at = time.monotonic()
        await anyio.sleep(1.0)
        return at

    names = {f"m{i}" for i in range(args.members)}
    stop_first, stop_joiner = anyio.Event(), anyio.Event()
    static = engine == "noida"
    producer.start()
    try:
        async with anyio.create_task_group() as tasks:
            for name in sorted(names):
                instance = {"instance_id": f"{group_id}-{name}"} if static else {}
                app = member(args, bootstrap, group_id, topic, name, cooperative=coop, **instance)
                tasks.start_soon(serve, app, stop_first)
            await settle(names)
            await anyio.sleep(args.steady_s)
            joined_at = trace.slow_from = time.monotonic()
            steady = max(
                trace.longest_gap(p, joined_at - args.steady_s, joined_at)
                for p in range(args.partitions)
            )
            instance = {"instance_id": f"{group_id}-joiner"} if static else {}
            joiner = member(
                args,
                bootstrap,
                group_id,
                topic,
                "joiner",
                cooperative=coop,
                leaves=True,
                **instance,
            )
            tasks.start_soon(serve, joiner, stop_joiner)
            join_settled = await settle({*names, "joiner"})
            left_at = trace.slow_from = time.monotonic()
            trace.slowed = False  # the next record of partition 0 is slow again
            stop_joiner.set()
            leave_settled = await settle(names)
            stop_producing.set()
            await anyio.to_thread.run_sync(producer.join)
            with contextlib.suppress(TimeoutError), anyio.fail_after(30):
                while any(trace.handlings[p, o] == 0 for _, p, o in trace.produced):  # noqa: ASYNC110
                    await anyio.sleep(0.1)
            stop_first.set()
    finally:
        stop_producing.set()
    if trace.failed:
        raise SystemExit(f"{trace.failed} records could not be produced")
    join = phase(trace, joined_at, join_settled, args.slow_s > 0)
    leave = phase(trace, left_at, leave_settled, args.slow_s > 0)
    twice = {key: n - 1 for key, n in trace.handlings.items() if n > 1}
    return Run(
        mode=MODES[coop],
        steady_gap=steady,
        join=join,
        leave=leave,
        lost=sum(trace.handlings[p, o] == 0 for _, p, o in trace.produced),
        duplicates=sum(twice.values()),
        retained_duplicates=sum(
            n for (p, _), n in twice.items() if p not in join.moved | leave.moved
        ),
    )


def spread(values: Sequence[float], fmt: str) -> str:
    ordered = sorted(values)
    return " / ".join(format(v, fmt) for v in (ordered[0], statistics.median(ordered), ordered[-1]))


def phases(runs: list[Run], kind: str) -> list[Phase]:
    return [r.join if kind == "join" else r.leave for r in runs]


def cells(phases: list[Phase]) -> str:
    share = [100 * p.handled / p.produced if p.produced else float("nan") for p in phases]
    return (
        f"{spread([p.retained_gap for p in phases], '.2f')} | "
        f"{spread([p.moved_served for p in phases], '.2f')} | "
        f"{spread([p.settled for p in phases], '.2f')} | "
        f"{spread([p.handled for p in phases], ',.0f')} ({spread(share, '.0f')} %) | "
        f"{spread([p.revoked for p in phases], '.0f')}"
    )


def print_table(runs: list[Run]) -> None:
    by_mode: dict[str, list[Run]] = defaultdict(list)
    for run in runs:
        by_mode[run.mode].append(run)
    print(
        "\n| rebalance | members | retained gap s | moved served s | settled s "
        "| handled in window (% of produced) | revoked | lost | duplicates (of retained) |"
        "\n|---|---|---:|---:|---:|---:|---:|---:|---:|"
    )
    for kind in ("join", "leave"):
        for mode, group in by_mode.items():
            print(
                f"| {kind} | {mode} | {cells(phases(group, kind))} "
                f"| {sum(r.lost for r in group)} | {sum(r.duplicates for r in group)} "
                f"({sum(r.retained_duplicates for r in group)}) |"
            )
    print("\n(cells: min / median / max over the runs; lost and duplicates: summed over the runs)")
    for mode, group in by_mode.items():
        print(f"steady gap ({mode}): {spread([r.steady_gap for r in group], '.2f')} s")
    eager, coop = by_mode.get(MODES[False]), by_mode.get(MODES[True])
    if not (eager and coop):
        return
    for kind in ("join", "leave"):
        # Every repeat runs both modes, so the i-th runs were taken together.
        pairs = zip(phases(eager, kind), phases(coop, kind), strict=True)
        ratios = [c.retained_gap / e.retained_gap for e, c in pairs]
        met = sum(r <= 0.1 for r in ratios)
        print(
            f"{kind}: cooperative retained gap / eager's, paired per repeat "
            f"(min / median / max): {spread(ratios, '.3f')} (goal <= 0.1: met in {met} "
            f"of {len(ratios)})"
        )


def commit() -> str:
    """The checkout and commit of the fairstream this imported, not of the working directory.

    Run as ``python benchmarks/rebalance.py``, the script's directory is on the path, not
    the checkout: without ``PYTHONPATH`` the venv's installed fairstream is measured,
    which may be another checkout.
    """
    checkout = os.path.dirname(os.path.dirname(os.path.abspath(fairstream.__file__)))
    try:
        out = subprocess.run(
            ["git", "-C", checkout, "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        )
    except (OSError, subprocess.CalledProcessError):
        return f"unknown ({checkout})"
    return f"{out.stdout.strip()} ({checkout})"


async def bench(args: argparse.Namespace) -> None:
    runs = []
    engine = "external" if args.bootstrap else args.engine
    with cluster(args.bootstrap, args.engine) as bootstrap:
        print(f"{engine} broker at {bootstrap}, commit {commit()}", flush=True)
        for repeat, mode in itertools.product(range(1, args.repeat + 1), args.modes):
            run = await scenario(args, bootstrap, engine, mode == MODES[True])
            runs.append(run)
            print(
                f"run {repeat}/{args.repeat} {run.mode}: join retained gap "
                f"{run.join.retained_gap:.2f} s, moved served {run.join.moved_served:.2f} s; "
                f"leave retained gap {run.leave.retained_gap:.2f} s, moved served "
                f"{run.leave.moved_served:.2f} s; steady gap {run.steady_gap:.2f} s; "
                f"lost {run.lost}, duplicates {run.duplicates} "
                f"({run.retained_duplicates} of retained partitions)",
                flush=True,
            )
    print_table(runs)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--partitions", type=int, default=8, help="partitions of the topic")
    parser.add_argument(
        "--members", type=int, default=3, help="members before one more joins (and leaves)"
    )
    parser.add_argument(
        "--rate", type=float, default=50.0, help="records a second written to each partition"
    )
    parser.add_argument(
        "--handler-ms", type=float, default=0.0, help="the handler sleeps this long (0: no-op)"
    )
    parser.add_argument(
        "--slow-s",
        type=float,
        default=0.0,
        help="the first record of partition 0 handled after the join takes this long (0: none)",
    )
    parser.add_argument(
        "--steady-s",
        type=float,
        default=2.0,
        help="seconds of quiet before the join over which the steady gap is measured",
    )
    parser.add_argument(
        "--heartbeat-ms", type=int, default=500, help="heartbeat interval of every member"
    )
    parser.add_argument(
        "--session-timeout-ms",
        type=int,
        default=6_000,
        help="session timeout of every member (a tansu JoinGroup round lasts about half of it)",
    )
    parser.add_argument("--repeat", type=int, default=3, help="runs of each mode, interleaved")
    parser.add_argument(
        "--engine",
        choices=("tansu", "noida"),
        default="tansu",
        help="the embedded broker to start (unless --bootstrap names a cluster)",
    )
    parser.add_argument(
        "--modes",
        nargs="+",
        choices=list(MODES.values()),
        default=list(MODES.values()),
        help="which members to run, in this order within each repeat",
    )
    parser.add_argument(
        "--verbose", action="store_true", help="show the runtime's info events (rebalances)"
    )
    parser.add_argument(
        "--timeout", type=float, default=60.0, help="seconds the group may take to settle"
    )
    parser.add_argument(
        "--bootstrap",
        default=os.environ.get("FAIRSTREAM_BOOTSTRAP"),
        help="a cluster to use instead of an embedded broker (from $FAIRSTREAM_BOOTSTRAP)",
    )
    args = parser.parse_args()
    if min(args.partitions, args.members, args.rate, args.repeat, args.steady_s) <= 0:
        parser.error("--partitions, --members, --rate, --repeat and --steady-s must be > 0")
    return args


def main() -> None:
    args = parse_args()
    configure_logs(args.verbose)
    print(f"$ python {' '.join(sys.argv)}", flush=True)
    anyio.run(bench, args)


if __name__ == "__main__":
    main()
