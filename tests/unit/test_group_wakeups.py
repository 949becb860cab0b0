"""A JoinGroup or SyncGroup waiting in the Kafka door (app.kafka.groups) is woken by a change a
request of the same process made while it was asking the service, not only by one made while
it waited: Kafka's coordinator answers every waiting request the moment the rebalance, or the
leader's assignment, completes. A JoinGroup is answered with what the request that formed its
generation handed over, without asking the service again. The service here is a stand-in that
makes that change during the waiting request's ask; the poll interval is an hour, so a request
that missed the change would still be waiting when the test gives up."""

from __future__ import annotations

import asyncio
import datetime
import threading
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from app.kafka import auth, protocol
from app.kafka import groups as kafka_groups
from app.kafka.api_keys import ApiKey
from app.kafka.groups import GroupApis
from app.kafka.protocol import request_class
from app.services.classic_group_protocol import Joined, Joining
from app.settings import Settings

GIVE_UP_S = 10  # far less than the poll interval below: a request that missed the change is not answered


class _Protocol:
    """ClassicGroupProtocol's answers, each ask counted; `during_ask` runs (on the event loop)
    while the ask numbered `at` is being answered, before its answer is returned."""

    def __init__(self, loop: asyncio.AbstractEventLoop, answers: dict[str, list[Any]], at: tuple[str, int],
                 during_ask: Callable[[], None]) -> None:
        self.loop, self.answers, self.at, self.during_ask = loop, answers, at, during_ask
        self.asks: list[str] = []

    def clock(self) -> int:
        return 0

    def _answer(self, name: str) -> Any:
        self.asks.append(name)
        if (name, self.asks.count(name)) == self.at:
            asyncio.run_coroutine_threadsafe(self._run(self.during_ask), self.loop).result()
        return self.answers[name].pop(0)

    @staticmethod
    async def _run(change: Callable[[], None]) -> None:
        change()

    def join(self, *args: Any, **kwargs: Any) -> Any:
        return self._answer("join")

    def joined(self, *args: Any, **kwargs: Any) -> Any:
        return self._answer("joined")

    def sync(self, *args: Any, **kwargs: Any) -> Any:
        return self._answer("sync")


@pytest.fixture(autouse=True)
def hour_long_poll(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kafka_groups, "WAIT_POLL_S", 3600)


def _apis(protocol: _Protocol) -> GroupApis:
    return GroupApis(SimpleNamespace(groups=None, group_offsets=None, classic_group_protocol=protocol,
                                     settings=Settings(database_url="sqlite:///unused.db")))


async def _handled(call: Callable[[], Any]) -> Any:
    """`call` as the listener runs a handler: with the request's access bound (authentication off)."""
    token = auth.bind(auth.Access(auth.NOBODY, None))
    try:
        return await asyncio.wait_for(call(), GIVE_UP_S)
    finally:
        auth.unbind(token)


def _join_body(member_id: str = "m-1") -> Any:
    cls = request_class(ApiKey.JOIN_GROUP, 5)
    proto = getattr(__import__(cls.__module__, fromlist=["x"]), "JoinGroupRequestProtocol")  # type: ignore[union-attr]
    return cls(group_id="g", session_timeout=datetime.timedelta(seconds=10),  # type: ignore[misc]
               rebalance_timeout=datetime.timedelta(seconds=10), member_id=member_id, group_instance_id=None,
               protocol_type="consumer", protocols=(proto(name="range", metadata=b""),))


def _sync_body() -> Any:
    return request_class(ApiKey.SYNC_GROUP, 3)(group_id="g", generation_id=1, member_id="m-1",  # type: ignore[misc]
                                        group_instance_id=None, assignments=())


