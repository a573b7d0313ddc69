"""How ``make test`` spreads the suite over pytest-xdist's workers: a file at a time, as
``--dist loadfile`` does, except that tests/spark runs as two units.

Every worker that ran a Spark file started its own Spark JVM, so with the files spread
freely up to one JVM per worker ran at once beside the others' brokers, and on loaded
cores a Spark Python worker missed the 10 s Spark gives it to connect back. As two
units, the Spark tests start two sessions in all. (``--dist loadgroup`` with
``xdist_group`` marks would say the same, but pytest-xdist 3.8 groups nothing under
pytest 9.2: pytest-xdist #1386.)
"""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Any

from xdist.scheduler import LoadFileScheduling

SPARK_UNITS = {
    "test_cluster.py": "tests/spark (processes)",
    "test_stream_cli.py": "tests/spark (processes)",
    "test_discovery.py": "tests/spark (processes)",
    "test_cli.py": "tests/spark (processes)",
    "test_batch_read.py": "tests/spark (processes)",
}
"""The Spark files of the first unit, those that start Spark processes of their own
besides the shared session; the rest of tests/spark is the second. About 300 s of tests
each on a busy machine (2026-11-29)."""

_SPARK_REST = "tests/spark (session)"


def work_unit(nodeid: str) -> str:
    """The unit of work a test belongs to: its file, or one of the two Spark units."""
    path = PurePosixPath(nodeid.split("::", 1)[0])
    if path.parts[:2] == ("tests", "spark"):
        return SPARK_UNITS.get(path.name, _SPARK_REST)
    return str(path)


class FileScheduling(LoadFileScheduling):
    """``--dist loadfile`` with :func:`work_unit` as the unit, the Spark units sent out
    first: each takes about as long as a worker's share of the rest, so one started
    last would end last (pytest-xdist orders the units by their number of tests)."""

    def _split_scope(self, nodeid: str) -> str:
        return work_unit(nodeid)

    def _assign_work_unit(self, node: Any) -> None:
        for unit in (_SPARK_REST, *sorted(set(SPARK_UNITS.values()))):
            if unit in self.workqueue:
                self.workqueue.move_to_end(unit, last=False)
        super()._assign_work_unit(node)
