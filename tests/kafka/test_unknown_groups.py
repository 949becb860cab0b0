"""A group that does not exist is created only by a join (JoinGroup, the HTTP door's join
without a member id) or by an offset commit (a simple consumer's, generation -1, creates its
offsets): every other request of either door that names one is answered as Kafka answers it
and writes nothing, in any table (docs/ARCHITECTURE.md, "What a client can make the service
hold"). On both databases: each request below names the group "nowhere", and the whole stored
state (tests/fuzz/stored.py, every table row by row) is the same after it as before. And what a
join created goes again: a group whose consumer went away is deleted by group expiry, and
one whose consumer keeps heartbeating stays; and so does what a commit created, its offsets
once OUTBOX_OFFSETS_RETENTION_MINUTES have passed (tests/integration/test_offset_retention.py
has the rule's every case)."""

from __future__ import annotations

import socket
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from app.kafka.protocol import build, request_class
from tests.fuzz.stored import StoredTables, diff
from tests.helpers import begin, create_topic, ident, init_producer
from tests.kafka.conftest import Listener, ask
from tests.kafka.test_groups import (
    DESCRIBE_V,
    LIST_V,
    _nested,
    assignment,
    commit,
    heartbeat,
    join,
    leave,
    sync,
)

GROUP = "nowhere"
TXN_V = 3  # TxnOffsetCommit and AddOffsetsToTxn: transaction version 1, with group metadata (KIP-447)


@dataclass(frozen=True)
class World:
    """What the requests need: a connection, the HTTP door, and a transactional producer whose
    transaction is open (so that a refused request has something it could have joined)."""

    s: socket.socket
    http: Any
    producer: dict


@dataclass(frozen=True)
class Case:
    name: str
    ask: Callable[[World], Any]  # the answer, reduced to what Kafka answers that says it all
    answered: Any

    def __str__(self) -> str:
        return self.name


def _find_coordinator(w: World, version: int) -> Any:
    if version >= 4:
        body = build(request_class(10, version), key_type=0, coordinator_keys=(GROUP,))  # type: ignore[arg-type]
        return [c.error_code for c in ask(w.s, 10, version, body).coordinators]
    return ask(w.s, 10, version, build(request_class(10, version), key=GROUP, key_type=0)).error_code  # type: ignore[arg-type]


def _txn_offset_commit(w: World) -> list[ErrorCode]:
    topic, partition = _nested(28, TXN_V, "TxnOffsetCommitRequestTopic"), _nested(28, TXN_V,
                                                                                   "TxnOffsetCommitRequestPartition")
    body = request_class(28, TXN_V)(  # type: ignore[misc]
        transactional_id="tx", group_id=GROUP, producer_id=w.producer["producer_id"],
        producer_epoch=w.producer["producer_epoch"], generation_id=1, member_id="nobody", group_instance_id=None,
        topics=(topic(name="orders", partitions=(partition(partition_index=0, committed_offset=3,
                                                           committed_metadata=None),)),))
    return [p.error_code for t in ask(w.s, 28, TXN_V, body).topics for p in t.partitions]


def _add_offsets_to_txn(w: World) -> ErrorCode:
    body = request_class(25, TXN_V)(transactional_id="tx", producer_id=w.producer["producer_id"],  # type: ignore[misc]
                                    producer_epoch=w.producer["producer_epoch"], group_id=GROUP)
    return ask(w.s, 25, TXN_V, body).error_code


def _offset_fetch(w: World) -> Any:
    topic = _nested(9, 7, "OffsetFetchRequestTopic")
    body = request_class(9, 7)(group_id=GROUP, require_stable=True,  # type: ignore[misc]
                               topics=(topic(name="orders", partition_indexes=(0,)),))
    answer = ask(w.s, 9, 7, body)
    return answer.error_code, [(p.committed_offset, p.error_code) for t in answer.topics for p in t.partitions]


def _describe_groups(w: World) -> Any:
    body = request_class(15, DESCRIBE_V)(groups=(GROUP,), include_authorized_operations=False)  # type: ignore[misc]
    return [(g.error_code, g.group_state, g.members) for g in ask(w.s, 15, DESCRIBE_V, body).groups]


def _delete_groups(w: World) -> list[ErrorCode]:
    body = request_class(42, 2)(groups_names=(GROUP,))  # type: ignore[misc]
    return [r.error_code for r in ask(w.s, 42, 2, body).results]