def test_a_joingroup_is_answered_when_the_rebalance_completes_while_it_asks() -> None:
    joined = Joined("m-1", 1, "consumer", "range", "m-0", [])

    async def scenario() -> tuple[Any, list[str]]:
        apis: GroupApis
        # The join finds the barrier not yet passed; while it is answered, the leader's JoinGroup
        # (another request of this process) completes the rebalance.
        protocol = _Protocol(asyncio.get_running_loop(), {"join": [Joining("m-1", 1)], "joined": [joined]},
                             ("join", 1), lambda: apis._notify())
        apis = _apis(protocol)
        answer = await _handled(lambda: apis.join_group(_join_body(), 5))
        return answer, protocol.asks

    answer, asks = asyncio.run(scenario())

    assert (answer.error_code, answer.generation_id, answer.leader) == (ErrorCode.none, 1, "m-0")
    assert asks == ["join", "joined"]


def test_a_syncgroup_is_answered_when_the_leader_assigns_while_it_asks() -> None:
    async def scenario() -> tuple[Any, list[str]]:
        apis: GroupApis
        # The follower's first SyncGroup finds no assignment yet; while it is answered, the
        # leader's SyncGroup (another request of this process) stores the assignment.
        protocol = _Protocol(asyncio.get_running_loop(), {"sync": [None, b"for-m-1"]}, ("sync", 1),
                             lambda: apis._notify())
        apis = _apis(protocol)
        answer = await _handled(lambda: apis.sync_group(_sync_body(), 3))
        return answer, protocol.asks

    answer, asks = asyncio.run(scenario())

    assert (answer.error_code, bytes(answer.assignment)) == (ErrorCode.none, b"for-m-1")
    assert asks == ["sync", "sync"]


def test_a_waiting_joingroup_is_answered_with_what_the_request_forming_its_generation_handed_over() -> None:
    follower = Joined("m-1", 1, "consumer", "range", "m-0", [])
    leader = Joined("m-0", 1, "consumer", "range", "m-0", [("m-0", None, b""), ("m-1", None, b"")], (follower,))

    async def scenario() -> tuple[Any, list[str]]:
        # The follower waits at the barrier; the leader's JoinGroup forms generation 1 and
        # carries the follower's answer. Asked, the service would answer otherwise.
        protocol = _Protocol(asyncio.get_running_loop(), {
            "join": [Joining("m-1", 1), leader],
            "joined": [Joined("m-1", 1, "consumer", "range", "asked-again", [])]}, ("none", 0), lambda: None)
        apis = _apis(protocol)
        waiting = asyncio.create_task(_handled(lambda: apis.join_group(_join_body(), 5)))
        while ("g", "m-1") not in apis._joining:
            await asyncio.sleep(0.01)
        await _handled(lambda: apis.join_group(_join_body(member_id="m-0"), 5))
        return await waiting, protocol.asks

    answer, asks = asyncio.run(scenario())

    assert (answer.error_code, answer.member_id, answer.generation_id, answer.leader) == (ErrorCode.none, "m-1", 1, "m-0")
    assert asks == ["join", "join"]


def test_a_groups_requests_reach_the_service_in_the_order_they_came() -> None:
    """A follower's SyncGroup that came before the leader's next JoinGroup is asked of the
    service before it, whichever worker thread would have been quicker: the JoinGroup comes
    while the SyncGroup is in the service, which gives it half a second to overtake."""
    asks: list[str] = []
    joined = threading.Event()

    async def scenario() -> tuple[Any, Any]:
        loop = asyncio.get_running_loop()
        join_task: asyncio.Task[Any] | None = None

        async def leader_joins_again() -> None:
            nonlocal join_task
            join_task = asyncio.create_task(_handled(lambda: apis.join_group(_join_body(member_id="m-0"), 5)))

        def sync(*args: Any, **kwargs: Any) -> bytes:
            asks.append("sync")
            asyncio.run_coroutine_threadsafe(leader_joins_again(), loop).result()
            joined.wait(0.5)
            asks.append("sync answered")
            return b"for-m-1"

        def join(*args: Any, **kwargs: Any) -> Joined:
            asks.append("join")
            joined.set()
            return Joined("m-0", 2, "consumer", "range", "m-0", [])

        apis = _apis(SimpleNamespace(sync=sync, join=join, clock=lambda: 0))  # type: ignore[arg-type]
        synced = await _handled(lambda: apis.sync_group(_sync_body(), 3))
        assert join_task is not None
        return synced, await join_task

    synced, rejoined = asyncio.run(scenario())

    assert (synced.error_code, bytes(synced.assignment), rejoined.error_code) == (ErrorCode.none, b"for-m-1",
                                                                                ErrorCode.none)
    assert asks == ["sync", "sync answered", "join"]


