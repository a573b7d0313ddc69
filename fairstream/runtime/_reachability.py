"""Whether the broker answers: what ``app.health().ready`` and ``/ready`` report.

aiokafka hides a broker that went away: fetches come back empty, heartbeats fail
inside its own tasks and the member id stays set, so an app that has consumed
nothing for a minute looks like an idle one. A metadata request every
``interval`` seconds (two small requests) tells the two apart; its answer, not
the member's state, says whether the app can reach its cluster.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import anyio
import structlog

from fairstream.errors import FairstreamError

__all__ = ["BrokerWatch"]

log = structlog.get_logger(__name__)


class BrokerWatch:
    """Asks the broker a cheap question every ``interval`` seconds; ``reachable`` is the answer.

    ``probe`` raises :class:`~fairstream.errors.FairstreamError` (or takes longer
    than ``timeout``) when the broker does not answer. The first change of each
    kind is logged: ``broker_unreachable`` (warning), then ``broker_reachable``.
    """

    def __init__(
        self, probe: Callable[[], Awaitable[object]], *, interval: float = 2.0, timeout: float = 5.0
    ) -> None:
        self._probe = probe
        self._interval = interval
        self._timeout = timeout
        self.reachable = True
        self._lost_at: float | None = None

    async def run(self) -> None:
        while True:
            await anyio.sleep(self._interval)
            await self.check()

    async def check(self) -> None:
        """Ask once and update :attr:`reachable`."""
        reason = ""
        try:
            with anyio.fail_after(self._timeout):
                await self._probe()
        except FairstreamError as exc:
            reason = str(exc)
        except TimeoutError:
            reason = f"no answer within {self._timeout:g} s"
        now = anyio.current_time()
        if reason and self.reachable:
            self._lost_at = now
            log.warning("broker_unreachable", reason=reason)
        elif not reason and not self.reachable and self._lost_at is not None:
            log.info("broker_reachable", unreachable_seconds=round(now - self._lost_at, 1))
        self.reachable = not reason