def _list_groups(w: World) -> tuple:
    return ask(w.s, 16, LIST_V, request_class(16, LIST_V)(states_filter=())).groups  # type: ignore[misc]


def _offset_delete(w: World) -> ErrorCode:
    topic, partition = _nested(47, 0, "OffsetDeleteRequestTopic"), _nested(47, 0, "OffsetDeleteRequestPartition")
    body = request_class(47, 0)(group_id=GROUP, topics=(  # type: ignore[misc]
        topic(name="orders", partitions=(partition(partition_index=0),)),))
    return ask(w.s, 47, 0, body).error_code


def _http(method: str, path: str, json: Any = None) -> Callable[[World], Any]:
    def call(w: World) -> Any:
        r = w.http.request(method, path, json=json)
        return r.status_code, (r.json().get("error_code") if r.content else None)
    return call


def _http_add_offsets(w: World) -> Any:
    r = w.http.post("/v1/transactions/tx/offsets", json={
        **ident(w.producer), "group_id": GROUP, "offsets": [{"topic": "orders", "partition": 0, "offset": 3}],
        "generation_id": 1, "member_id": "nobody"})
    return r.status_code, r.json()["error_code"]


UNKNOWN = ErrorCode.unknown_member_id

CASES = [
    # The Kafka door.
    Case("FindCoordinator-v3", lambda w: _find_coordinator(w, 3), ErrorCode.none),
    Case("FindCoordinator-v4", lambda w: _find_coordinator(w, 4), [ErrorCode.none]),
    Case("JoinGroup-with-a-member-id", lambda w: join(w.s, GROUP, "nobody").error_code, UNKNOWN),
    # KIP-394: the new member is handed its id; it becomes one only when it joins with it.
    Case("JoinGroup-asking-for-a-member-id", lambda w: join(w.s, GROUP, ask_member_id=False).error_code,
         ErrorCode.member_id_required),
    Case("SyncGroup", lambda w: sync(w.s, GROUP, 1, "nobody", {"nobody": b""}).error_code, UNKNOWN),
    Case("Heartbeat", lambda w: heartbeat(w.s, GROUP, 1, "nobody"), UNKNOWN),
    Case("LeaveGroup-v3", lambda w: (lambda a: (a.error_code, [m.error_code for m in a.members]))(
        leave(w.s, GROUP, "nobody")), (ErrorCode.none, [UNKNOWN])),
    Case("LeaveGroup-v0", lambda w: ask(w.s, 13, 0, build(request_class(13, 0), group_id=GROUP,  # type: ignore[arg-type]
                                                          member_id="nobody")).error_code, UNKNOWN),
    # A member's commit (a generation and a member id): the group has neither.
    Case("OffsetCommit-of-a-member", lambda w: commit(w.s, GROUP, 1, "nobody", {("orders", 0): 3}), [UNKNOWN]),
    Case("OffsetFetch", _offset_fetch, (ErrorCode.none, [(-1, ErrorCode.none)])),
    Case("TxnOffsetCommit-of-a-member", _txn_offset_commit, [UNKNOWN]),
    # Kafka adds the group's offsets partition to the transaction; here the transaction is
    # already open, and nothing is kept of the group.
    Case("AddOffsetsToTxn", _add_offsets_to_txn, ErrorCode.none),
    Case("DescribeGroups", _describe_groups, [(ErrorCode.none, "Dead", ())]),
    Case("DeleteGroups", _delete_groups, [ErrorCode.group_id_not_found]),
    Case("ListGroups", _list_groups, ()),
    Case("OffsetDelete", _offset_delete, ErrorCode.group_id_not_found),
    # The HTTP door.
    Case("http-join-with-a-member-id", _http("POST", f"/v1/groups/{GROUP}/members", {
        "topics": ["orders"], "session_timeout_ms": 10_000, "member_id": "nobody"}), (409, "UNKNOWN_MEMBER_ID")),
    Case("http-heartbeat", _http("POST", f"/v1/groups/{GROUP}/members/nobody/heartbeat"),
         (409, "UNKNOWN_MEMBER_ID")),
    Case("http-leave", _http("DELETE", f"/v1/groups/{GROUP}/members/nobody"), (409, "UNKNOWN_MEMBER_ID")),
    Case("http-describe", _http("GET", f"/v1/groups/{GROUP}"), (404, "GROUP_ID_NOT_FOUND")),
    Case("http-lag", _http("GET", f"/v1/groups/{GROUP}/lag"), (404, "GROUP_ID_NOT_FOUND")),
    Case("http-fetch-offsets", _http("GET", f"/v1/groups/{GROUP}/offsets"), (200, None)),
    Case("http-commit-of-a-member", _http("POST", f"/v1/groups/{GROUP}/offsets", {
        "offsets": [{"topic": "orders", "partition": 0, "offset": 3}], "generation_id": 1, "member_id": "nobody"}),
        (409, "UNKNOWN_MEMBER_ID")),
    Case("http-reset-dry-run", _http("POST", f"/v1/groups/{GROUP}/offsets/reset", {
        "topic": "orders", "to": "earliest", "dry_run": True}), (200, None)),
    Case("http-add-offsets-of-a-member", _http_add_offsets, (409, "UNKNOWN_MEMBER_ID")),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_a_request_naming_a_group_that_does_not_exist_is_answered_and_writes_nothing(
        kafka: Listener, db_url: str, case: Case) -> None:
    create_topic(kafka.client, "orders")
    producer = init_producer(kafka.client, "tx")
    begin(kafka.client, "tx", producer)
    stored = StoredTables(db_url)
    try:
        before = stored.snapshot()
        with kafka.connect() as s:
            assert case.ask(World(s, kafka.client, producer)) == case.answered
        assert diff(before, stored.snapshot()) == []
    finally:
        stored.dispose()


def test_a_group_a_consumer_joined_and_went_away_from_is_deleted_once_empty_for_the_retention(
        kafka: Listener, clock: Any) -> None:
    from app.services.group_expiry import EMPTY_GROUP_RETENTION_MS
    from app.worker.chore import ChoreConfig
    from app.worker.group_expiry import GroupExpiryPass, GroupExpiryWorker

    create_topic(kafka.client, "orders")
    worker = GroupExpiryWorker(kafka.services.group_expiry, clock, ChoreConfig(interval_ms=50))
    with kafka.connect() as s:
        joined = join(s, GROUP, session_s=10)  # KIP-394's two JoinGroups: the second adds the member
        assert (joined.error_code, joined.generation_id) == (ErrorCode.none, 1)
    clock.advance(10_001)  # its client gone, its session over

    assert worker.run_once(clock()) == GroupExpiryPass(1, 0)
    clock.advance(EMPTY_GROUP_RETENTION_MS + 1)
    assert worker.run_once(clock()) == GroupExpiryPass(0, 1)
    with kafka.connect() as s:
        assert _list_groups(World(s, kafka.client, {})) == ()


@pytest.mark.parametrize("instance_id", [None, "static-1"], ids=["dynamic-member", "static-member"])
def test_a_group_whose_consumer_keeps_heartbeating_is_kept_past_the_retention(
        kafka: Listener, clock: Any, instance_id: str | None) -> None:
    # Heartbeats write the member's row, not the group's: the row of a Stable group is as old
    # as its last rebalance, here past the retention. Its member keeps it.
    from app.services.group_expiry import EMPTY_GROUP_RETENTION_MS
    from app.worker.chore import ChoreConfig
    from app.worker.group_expiry import GroupExpiryPass, GroupExpiryWorker

    create_topic(kafka.client, "orders")
    worker = GroupExpiryWorker(kafka.services.group_expiry, clock, ChoreConfig(interval_ms=50))
    with kafka.connect() as s:
        # A static member is added at once; a dynamic one after KIP-394's MEMBER_ID_REQUIRED.
        joined = join(s, GROUP, session_s=10, group_instance_id=instance_id)
        member = joined.member_id
        assert (joined.error_code, joined.generation_id) == (ErrorCode.none, 1)
        assert sync(s, GROUP, 1, member, {member: assignment({"orders": [0]})}, instance_id).error_code \
            == ErrorCode.none
        for _ in range(EMPTY_GROUP_RETENTION_MS // 5_000 + 1):
            clock.advance(5_000)
            assert heartbeat(s, GROUP, 1, member, instance_id) == ErrorCode.none

        assert worker.run_once(clock()) == GroupExpiryPass(0, 0)
        ((code, state, members),) = _describe_groups(World(s, kafka.client, {}))
        assert (code, state, [(m.member_id, m.group_instance_id) for m in members]) == (
            ErrorCode.none, "Stable", [(member, instance_id)])


OFFSETS_RETENTION_MS = 10_080 * 60_000  # OUTBOX_OFFSETS_RETENTION_MINUTES=10080 (settings), Kafka's default


@pytest.fixture
def settings(settings):  # type: ignore[no-untyped-def]
    """OUTBOX_OFFSETS_RETENTION_MINUTES set (unset, the default, nothing expires)."""
    return settings.model_copy(update={"offsets_retention_minutes": 10_080})


def test_a_simple_consumers_offsets_go_a_retention_after_its_commit_and_the_group_with_them(
        kafka: Listener, clock: Any) -> None:
    from app.services.group_expiry import OffsetExpiry

    create_topic(kafka.client, "orders")
    with kafka.connect() as s:
        assert commit(s, GROUP, -1, "", {("orders", 0): 3}) == [ErrorCode.none]
        clock.advance(OFFSETS_RETENTION_MS - 1)
        assert kafka.services.group_expiry.expire_offsets(clock()) == OffsetExpiry(0, False)
        assert _offset_fetch(World(s, kafka.client, {})) == (ErrorCode.none, [(3, ErrorCode.none)])
        clock.advance(1)

        assert kafka.services.group_expiry.expire_offsets(clock()) == OffsetExpiry(1, False)
        assert _offset_fetch(World(s, kafka.client, {})) == (ErrorCode.none, [(-1, ErrorCode.none)])
        assert _list_groups(World(s, kafka.client, {})) == ()


def test_the_offsets_of_a_group_its_consumer_went_away_from_go_a_retention_after_and_the_group_with_them(
        kafka: Listener, clock: Any) -> None:
    from app.services.group_expiry import OffsetExpiry
    from app.worker.chore import ChoreConfig
    from app.worker.group_expiry import GroupExpiryPass, GroupExpiryWorker

    create_topic(kafka.client, "orders")
    worker = GroupExpiryWorker(kafka.services.group_expiry, clock, ChoreConfig(interval_ms=50))
    with kafka.connect() as s:
        joined = join(s, GROUP, session_s=10)
        member = joined.member_id
        assert sync(s, GROUP, 1, member, {member: assignment({"orders": [0]})}).error_code == ErrorCode.none
        assert commit(s, GROUP, 1, member, {("orders", 0): 3}) == [ErrorCode.none]
    clock.advance(10_001)
    assert worker.run_once(clock()) == GroupExpiryPass(1, 0, 0)  # emptied now: its offsets counted from now
    clock.advance(OFFSETS_RETENTION_MS - 1)
    assert kafka.services.group_expiry.expire_offsets(clock()) == OffsetExpiry(0, False)
    clock.advance(1)

    assert worker.run_once(clock()) == GroupExpiryPass(0, 1, 1)
    with kafka.connect() as s:
        assert _list_groups(World(s, kafka.client, {})) == ()


@pytest.mark.parametrize("instance_id", [None, "static-1"], ids=["dynamic-member", "static-member"])
def test_a_kafka_door_members_group_keeps_its_offsets_past_the_retention(  # type: ignore[no-untyped-def]
        kafka: Listener, clock: Any, settings, database, instance_id: str | None) -> None:
    # Heartbeats write the member's row, not the group's, nor the offset's: both are older than
    # the retention (a minute here), and the member keeps them.
    from app.composition import Services
    from app.services.group_expiry import OffsetExpiry
    from app.worker.chore import ChoreConfig
    from app.worker.group_expiry import GroupExpiryPass, GroupExpiryWorker

    short = Services.build(settings.model_copy(update={"offsets_retention_minutes": 1}), database, clock)
    worker = GroupExpiryWorker(short.group_expiry, clock, ChoreConfig(interval_ms=50))
    create_topic(kafka.client, "orders")
    with kafka.connect() as s:
        joined = join(s, GROUP, session_s=10, group_instance_id=instance_id)
        member = joined.member_id
        assert sync(s, GROUP, 1, member, {member: assignment({"orders": [0]})}, instance_id).error_code \
            == ErrorCode.none
        assert commit(s, GROUP, 1, member, {("orders", 0): 3}, instance_id) == [ErrorCode.none]
        for _ in range(3 * 60_000 // 5_000):
            clock.advance(5_000)
            assert heartbeat(s, GROUP, 1, member, instance_id) == ErrorCode.none

        assert worker.run_once(clock()) == GroupExpiryPass(0, 0, 0)
        assert short.group_expiry.expire_offsets(clock()) == OffsetExpiry(0, False)
        assert _offset_fetch(World(s, kafka.client, {})) == (ErrorCode.none, [(3, ErrorCode.none)])