def test_a_gone_clients_waiting_joingroup_leaves_the_same_members_new_joingroup_its_hand_over() -> None:
    """A member whose connection dropped joins again on a new one while its first JoinGroup
    still waits; the first then sees its client gone and ends. It must end only its own wait:
    the new JoinGroup is still answered with what the request forming the generation hands
    over, not by asking the service again (which here would answer otherwise)."""
    follower = Joined("m-1", 1, "consumer", "range", "m-0", [])
    leader = Joined("m-0", 1, "consumer", "range", "m-0", [("m-0", None, b""), ("m-1", None, b"")], (follower,))

    async def in_connection(gone: Callable[[], bool], call: Callable[[], Any]) -> Any:
        token = protocol.bind_client_gone(gone)
        try:
            return await _handled(call)
        finally:
            protocol.unbind_client_gone(token)

    async def scenario() -> tuple[BaseException | None, Any, list[str]]:
        first_gone = False
        stand_in = _Protocol(asyncio.get_running_loop(), {
            "join": [Joining("m-1", 1), Joining("m-1", 1), leader],
            "joined": [Joined("m-1", 1, "consumer", "range", "asked-again", [])]}, ("none", 0), lambda: None)
        apis = _apis(stand_in)
        first = asyncio.create_task(in_connection(lambda: first_gone, lambda: apis.join_group(_join_body(), 5)))
        while ("g", "m-1") not in apis._joining:
            await asyncio.sleep(0.01)
        first_gone = True  # its connection dropped; it notices when next woken
        again = asyncio.create_task(in_connection(lambda: False, lambda: apis.join_group(_join_body(), 5)))
        ended = (await asyncio.gather(first, return_exceptions=True))[0]
        await _handled(lambda: apis.join_group(_join_body(member_id="m-0"), 5))
        return ended, await again, stand_in.asks

    ended, answer, asks = asyncio.run(scenario())

    assert isinstance(ended, protocol.ClientGone)
    assert (answer.error_code, answer.member_id, answer.generation_id, answer.leader) == (ErrorCode.none, "m-1", 1, "m-0")
    assert asks == ["join", "join", "join"]


def test_a_waiting_requests_asks_grow_apart_while_nothing_changes_and_come_back_after_a_change(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Each ask reads the group and its members' metadata: a hundred JoinGroups asking every
    # WAIT_POLL_S took most of a core for as long as a quiet member's session lasted.
    monkeypatch.setattr(kafka_groups, "WAIT_POLL_S", 0.001)
    monkeypatch.setattr(kafka_groups, "WAIT_POLL_MAX_S", 0.008)

    async def scenario() -> list[float]:
        apis = _apis(_Protocol(asyncio.get_running_loop(), {}, ("join", 1), lambda: None))
        polls, poll_s = [], kafka_groups.WAIT_POLL_S
        for _ in range(5):  # nothing changes
            poll_s = await apis._wait(apis._changes, poll_s)
            polls.append(poll_s)
        seen = apis._changes
        apis._notify()  # a request of this process changed a group
        polls.append(await apis._wait(seen, poll_s))
        return polls

    assert asyncio.run(scenario()) == [0.002, 0.004, 0.008, 0.008, 0.008, 0.001]
