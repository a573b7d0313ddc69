"""The app the shutdown tests run as a real process (``fairstream run tests.cli.exit_app:app``).

Configured from the environment: ``EXIT_TOPIC``, ``EXIT_GROUP``, ``EXIT_LOG`` (a file
that gets ``start N`` and ``end N`` lines, written before the handler returns),
``EXIT_RAISE`` (``keyboard``, ``exit3`` or ``custom``) at offset ``EXIT_AT``, and
``EXIT_DELAY``: seconds each record takes from offset ``EXIT_SLOW_FROM`` on.
"""

from __future__ import annotations

import os

import anyio

from fairstream import App, Record, SchedulerConfig


class Abort(BaseException):
    """A user's own BaseException subclass."""


app = App(
    group_id=os.environ.get("EXIT_GROUP", "exit"),
    scheduler=SchedulerConfig(commit_interval=0.2, concurrency=4),
)
_log = os.environ.get("EXIT_LOG", "exit.log")
_raise = os.environ.get("EXIT_RAISE", "")
_at = int(os.environ.get("EXIT_AT", "-1"))
_delay = float(os.environ.get("EXIT_DELAY", "0"))
_slow_from = int(os.environ.get("EXIT_SLOW_FROM", "0"))


def _note(line: str) -> None:
    fd = os.open(_log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{line}\n".encode())
    finally:
        os.close(fd)


@app.subscriber(os.environ.get("EXIT_TOPIC", "exit"))
async def handle(record: Record[bytes]) -> None:
    where = f"{record.partition}:{record.offset}"
    _note(f"start {where}")
    if record.offset == _at:
        if _raise == "keyboard":
            raise KeyboardInterrupt
        if _raise == "exit3":
            raise SystemExit(3)
        if _raise == "custom":
            raise Abort("stop everything")
    if record.offset >= _slow_from:
        await anyio.sleep(_delay)
    _note(f"end {where}")
