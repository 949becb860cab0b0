"""Static membership (KIP-345) on the wire: a member that joins with a group instance id keeps
its place across restarts. Joining again without its member id, it gets a new one that takes
the old one's generation and assignment, without a rebalance while the group is Stable and its
protocols are the same; the old member id is fenced (FENCED_INSTANCE_ID). LeaveGroup names
members by instance id; session expiry removes a static member as a dynamic one; DescribeGroups
and the leader's JoinGroup answer show the instance ids. Time is the test's clock."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from app.kafka.protocol import request_class
from tests.helpers import create_topic
from tests.kafka.conftest import Listener, ask
from tests.kafka.test_groups import (
    DESCRIBE_V,
    LEAVE_V,
    _nested,
    assignment,
    commit,
    heartbeat,
    in_thread,
    join,
    subscription,
    sync,
)
from tests.kafka.test_transactions import _add_offsets, _init, _offset_codes, _txn_offset_commit

A_PARTS, B_PARTS = assignment({"orders": [0]}), assignment({"orders": [1]})


def _two_static_members(kafka: Listener, a: Any, b: Any) -> tuple[str, str]:
    """Static members "a-1" (the leader) and "b-1" of group "g" at generation 2, each with one
    partition of "orders"."""
    first = join(a, "g", group_instance_id="a-1", ask_member_id=False)
    # A static member is added at once: no MEMBER_ID_REQUIRED round (as Kafka does).
    assert (first.error_code, first.generation_id) == (ErrorCode.none, 1)
    a_id = first.member_id
    assert sync(a, "g", 1, a_id, {a_id: assignment({"orders": [0, 1]})}, "a-1").error_code == ErrorCode.none
    waiting, b_joined = in_thread(join, b, "g", group_instance_id="b-1", ask_member_id=False)
    while heartbeat(a, "g", 1, a_id, "a-1") == ErrorCode.none:
        pass
    a_joined = join(a, "g", a_id, group_instance_id="a-1")
    waiting.join(10)
    b_id = b_joined[0].member_id
    assert (a_joined.generation_id, a_joined.leader) == (2, a_id)
    assert sorted((m.member_id, m.group_instance_id) for m in a_joined.members) == sorted(
        [(a_id, "a-1"), (b_id, "b-1")])
    waiting, b_synced = in_thread(sync, b, "g", 2, b_id, None, "b-1")
    assert sync(a, "g", 2, a_id, {a_id: A_PARTS, b_id: B_PARTS}, "a-1").assignment == A_PARTS
    waiting.join(10)
    assert [x.assignment for x in b_synced] == [B_PARTS]
    return a_id, b_id


def _describe(s: Any) -> Any:
    body = request_class(15, DESCRIBE_V)(groups=("g",), include_authorized_operations=False)  # type: ignore[misc]
    (described,) = ask(s, 15, DESCRIBE_V, body).groups
    return described


def test_a_static_member_joining_again_gets_a_new_member_id_and_its_assignment_without_a_rebalance(
        kafka: Listener) -> None:
    create_topic(kafka.client, "orders", partitions=2)
    with kafka.connect() as a, kafka.connect() as b, kafka.connect() as restarted:
        a_id, b_id = _two_static_members(kafka, a, b)
        again = join(restarted, "g", group_instance_id="b-1", ask_member_id=False)
        assert again.error_code == ErrorCode.none
        assert again.member_id not in (b_id, a_id)
        # The current generation, no members, and the leader that was.
        assert (again.generation_id, again.leader, again.members) == (2, a_id, ())
        synced = sync(restarted, "g", 2, again.member_id, None, "b-1")
        assert (synced.error_code, synced.assignment) == (ErrorCode.none, B_PARTS)
        # The other member sees no rebalance.
        assert heartbeat(a, "g", 2, a_id, "a-1") == ErrorCode.none
        described = _describe(a)
        assert described.group_state == "Stable"
        assert sorted((m.member_id, m.group_instance_id, m.member_assignment) for m in described.members) == sorted(
            [(a_id, "a-1", A_PARTS), (again.member_id, "b-1", B_PARTS)])


def test_a_static_members_replacement_is_described_with_the_client_id_it_joined_with(kafka: Listener) -> None:
    create_topic(kafka.client, "orders", partitions=2)
    with kafka.connect() as a, kafka.connect() as b, kafka.connect() as restarted:
        a_id, _ = _two_static_members(kafka, a, b)
        again = join(restarted, "g", group_instance_id="b-1", ask_member_id=False, client_id="restarted")
        assert again.error_code == ErrorCode.none
        # The restarted client's id, not the one the replaced member joined with ("test").
        assert sorted((m.member_id, m.client_id) for m in _describe(a).members) == sorted(
            [(a_id, "test"), (again.member_id, "restarted")])


def test_the_leader_joining_again_stays_the_leader_under_its_new_member_id_without_assigning(
        kafka: Listener) -> None:
    create_topic(kafka.client, "orders", partitions=2)
    with kafka.connect() as a, kafka.connect() as b, kafka.connect() as restarted:
        a_id, b_id = _two_static_members(kafka, a, b)
        again = join(restarted, "g", group_instance_id="a-1", ask_member_id=False)
        # Answered with the old leader id: the new member does not take itself for the leader.
        assert (again.error_code, again.generation_id, again.leader, again.members) == (
            ErrorCode.none, 2, a_id, ())
        assert sync(restarted, "g", 2, again.member_id, None, "a-1").assignment == A_PARTS
        assert heartbeat(b, "g", 2, b_id, "b-1") == ErrorCode.none
        # It leads the next rebalance, started by B's new subscription.
        waiting, b_again = in_thread(join, b, "g", b_id, group_instance_id="b-1",
                                     protocols=(("range", subscription("orders", "more")),))
        while heartbeat(restarted, "g", 2, again.member_id, "a-1") == ErrorCode.none:
            pass
        led = join(restarted, "g", again.member_id, group_instance_id="a-1")
        waiting.join(10)
        assert (led.generation_id, led.leader, b_again[0].leader) == (3, again.member_id, again.member_id)


def test_the_replaced_member_id_is_fenced_in_every_request_naming_its_instance_id(kafka: Listener) -> None:
    create_topic(kafka.client, "orders", partitions=2)
    with kafka.connect() as a, kafka.connect() as b, kafka.connect() as restarted:
        a_id, b_id = _two_static_members(kafka, a, b)
        new_id = join(restarted, "g", group_instance_id="b-1", ask_member_id=False).member_id
        assert heartbeat(b, "g", 2, b_id, "b-1") == ErrorCode.fenced_instance_id
        assert sync(b, "g", 2, b_id, None, "b-1").error_code == ErrorCode.fenced_instance_id
        assert commit(b, "g", 2, b_id, {("orders", 1): 4}, "b-1") == [ErrorCode.fenced_instance_id]
        assert join(b, "g", b_id, group_instance_id="b-1").error_code == ErrorCode.fenced_instance_id
        pid, epoch = _init(b, "t")
        assert _add_offsets(b, "t", pid, epoch, "g").error_code == ErrorCode.none
        staged = _txn_offset_commit(b, "t", pid, epoch, "g", {("orders", 1): 4}, generation_id=2, member_id=b_id,
                                    instance_id="b-1")
        assert _offset_codes(staged) == {("orders", 1): ErrorCode.fenced_instance_id}
        # Without the instance id, the old member id is no member at all.
        assert heartbeat(b, "g", 2, b_id) == ErrorCode.unknown_member_id
        # An instance id no member holds.
        assert heartbeat(b, "g", 2, new_id, "nobody") == ErrorCode.unknown_member_id
        # The new member id commits; nothing of the old one's was taken.
        assert commit(restarted, "g", 2, new_id, {("orders", 1): 4}, "b-1") == [ErrorCode.none]
        offsets = kafka.client.get("/v1/groups/g/offsets").json()["offsets"]
        assert [(o["topic"], o["partition"], o["offset"]) for o in offsets] == [("orders", 1, 4)]


def test_a_static_member_joining_again_with_other_protocols_starts_a_rebalance(kafka: Listener) -> None:
    create_topic(kafka.client, "orders", partitions=2)
    with kafka.connect() as a, kafka.connect() as b, kafka.connect() as restarted:
        a_id, b_id = _two_static_members(kafka, a, b)
        waiting, again = in_thread(join, restarted, "g", group_instance_id="b-1", ask_member_id=False,
                                   protocols=(("range", subscription("orders", "more")),))
        while heartbeat(a, "g", 2, a_id, "a-1") == ErrorCode.none:
            pass
        led = join(a, "g", a_id, group_instance_id="a-1")
        waiting.join(10)
        (joined,) = again
        assert (led.generation_id, joined.generation_id, joined.leader) == (3, 3, a_id)
        assert sorted((m.member_id, m.group_instance_id, m.metadata) for m in led.members) == sorted(
            [(a_id, "a-1", subscription("orders")), (joined.member_id, "b-1", subscription("orders", "more"))])


def test_leave_group_removes_members_by_instance_id_with_a_code_for_each(kafka: Listener) -> None:
    create_topic(kafka.client, "orders", partitions=2)
    identity = _nested(13, LEAVE_V, "MemberIdentity")
    with kafka.connect() as a, kafka.connect() as b:
        a_id, b_id = _two_static_members(kafka, a, b)
        body = request_class(13, LEAVE_V)(group_id="g", members=(  # type: ignore[misc]
            identity(member_id=b_id, group_instance_id="a-1"),  # A's instance id, held by A
            identity(member_id="", group_instance_id="nobody"),
            identity(member_id="", group_instance_id="b-1"),
            identity(member_id="", group_instance_id="b-1")))  # B has left by then
        left = ask(a, 13, LEAVE_V, body)
        assert (left.error_code, [(m.member_id, m.group_instance_id, m.error_code) for m in left.members]) == (
            ErrorCode.none, [(b_id, "a-1", ErrorCode.fenced_instance_id), ("", "nobody", ErrorCode.unknown_member_id),
                             ("", "b-1", ErrorCode.none), ("", "b-1", ErrorCode.unknown_member_id)])
        assert heartbeat(a, "g", 2, a_id, "a-1") == ErrorCode.rebalance_in_progress
        again = join(a, "g", a_id, group_instance_id="a-1")
        assert (again.generation_id, [(m.member_id, m.group_instance_id) for m in again.members]) == (
            3, [(a_id, "a-1")])


def test_a_static_member_whose_session_expires_is_removed_and_its_instance_id_joins_as_a_new_member(
        kafka: Listener, clock: Any) -> None:
    from app.worker.chore import ChoreConfig
    from app.worker.group_expiry import GroupExpiryWorker

    create_topic(kafka.client, "orders", partitions=2)
    worker = GroupExpiryWorker(kafka.services.group_expiry, clock, ChoreConfig(interval_ms=50))
    with kafka.connect() as a, kafka.connect() as b, kafka.connect() as restarted:
        a_id, b_id = _two_static_members(kafka, a, b)
        clock.advance(6_000)
        assert heartbeat(a, "g", 2, a_id, "a-1") == ErrorCode.none
        clock.advance(4_001)  # B, silent since the join ended, is past its 10 s; A is not
        assert worker.run_once().expired_members == 1
        assert heartbeat(a, "g", 2, a_id, "a-1") == ErrorCode.rebalance_in_progress
        assert heartbeat(b, "g", 2, b_id, "b-1") == ErrorCode.unknown_member_id
        again = join(a, "g", a_id, group_instance_id="a-1")
        assert (again.generation_id, [m.member_id for m in again.members]) == (3, [a_id])
        assert sync(a, "g", 3, a_id, {a_id: assignment({"orders": [0, 1]})}, "a-1").error_code == ErrorCode.none
        # B's instance id, no longer held, joins as a new member: a rebalance.
        waiting, b_again = in_thread(join, restarted, "g", group_instance_id="b-1", ask_member_id=False)
        while heartbeat(a, "g", 3, a_id, "a-1") == ErrorCode.none:
            pass
        join(a, "g", a_id, group_instance_id="a-1")
        waiting.join(10)
        assert (b_again[0].error_code, b_again[0].generation_id) == (ErrorCode.none, 4)


def test_a_static_member_that_misses_a_rebalance_keeps_its_place_and_is_assigned_to(
        kafka: Listener, clock: Any) -> None:
    create_topic(kafka.client, "orders", partitions=2)
    with kafka.connect() as a, kafka.connect() as b, kafka.connect() as c:
        a_id, b_id = _two_static_members(kafka, a, b)
        c_waiting, c_joined = in_thread(join, c, "g")  # a dynamic member starts a rebalance
        while heartbeat(a, "g", 2, a_id, "a-1") == ErrorCode.none:
            pass
        a_waiting, a_joined = in_thread(join, a, "g", a_id, group_instance_id="a-1")
        clock.advance(10_001)  # past the rebalance deadline: B has not joined again
        c_waiting.join(10)
        a_waiting.join(10)
        (led,) = a_joined
        c_id = c_joined[0].member_id
        # Generation 3 holds B all the same, for the leader to assign to (Kafka removes only
        # dynamic members that miss a rebalance).
        assert (led.generation_id, led.leader) == (3, a_id)
        assert sorted((m.member_id, m.group_instance_id) for m in led.members) == sorted(
            [(a_id, "a-1"), (b_id, "b-1"), (c_id, None)])
        assert heartbeat(b, "g", 2, b_id, "b-1") == ErrorCode.illegal_generation
        assert join(b, "g", b_id, group_instance_id="b-1").generation_id == 3
        given = {a_id: A_PARTS, b_id: B_PARTS, c_id: b""}
        assert sync(a, "g", 3, a_id, given, "a-1").error_code == ErrorCode.none
        assert sync(b, "g", 3, b_id, None, "b-1").assignment == B_PARTS


def test_a_group_instance_id_is_1_to_249_characters(kafka: Listener) -> None:
    create_topic(kafka.client, "orders")
    with kafka.connect() as s:
        assert join(s, "g", group_instance_id="", ask_member_id=False).error_code == ErrorCode.invalid_request
        assert join(s, "g", group_instance_id="x" * 250, ask_member_id=False).error_code == ErrorCode.invalid_request
        joined = join(s, "g", group_instance_id="x" * 249, ask_member_id=False)
        assert (joined.error_code, joined.generation_id) == (ErrorCode.none, 1)


def test_the_http_doors_join_has_no_group_instance_id(kafka: Listener) -> None:
    """Static membership is the Kafka door's: the HTTP door's members are dynamic, and its join
    refuses the field rather than taking the member as dynamic silently."""
    create_topic(kafka.client, "orders")
    r = kafka.client.post("/v1/groups/web/members", json={"topics": ["orders"], "group_instance_id": "i-1"})
    assert (r.status_code, r.json()["error_code"]) == (422, "INVALID_REQUEST")  # the API's unknown field
    assert "group_instance_id" in r.text
