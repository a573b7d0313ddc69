"""A refused commit keeps the member id and leaves no unread task (``_refused_commits.py``).

Issue #38: after a handler blocked the event loop, asyncio printed "Task exception
was never retrieved" with aiokafka's ``UnknownMemberIdError`` traceback. The task
is aiokafka's: ``commit_offsets`` sends the commit under ``asyncio.shield``, and when
the caller gives up (``commit_timeout``, which a blocked loop runs out), the
refusal ends a task nobody awaits. Here the member's id is one the broker does not
know (what a member evicted while its loop was blocked holds), and the caller is
cancelled as the commit request goes out (a blocked loop makes that moment
unpredictable), with and without the hook.
"""

from __future__ import annotations

import asyncio
import gc
import inspect
from typing import Any

import anyio
import pytest
import structlog
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.consumer.group_coordinator import GroupCoordinator
from aiokafka.protocol.commit import OffsetCommitRequest
from aiokafka.structs import OffsetAndMetadata

from fairstream.runtime._kafka._refused_commits import keep_member_on_refused_commit
from tests.conftest import Broker
from tests.support.kafka_helpers import create_topic

pytestmark = pytest.mark.broker


@pytest.mark.parametrize("hooked", [False, True], ids=["aiokafka", "hooked"])
async def test_a_refused_commit_whose_caller_gave_up_leaves_no_unread_error(
    noida: Broker, group_id: str, hooked: bool
) -> None:
    topic = f"refused-{group_id[-8:]}"
    await create_topic(noida.bootstrap, topic, 1)
    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=noida.bootstrap,
        group_id=group_id,
        enable_auto_commit=False,
        # Reset (unhooked), the consumer rejoins under a new id, and noida, which never
        # evicts, holds that JoinGroup for the old id for a rebalance timeout, which
        # stop() waits out: 20 s under the default (the session timeout, 10 s, twice).
        rebalance_timeout_ms=1_000,
    )
    await consumer.start()
    coordinator: Any = consumer._coordinator
    loop = asyncio.get_running_loop()
    unread: list[str] = []
    previous = loop.get_exception_handler()
    loop.set_exception_handler(lambda _, context: unread.append(str(context.get("message"))))
    try:
        if hooked:
            assert keep_member_on_refused_commit(consumer, rejoin=True)
        with anyio.fail_after(20):
            while not consumer.assignment():
                await consumer.getmany(timeout_ms=100)
            member_id = coordinator.member_id
            coordinator.member_id = "evicted-while-blocked"
            assignment = consumer._subscription.subscription.assignment
            offsets = {TopicPartition(topic, 0): OffsetAndMetadata(0, "")}
            send = coordinator._send_req

            async def give_up_while_out(request: Any) -> Any:
                if isinstance(request, OffsetCommitRequest):
                    caller.cancel()  # commit_timeout runs out while the commit is out
                return await send(request)

            coordinator._send_req = give_up_while_out
            with structlog.testing.capture_logs() as logs:
                caller = asyncio.create_task(coordinator.commit_offsets(assignment, offsets))
                with pytest.raises(asyncio.CancelledError):
                    await caller
                # The refusal reaches the coordinator: it resets, or (hooked) keeps the
                # id and says the commit was answered after its caller gave up.
                while (  # noqa: ASYNC110 - aiokafka's state and the logs: no event to wait on
                    coordinator.member_id == "evicted-while-blocked"
                    if not hooked
                    else not any(e["event"] == "commit_answered_late" for e in logs)
                ):
                    await asyncio.sleep(0.01)
            gc.collect()
    finally:
        loop.set_exception_handler(previous)
        await consumer.stop()
    if hooked:
        assert [e["event"] for e in logs] == ["commit_refused_member_kept", "commit_answered_late"]
        assert logs[-1]["reason"].startswith("UnknownMemberIdError")
        # The id was kept for the rejoin; this one is truly unknown, so the JoinGroup
        # is refused and aiokafka resets it then (not asserted: it races the check).
        assert member_id  # the member had joined
        assert unread == []
    else:
        assert unread == ["Task exception was never retrieved"]


def test_the_pinned_aiokafka_has_what_the_hook_relies_on() -> None:
    """Fails loudly when an aiokafka upgrade changes what ``_refused_commits`` wraps
    (that an App's consumer carries the hook: ``test_membership``'s pin test)."""
    calls = {
        GroupCoordinator.commit_offsets: "asyncio.shield(self._do_commit_offsets(",
        GroupCoordinator._do_commit_offsets: "self.reset_generation()",
    }
    for function, call in calls.items():
        assert call in inspect.getsource(function), f"{function.__qualname__} no longer has {call}"
