"""Kafka's classic group protocol on the wire (kio's own request types, versions clients
negotiate): JoinGroup's barrier, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit with its
generation checks, OffsetFetch with require_stable, DescribeGroups, ListGroups, one group
managed by one door at a time, and bad input answered with Kafka's codes. Time is the test's
clock: a rebalance deadline passes when the test moves it."""

from __future__ import annotations

import datetime
import struct
import threading
import uuid
from typing import Any

from kio.schema.errors import ErrorCode

from app.kafka.protocol import request_class
from tests.helpers import create_topic, init_producer
from tests.kafka.conftest import Listener, ask, listener_with

JOIN_V, SYNC_V, HEARTBEAT_V, LEAVE_V, COMMIT_V, FETCH_V, DESCRIBE_V, LIST_V = 5, 3, 3, 3, 7, 7, 5, 4
S = datetime.timedelta(seconds=1)


def subscription(*topics: str) -> bytes:
    """A ConsumerProtocolSubscription, version 0, as a consumer's JoinGroup carries it."""
    out = struct.pack(">hi", 0, len(topics))
    for t in topics:
        out += struct.pack(">h", len(t)) + t.encode()
    return out + struct.pack(">i", -1)


def assignment(parts: dict[str, list[int]]) -> bytes:
    """A ConsumerProtocolAssignment, version 0, as a leader's SyncGroup carries it."""
    out = struct.pack(">hi", 0, len(parts))
    for t, ps in parts.items():
        out += struct.pack(">h", len(t)) + t.encode() + struct.pack(">i", len(ps)) + b"".join(
            struct.pack(">i", p) for p in ps)
    return out + struct.pack(">i", -1)


def _nested(api_key: int, version: int, name: str) -> Any:
    cls = request_class(api_key, version)
    return getattr(__import__(cls.__module__, fromlist=["x"]), name)  # type: ignore[union-attr]


def join(s: Any, group: str, member_id: str = "", *, protocol_type: str = "consumer",
         protocols: tuple[tuple[str, bytes], ...] = (("range", subscription("orders")),),
         session_s: int = 10, rebalance_s: int = 10, client_id: str = "test", ask_member_id: bool = True,
         **extra: Any) -> Any:
    """A JoinGroup, joined as a client does: a new member (no `member_id`) is answered
    MEMBER_ID_REQUIRED with its id (KIP-394) and joins again with it at once, unless
    `ask_member_id` is False (the first answer is returned)."""
    body = join_request(group, member_id, protocol_type=protocol_type, protocols=protocols, session_s=session_s,
                        rebalance_s=rebalance_s, group_instance_id=extra.get("group_instance_id"))
    answer = ask(s, 11, JOIN_V, body, client_id=client_id)
    if not member_id and ask_member_id and answer.error_code == ErrorCode.member_id_required:
        return join(s, group, answer.member_id, protocol_type=protocol_type, protocols=protocols,
                    session_s=session_s, rebalance_s=rebalance_s, client_id=client_id, **extra)
    return answer


def join_request(group: str, member_id: str = "", *, protocol_type: str = "consumer",
                 protocols: tuple[tuple[str, bytes], ...] = (("range", subscription("orders")),),
                 session_s: int = 10, rebalance_s: int = 10, group_instance_id: str | None = None) -> Any:
    """The JoinGroup request `join` sends (version JOIN_V)."""
    proto = _nested(11, JOIN_V, "JoinGroupRequestProtocol")
    return request_class(11, JOIN_V)(  # type: ignore[misc]
        group_id=group, session_timeout=session_s * S, rebalance_timeout=rebalance_s * S, member_id=member_id,
        group_instance_id=group_instance_id, protocol_type=protocol_type,
        protocols=tuple(proto(name=n, metadata=m) for n, m in protocols))


def sync(s: Any, group: str, generation: int, member_id: str, given: dict[str, bytes] | None = None,
         instance_id: str | None = None) -> Any:
    item = _nested(14, SYNC_V, "SyncGroupRequestAssignment")
    body = request_class(14, SYNC_V)(  # type: ignore[misc]
        group_id=group, generation_id=generation, member_id=member_id, group_instance_id=instance_id,
        assignments=tuple(item(member_id=m, assignment=a) for m, a in (given or {}).items()))
    return ask(s, 14, SYNC_V, body)


def heartbeat(s: Any, group: str, generation: int, member_id: str, instance_id: str | None = None) -> ErrorCode:
    body = request_class(12, HEARTBEAT_V)(group_id=group, generation_id=generation,  # type: ignore[misc]
                                          member_id=member_id, group_instance_id=instance_id)
    return ask(s, 12, HEARTBEAT_V, body).error_code


def leave(s: Any, group: str, *member_ids: str) -> Any:
    identity = _nested(13, LEAVE_V, "MemberIdentity")
    body = request_class(13, LEAVE_V)(group_id=group, members=tuple(  # type: ignore[misc]
        identity(member_id=m, group_instance_id=None) for m in member_ids))
    return ask(s, 13, LEAVE_V, body)


def commit(s: Any, group: str, generation: int, member_id: str, offsets: dict[tuple[str, int], int],
           instance_id: str | None = None) -> list[Any]:
    topic = _nested(8, COMMIT_V, "OffsetCommitRequestTopic")
    partition = _nested(8, COMMIT_V, "OffsetCommitRequestPartition")
    by_topic: dict[str, list[Any]] = {}
    for (t, p), o in offsets.items():
        by_topic.setdefault(t, []).append(partition(partition_index=p, committed_offset=o, committed_leader_epoch=-1,
                                                    committed_metadata=None))
    body = request_class(8, COMMIT_V)(  # type: ignore[misc]
        group_id=group, generation_id_or_member_epoch=generation, member_id=member_id, group_instance_id=instance_id,
        topics=tuple(topic(name=t, partitions=tuple(ps)) for t, ps in by_topic.items()))
    answer = ask(s, 8, COMMIT_V, body)
    return [p.error_code for t in answer.topics for p in t.partitions]


def fetch_offsets(s: Any, group: str, parts: dict[str, list[int]] | None, require_stable: bool = True) -> list[Any]:
    topic = _nested(9, FETCH_V, "OffsetFetchRequestTopic")
    body = request_class(9, FETCH_V)(  # type: ignore[misc]
        group_id=group, require_stable=require_stable,
        topics=None if parts is None else tuple(topic(name=t, partition_indexes=tuple(ps)) for t, ps in parts.items()))
    answer = ask(s, 9, FETCH_V, body)
    assert answer.error_code == ErrorCode.none
    return [(t.name, p.partition_index, p.committed_offset, p.error_code) for t in answer.topics for p in t.partitions]


def in_thread(fn: Any, *args: Any, **kwargs: Any) -> tuple[threading.Thread, list[Any]]:
    """Runs a request that waits (a JoinGroup at the barrier) beside the test."""
    out: list[Any] = []
    t = threading.Thread(target=lambda: out.append(fn(*args, **kwargs)), daemon=True)
    t.start()
    return t, out


def _lone_member(kafka: Listener, group: str = "g") -> tuple[Any, str]:
    """A connection and the one member of `group`, joined and synced at generation 1."""
    s = kafka.connect()
    joined = join(s, group)
    assert joined.error_code == ErrorCode.none
    assert sync(s, group, 1, joined.member_id, {joined.member_id: assignment({"orders": [0, 1]})}).error_code \
        == ErrorCode.none
    return s, joined.member_id


def test_a_lone_member_leads_generation_one_and_gets_the_assignment_it_gave(kafka: Listener) -> None:
    create_topic(kafka.client, "orders", partitions=2)
    with kafka.connect() as s:
        joined = join(s, "g")
        assert (joined.error_code, joined.generation_id, joined.protocol_name, joined.leader) == (
            ErrorCode.none, 1, "range", joined.member_id)
        assert [(m.member_id, m.metadata) for m in joined.members] == [(joined.member_id, subscription("orders"))]
        given = assignment({"orders": [0, 1]})
        synced = sync(s, "g", 1, joined.member_id, {joined.member_id: given})
        assert (synced.error_code, synced.assignment) == (ErrorCode.none, given)
        assert heartbeat(s, "g", 1, joined.member_id) == ErrorCode.none
    # The engine's view of the group, through the HTTP door: its member, generation and the
    # partitions the leader gave it; the topic it subscribes to is in its lag.
    described = kafka.client.get("/v1/groups/g/lag").json()
    assert [(p["topic"], p["partition"], p["committed_offset"]) for p in described["partitions"]] == [
        ("orders", 0, None), ("orders", 1, None)]
    listed = kafka.client.get("/v1/groups").json()["groups"]
    assert listed == [{"group_id": "g", "generation_id": 1, "member_count": 1}]


def test_a_member_id_is_the_client_id_of_the_request_header_a_dash_and_a_uuid(kafka: Listener) -> None:
    # The assignors order members by id: Kafka's ids start with the client id, so members get
    # partitions in the order of their client ids.
    create_topic(kafka.client, "orders", partitions=2)
    with kafka.connect() as s:
        joined = join(s, "g", client_id="consumer-b")
    assert joined.error_code == ErrorCode.none
    assert joined.member_id.startswith("consumer-b-")
    uuid_part = joined.member_id.removeprefix("consumer-b-")
    assert str(uuid.UUID(uuid_part)) == uuid_part


def test_a_member_id_without_a_client_id_starts_with_member(kafka: Listener) -> None:
    create_topic(kafka.client, "orders", partitions=2)
    with kafka.connect() as s:
        joined = join(s, "g", client_id="")
    assert joined.error_code == ErrorCode.none and joined.member_id.startswith("member-")


def test_a_new_member_from_version_4_is_given_its_member_id_and_joins_when_it_joins_again_with_it(
        kafka: Listener) -> None:
    create_topic(kafka.client, "orders", partitions=2)
    with kafka.connect() as s:
        asked = join(s, "g", ask_member_id=False, client_id="consumer-a")
        assert (asked.error_code, asked.generation_id, asked.leader, list(asked.members)) == (
            ErrorCode.member_id_required, -1, "", [])
        assert asked.member_id.startswith("consumer-a-")
        # Not a member yet: the group has none.
        assert kafka.client.get("/v1/groups/g").status_code == 404
        joined = join(s, "g", asked.member_id)
        assert (joined.error_code, joined.member_id, joined.generation_id, joined.leader) == (
            ErrorCode.none, asked.member_id, 1, asked.member_id)


def test_a_member_id_handed_out_is_used_once(kafka: Listener) -> None:
    create_topic(kafka.client, "orders", partitions=2)
    with kafka.connect() as s:
        asked = join(s, "g", ask_member_id=False)
        assert join(s, "g", asked.member_id).error_code == ErrorCode.none
        assert leave(s, "g", asked.member_id).error_code == ErrorCode.none
        assert join(s, "g", asked.member_id).error_code == ErrorCode.unknown_member_id


def test_a_member_id_handed_out_expires_after_the_session_timeout_and_holds_nothing(kafka: Listener, clock) -> None:  # type: ignore[no-untyped-def]
    create_topic(kafka.client, "orders", partitions=2)
    with kafka.connect() as s:
        asked = join(s, "g", ask_member_id=False, session_s=10)
        clock.advance(10_000)
        assert join(s, "g", asked.member_id).error_code == ErrorCode.unknown_member_id
    assert kafka.client.get("/v1/groups/g").status_code == 404


def test_member_ids_handed_out_are_at_most_the_listeners_connections(kafka: Listener) -> None:
    create_topic(kafka.client, "orders", partitions=2)
    with listener_with(kafka, kafka_max_connections=2) as small, small.connect() as s:
        first, second, third = (join(s, f"g{i}", ask_member_id=False).member_id for i in range(3))
        # The oldest went first; the other two still join.
        assert join(s, "g0", first).error_code == ErrorCode.unknown_member_id
        assert join(s, "g1", second).error_code == ErrorCode.none
        assert join(s, "g2", third).error_code == ErrorCode.none


def test_a_member_id_is_required_only_after_the_join_is_found_valid(kafka: Listener) -> None:
    create_topic(kafka.client, "orders", partitions=2)
    with kafka.connect() as s:
        assert join(s, "g", ask_member_id=False, session_s=0).error_code == ErrorCode.invalid_session_timeout


def test_a_second_member_starts_a_rebalance_that_heartbeats_announce_and_rejoins_complete(kafka: Listener) -> None:
    create_topic(kafka.client, "orders", partitions=2)
    a, a_id = _lone_member(kafka)
    with a, kafka.connect() as b:
        waiting, b_joined = in_thread(join, b, "g")
        # B waits at the barrier until A joins again; A learns of the rebalance from its heartbeat.
        code = ErrorCode.none
        while code == ErrorCode.none:
            code = heartbeat(a, "g", 1, a_id)
        assert code == ErrorCode.rebalance_in_progress
        assert b_joined == []
        a_joined = join(a, "g", a_id)
        waiting.join(10)
        (b_joined_,) = b_joined
        b_id = b_joined_.member_id
        assert (a_joined.generation_id, a_joined.leader, b_joined_.generation_id, b_joined_.leader) == (
            2, a_id, 2, a_id)
        assert sorted(m.member_id for m in a_joined.members) == sorted([a_id, b_id])
        assert b_joined_.members == ()  # only the leader gets the members
        # B's SyncGroup waits for the leader's assignment.
        waiting, b_synced = in_thread(sync, b, "g", 2, b_id)
        given = {a_id: assignment({"orders": [0]}), b_id: assignment({"orders": [1]})}
        assert sync(a, "g", 2, a_id, given).assignment == given[a_id]
        waiting.join(10)
        assert [(x.error_code, x.assignment) for x in b_synced] == [(ErrorCode.none, given[b_id])]
        # A's offsets of generation 1 are refused now; those of generation 2 taken.
        assert commit(a, "g", 1, a_id, {("orders", 0): 3}) == [ErrorCode.illegal_generation]
        assert commit(a, "g", 2, a_id, {("orders", 0): 3}) == [ErrorCode.none]
        assert commit(b, "g", 2, b_id, {("orders", 1): 4}) == [ErrorCode.none]
        assert fetch_offsets(a, "g", {"orders": [0, 1]}) == [
            ("orders", 0, 3, ErrorCode.none), ("orders", 1, 4, ErrorCode.none)]


def test_a_member_that_does_not_join_again_by_the_rebalance_deadline_is_removed(kafka: Listener, clock: Any) -> None:
    create_topic(kafka.client, "orders")
    a, a_id = _lone_member(kafka)
    with a, kafka.connect() as b:
        waiting, b_joined = in_thread(join, b, "g", rebalance_s=5)
        while heartbeat(a, "g", 1, a_id) == ErrorCode.none:
            pass
        clock.advance(10_001)  # past A's rebalance timeout (10 s), the longer of the two
        waiting.join(10)
        (joined,) = b_joined
        assert (joined.error_code, joined.generation_id, joined.leader) == (ErrorCode.none, 2, joined.member_id)
        assert [m.member_id for m in joined.members] == [joined.member_id]
        assert heartbeat(a, "g", 1, a_id) == ErrorCode.unknown_member_id
        assert join(a, "g", a_id).error_code == ErrorCode.unknown_member_id


def test_a_member_leaving_starts_a_rebalance_of_the_others(kafka: Listener) -> None:
    create_topic(kafka.client, "orders")
    a, a_id = _lone_member(kafka)
    with a, kafka.connect() as b:
        waiting, b_joined = in_thread(join, b, "g")
        while heartbeat(a, "g", 1, a_id) == ErrorCode.none:
            pass
        join(a, "g", a_id)
        waiting.join(10)
        b_id = b_joined[0].member_id
        left = leave(a, "g", a_id, "nobody")
        assert [(m.member_id, m.error_code) for m in left.members] == [
            (a_id, ErrorCode.none), ("nobody", ErrorCode.unknown_member_id)]
        assert heartbeat(b, "g", 2, b_id) == ErrorCode.rebalance_in_progress
        again = join(b, "g", b_id)
        assert (again.generation_id, again.leader, [m.member_id for m in again.members]) == (3, b_id, [b_id])


def test_leaving_a_group_that_does_not_exist_answers_unknown_member_id_and_creates_no_group(
        kafka: Listener) -> None:
    with kafka.connect() as s:
        left = leave(s, "nowhere", "nobody", "somebody")
        assert (left.error_code, [(m.member_id, m.error_code) for m in left.members]) == (
            ErrorCode.none, [("nobody", ErrorCode.unknown_member_id), ("somebody", ErrorCode.unknown_member_id)])
        assert ask(s, 16, LIST_V, request_class(16, LIST_V)(states_filter=())).groups == ()  # type: ignore[misc]
    assert kafka.client.get("/v1/groups").json()["groups"] == []


def test_leaving_a_group_that_does_not_exist_by_one_member_is_unknown_member_id_and_creates_no_group(
        kafka: Listener) -> None:
    from app.kafka.protocol import build

    with kafka.connect() as s:
        left = ask(s, 13, 0, build(request_class(13, 0), group_id="nowhere", member_id="nobody"))  # type: ignore[arg-type]
        assert left.error_code == ErrorCode.unknown_member_id
    assert kafka.client.get("/v1/groups").json()["groups"] == []


def test_heartbeat_and_sync_to_a_group_that_does_not_exist_are_unknown_member_id_and_create_no_group(
        kafka: Listener) -> None:
    with kafka.connect() as s:
        assert heartbeat(s, "nowhere", 1, "nobody") == ErrorCode.unknown_member_id
        assert sync(s, "nowhere", 1, "nobody", {"nobody": b""}).error_code == ErrorCode.unknown_member_id
    assert kafka.client.get("/v1/groups").json()["groups"] == []


def test_offset_commits_are_checked_against_the_generation_and_the_member(kafka: Listener) -> None:
    create_topic(kafka.client, "orders", partitions=2)
    s, member = _lone_member(kafka)
    with s:
        assert commit(s, "g", 0, member, {("orders", 0): 5}) == [ErrorCode.illegal_generation]
        assert commit(s, "g", 1, "member-unknown", {("orders", 0): 5}) == [ErrorCode.unknown_member_id]
        # A consumer that assigns itself partitions (generation -1, no member) while the group
        # has members: refused, as Kafka does.
        assert commit(s, "g", -1, "", {("orders", 0): 5}) == [ErrorCode.unknown_member_id]
        assert commit(s, "g", 1, member, {("orders", 0): 5, ("orders", 1): 7}) == [ErrorCode.none, ErrorCode.none]
        assert commit(s, "g", 1, member, {("nothing", 0): 5}) == [ErrorCode.unknown_topic_or_partition]
        assert fetch_offsets(s, "g", None) == [("orders", 0, 5, ErrorCode.none), ("orders", 1, 7, ErrorCode.none)]
    # The same offsets through the HTTP door.
    offsets = kafka.client.get("/v1/groups/g/offsets").json()["offsets"]
    assert [(o["topic"], o["partition"], o["offset"]) for o in offsets] == [("orders", 0, 5), ("orders", 1, 7)]


def test_a_consumer_without_a_group_commits_with_generation_minus_one_to_a_group_without_members(
        kafka: Listener) -> None:
    create_topic(kafka.client, "orders")
    with kafka.connect() as s:
        assert commit(s, "solo", -1, "", {("orders", 0): 2}) == [ErrorCode.none]
        assert fetch_offsets(s, "solo", {"orders": [0, 1]}) == [
            ("orders", 0, 2, ErrorCode.none), ("orders", 1, -1, ErrorCode.none)]


def test_a_consumer_without_a_group_commits_to_a_group_whose_members_session_has_ended(
        kafka: Listener, clock: Any) -> None:
    create_topic(kafka.client, "orders")
    s, _member = _lone_member(kafka)
    with s:
        assert commit(s, "g", -1, "", {("orders", 0): 2}) == [ErrorCode.unknown_member_id]
        clock.advance(10_001)  # past its 10 s session; group expiry has not run
        assert commit(s, "g", -1, "", {("orders", 0): 2}) == [ErrorCode.none]


def test_offset_fetch_with_require_stable_answers_unstable_while_a_transaction_holds_offsets(
        kafka: Listener) -> None:
    create_topic(kafka.client, "orders", partitions=2)
    client = kafka.client
    with kafka.connect() as s:
        assert commit(s, "g", -1, "", {("orders", 0): 1, ("orders", 1): 1}) == [ErrorCode.none, ErrorCode.none]
        p = init_producer(client, "t1")
        ident = {"producer_id": p["producer_id"], "producer_epoch": p["producer_epoch"]}
        assert client.post("/v1/transactions/t1/begin", json=ident).status_code == 200
        r = client.post("/v1/transactions/t1/offsets", json={**ident, "group_id": "g", "offsets": [
            {"topic": "orders", "partition": 0, "offset": 4}]})
        assert r.status_code == 200, r.text
        assert fetch_offsets(s, "g", {"orders": [0, 1]}) == [
            ("orders", 0, -1, ErrorCode.unstable_offset_commit), ("orders", 1, 1, ErrorCode.none)]
        assert fetch_offsets(s, "g", {"orders": [0, 1]}, require_stable=False) == [
            ("orders", 0, 1, ErrorCode.none), ("orders", 1, 1, ErrorCode.none)]
        assert client.post("/v1/transactions/t1/commit", json=ident).status_code == 200
        assert fetch_offsets(s, "g", {"orders": [0, 1]}) == [
            ("orders", 0, 4, ErrorCode.none), ("orders", 1, 1, ErrorCode.none)]


def test_describe_groups_and_list_groups_answer_the_groups_of_both_doors(kafka: Listener) -> None:
    create_topic(kafka.client, "orders", partitions=2)
    assert kafka.client.post("/v1/groups/web/members", json={"topics": ["orders"]}).status_code == 200
    s, member = _lone_member(kafka)
    with s:
        assert commit(s, "offsets-only", -1, "", {("orders", 0): 1}) == [ErrorCode.none]
        body = request_class(15, DESCRIBE_V)(groups=("g", "web", "offsets-only", "unknown"),  # type: ignore[misc]
                                             include_authorized_operations=False)
        described = ask(s, 15, DESCRIBE_V, body).groups
        assert [(d.group_id, d.error_code, d.group_state, d.protocol_type, d.protocol_data, len(d.members))
                for d in described] == [
            ("g", ErrorCode.none, "Stable", "consumer", "range", 1),
            ("web", ErrorCode.none, "Stable", "", "", 1),
            ("offsets-only", ErrorCode.none, "Empty", "", "", 0),
            ("unknown", ErrorCode.none, "Dead", "", "", 0)]
        (m,) = described[0].members
        assert (m.member_id, m.member_metadata, m.member_assignment) == (
            member, subscription("orders"), assignment({"orders": [0, 1]}))
        listed = ask(s, 16, LIST_V, request_class(16, LIST_V)(states_filter=())).groups  # type: ignore[misc]
        assert [(g.group_id, g.protocol_type, g.group_state) for g in listed] == [
            ("g", "consumer", "Stable"), ("offsets-only", "", "Empty"), ("web", "", "Stable")]
        stable = ask(s, 16, LIST_V, request_class(16, LIST_V)(states_filter=("Empty",))).groups  # type: ignore[misc]
        assert [g.group_id for g in stable] == ["offsets-only"]


def test_describe_groups_and_list_groups_answers_are_encoded_off_the_event_loop(
        kafka: Listener, monkeypatch: Any) -> None:
    # A group's members' metadata has no bound below the frame's: encoded on the event loop, a
    # 200 MiB DescribeGroups answer held up every connection of both doors for seconds.
    import app.kafka.server as server

    threads = []
    encoded = server._encoded

    def noted(correlation_id: int, response: Any) -> Any:
        threads.append((type(response).__name__, threading.current_thread().name))
        return encoded(correlation_id, response)

    monkeypatch.setattr(server, "_encoded", noted)
    loop_thread = kafka.client.portal.call(lambda: threading.current_thread().name)
    with kafka.connect() as s:
        ask(s, 15, DESCRIBE_V, request_class(15, DESCRIBE_V)(groups=("g",), include_authorized_operations=False))  # type: ignore[misc]
        ask(s, 16, LIST_V, request_class(16, LIST_V)(states_filter=()))  # type: ignore[misc]
    assert [name for name, _ in threads] == ["DescribeGroupsResponse", "ListGroupsResponse"]
    assert all(thread != loop_thread for _, thread in threads), (threads, loop_thread)


def test_describe_groups_answers_the_client_id_a_member_joined_with_cut_to_255_characters_and_its_host(
        kafka: Listener) -> None:
    create_topic(kafka.client, "orders")
    with kafka.connect() as s:
        # Kafka's client id may hold 32767 bytes; the service keeps the first 255 characters.
        joined = join(s, "g", client_id="c" * 300)
        assert joined.error_code == ErrorCode.none
        body = request_class(15, DESCRIBE_V)(groups=("g",), include_authorized_operations=False)  # type: ignore[misc]
        (described,) = ask(s, 15, DESCRIBE_V, body).groups
        assert [(m.member_id, m.client_id, m.client_host) for m in described.members] == [
            (joined.member_id, "c" * 255, "/127.0.0.1")]


def test_a_consumer_group_whose_members_left_is_empty_and_keeps_its_protocol_type(kafka: Listener) -> None:
    create_topic(kafka.client, "orders", partitions=2)
    s, member = _lone_member(kafka)
    with s:
        assert [m.error_code for m in leave(s, "g", member).members] == [ErrorCode.none]
        body = request_class(15, DESCRIBE_V)(groups=("g",), include_authorized_operations=False)  # type: ignore[misc]
        (described,) = ask(s, 15, DESCRIBE_V, body).groups
        assert (described.error_code, described.group_state, described.protocol_type, described.protocol_data,
                described.members) == (ErrorCode.none, "Empty", "consumer", "", ())
        listed = ask(s, 16, LIST_V, request_class(16, LIST_V)(states_filter=())).groups  # type: ignore[misc]
        assert [(g.group_id, g.protocol_type, g.group_state) for g in listed] == [("g", "consumer", "Empty")]


def test_a_group_with_members_of_one_door_refuses_the_other_doors_join(kafka: Listener) -> None:
    create_topic(kafka.client, "orders")
    assert kafka.client.post("/v1/groups/web/members", json={"topics": ["orders"]}).status_code == 200
    s, member = _lone_member(kafka)
    with s:
        assert join(s, "web").error_code == ErrorCode.inconsistent_group_protocol
        r = kafka.client.post("/v1/groups/g/members", json={"topics": ["orders"]})
        assert (r.status_code, r.json()["error_code"]) == (409, "INCONSISTENT_GROUP_PROTOCOL")
        # Empty again, either door may take it; its offsets are the same numbers in both.
        assert commit(s, "g", 1, member, {("orders", 0): 3}) == [ErrorCode.none]
        assert [m.error_code for m in leave(s, "g", member).members] == [ErrorCode.none]
        r = kafka.client.post("/v1/groups/g/members", json={"topics": ["orders"]})
        assert r.status_code == 200, r.text
        assert r.json()["generation_id"] == 3  # 1: the Kafka member; 2: it left; 3: the HTTP member
        offsets = kafka.client.get("/v1/groups/g/offsets").json()["offsets"]
        assert [(o["topic"], o["partition"], o["offset"]) for o in offsets] == [("orders", 0, 3)]


def test_bad_group_requests_are_answered_with_kafkas_codes_on_the_same_connection(kafka: Listener) -> None:
    create_topic(kafka.client, "orders")
    s, member = _lone_member(kafka)
    with s:
        assert join(s, "g", "member-unknown").error_code == ErrorCode.unknown_member_id
        assert join(s, "g", protocol_type="connect").error_code == ErrorCode.inconsistent_group_protocol
        assert join(s, "g", protocols=(("roundrobin", b""),)).error_code == ErrorCode.inconsistent_group_protocol
        assert join(s, "other", protocols=()).error_code == ErrorCode.inconsistent_group_protocol
        assert join(s, "other", session_s=3600).error_code == ErrorCode.invalid_session_timeout
        assert join(s, "other", group_instance_id="").error_code == ErrorCode.invalid_request
        assert sync(s, "g", 1, "member-unknown").error_code == ErrorCode.unknown_member_id
        assert sync(s, "g", 7, member).error_code == ErrorCode.illegal_generation
        assert heartbeat(s, "nothing", 1, member) == ErrorCode.unknown_member_id
        assert heartbeat(s, "g", 1, member) == ErrorCode.none


def test_a_member_whose_session_times_out_is_removed_by_group_expiry_and_the_others_rebalance(
        kafka: Listener, clock: Any) -> None:
    from app.worker.chore import ChoreConfig
    from app.worker.group_expiry import GroupExpiryWorker

    create_topic(kafka.client, "orders")
    worker = GroupExpiryWorker(kafka.services.group_expiry, clock, ChoreConfig(interval_ms=50))
    a, a_id = _lone_member(kafka)
    with a, kafka.connect() as b:
        waiting, b_joined = in_thread(join, b, "g", session_s=6)
        while heartbeat(a, "g", 1, a_id) == ErrorCode.none:
            pass
        join(a, "g", a_id)
        waiting.join(10)
        b_id = b_joined[0].member_id
        sync(a, "g", 2, a_id, {a_id: assignment({"orders": [0]}), b_id: b""})
        clock.advance(6_001)  # B, silent since the join ended, is past its 6 s; A's is 10 s
        assert worker.run_once().expired_members == 1
        assert heartbeat(b, "g", 2, b_id) == ErrorCode.unknown_member_id
        assert heartbeat(a, "g", 2, a_id) == ErrorCode.rebalance_in_progress
        again = join(a, "g", a_id)
        assert (again.generation_id, [m.member_id for m in again.members]) == (3, [a_id])


def test_a_member_heartbeating_during_a_rebalance_keeps_its_session_until_the_rebalance_deadline(
        kafka: Listener, clock: Any) -> None:
    from app.worker.chore import ChoreConfig
    from app.worker.group_expiry import GroupExpiryWorker

    create_topic(kafka.client, "orders")
    worker = GroupExpiryWorker(kafka.services.group_expiry, clock, ChoreConfig(interval_ms=50))
    a, a_id = _lone_member(kafka)  # session 10 s, rebalance timeout 10 s
    with a, kafka.connect() as b:
        waiting, b_joined = in_thread(join, b, "g", session_s=30, rebalance_s=30)
        while heartbeat(a, "g", 1, a_id) == ErrorCode.none:
            pass
        # A, busy before it joins again, heartbeats: answered REBALANCE_IN_PROGRESS, and alive.
        for _ in range(3):
            clock.advance(6_000)
            assert heartbeat(a, "g", 1, a_id) == ErrorCode.rebalance_in_progress
            assert worker.run_once().expired_members == 0
        again = join(a, "g", a_id)
        waiting.join(10)
        assert (again.error_code, again.generation_id) == (ErrorCode.none, 2)
        assert sorted(m.member_id for m in again.members) == sorted([a_id, b_joined[0].member_id])


def test_a_group_takes_at_most_group_max_size_members(kafka: Listener) -> None:
    create_topic(kafka.client, "orders")
    for service in (kafka.services.groups, kafka.services.classic_group_protocol):  # the HTTP and the Kafka door's
        service.settings = service.settings.model_copy(update={"group_max_size": 1})
    s, member = _lone_member(kafka)
    with s, kafka.connect() as other:
        assert join(other, "g").error_code == ErrorCode.group_max_size_reached
        assert join(s, "g", member).error_code == ErrorCode.none  # a member joining again is no new one
    r = kafka.client.post("/v1/groups/web/members", json={"topics": ["orders"]})
    assert r.status_code == 200, r.text
    r = kafka.client.post("/v1/groups/web/members", json={"topics": ["orders"]})
    assert (r.status_code, r.json()["error_code"]) == (409, "GROUP_MAX_SIZE_REACHED")


def test_the_http_door_cannot_heartbeat_or_remove_a_kafka_member(kafka: Listener) -> None:
    create_topic(kafka.client, "orders")
    s, member = _lone_member(kafka)
    with s:
        r = kafka.client.post(f"/v1/groups/g/members/{member}/heartbeat")
        assert (r.status_code, r.json()["error_code"]) == (409, "INCONSISTENT_GROUP_PROTOCOL")
        r = kafka.client.delete(f"/v1/groups/g/members/{member}")
        assert (r.status_code, r.json()["error_code"]) == (409, "INCONSISTENT_GROUP_PROTOCOL")
        assert heartbeat(s, "g", 1, member) == ErrorCode.none


def test_two_listeners_are_one_coordinator_the_rebalance_being_in_the_database(kafka: Listener) -> None:
    """Each listener keeps only its own waiting requests (as each `serve` process does): a join
    waiting on one is completed by a rejoin through the other."""
    from tests.kafka.conftest import listener_with

    create_topic(kafka.client, "orders", partitions=2)
    a, a_id = _lone_member(kafka)
    with listener_with(kafka) as other, a, other.connect() as b:
        waiting, b_joined = in_thread(join, b, "g")
        while heartbeat(a, "g", 1, a_id) == ErrorCode.none:
            pass
        a_joined = join(a, "g", a_id)
        waiting.join(10)
        (b_joined_,) = b_joined
        assert (a_joined.generation_id, b_joined_.generation_id, b_joined_.leader) == (2, 2, a_id)
        waiting, b_synced = in_thread(sync, b, "g", 2, b_joined_.member_id)
        given = {a_id: assignment({"orders": [0]}), b_joined_.member_id: assignment({"orders": [1]})}
        sync(a, "g", 2, a_id, given)
        waiting.join(10)
        assert [x.assignment for x in b_synced] == [given[b_joined_.member_id]]


def test_every_served_version_of_the_group_apis_is_answered(kafka: Listener) -> None:
    """One group per JoinGroup version, driven through every API at its versions: each answer
    is read with that version's own type, without an error."""
    from app.kafka.api_keys import SERVED
    from app.kafka.protocol import build

    create_topic(kafka.client, "orders")
    versions = {key: range(lo, hi + 1) for key, (lo, hi) in SERVED.items()}
    with kafka.connect() as s:
        for v in versions[11]:
            group = f"g{v}"
            proto = _nested(11, v, "JoinGroupRequestProtocol")
            joined = None
            for member_id in ("", None):  # from version 4 a new member asks for its id first
                joined = ask(s, 11, v, build(request_class(11, v), group_id=group, session_timeout=10 * S,  # type: ignore[arg-type]
                                             rebalance_timeout=10 * S,
                                             member_id=joined.member_id if member_id is None else member_id,
                                             group_instance_id=None, protocol_type="consumer",
                                             protocols=(proto(name="range", metadata=subscription("orders")),)))
                if joined.error_code != ErrorCode.member_id_required:
                    break
                assert v >= 4, v
            assert (joined.error_code, joined.generation_id) == (ErrorCode.none, 1), v
            member = joined.member_id
            sv = min(v, versions[14][-1])
            item = _nested(14, sv, "SyncGroupRequestAssignment")
            synced = ask(s, 14, sv, build(request_class(14, sv), group_id=group, generation_id=1,  # type: ignore[arg-type]
                                          member_id=member, group_instance_id=None, protocol_type="consumer",
                                          protocol_name="range",
                                          assignments=(item(member_id=member, assignment=b"\x00\x00"),)))
            assert (synced.error_code, synced.assignment) == (ErrorCode.none, b"\x00\x00"), v
        member_of_g0 = None
        for hv in versions[12]:
            d = ask(s, 15, 0, build(request_class(15, 0), groups=("g0",)))  # type: ignore[arg-type]
            member_of_g0 = d.groups[0].members[0].member_id
            answer = ask(s, 12, hv, build(request_class(12, hv), group_id="g0", generation_id=1,  # type: ignore[arg-type]
                                          member_id=member_of_g0, group_instance_id=None))
            assert answer.error_code == ErrorCode.none, hv
        for cv in versions[8]:
            topic = _nested(8, cv, "OffsetCommitRequestTopic")
            part = _nested(8, cv, "OffsetCommitRequestPartition")
            answer = ask(s, 8, cv, build(request_class(8, cv), group_id="g0", generation_id_or_member_epoch=1,  # type: ignore[arg-type]
                                         member_id=member_of_g0, group_instance_id=None,
                                         retention_time=datetime.timedelta(milliseconds=-1),
                                         topics=(topic(name="orders", partitions=(build(
                                             part, partition_index=0, committed_offset=cv, committed_leader_epoch=-1,
                                             committed_metadata=None),)),)))
            assert [p.error_code for t in answer.topics for p in t.partitions] == [ErrorCode.none], cv
        for fv in versions[9]:
            topic = _nested(9, fv, "OffsetFetchRequestTopic")
            answer = ask(s, 9, fv, build(request_class(9, fv), group_id="g0", require_stable=True,  # type: ignore[arg-type]
                                         topics=(topic(name="orders", partition_indexes=(0,)),)))
            assert [(p.committed_offset, p.error_code) for t in answer.topics for p in t.partitions] == [
                (versions[8][-1], ErrorCode.none)], fv
        for dv in versions[15]:
            answer = ask(s, 15, dv, build(request_class(15, dv), groups=("g0",),  # type: ignore[arg-type]
                                          include_authorized_operations=False))
            assert [(g.group_state, len(g.members)) for g in answer.groups] == [("Stable", 1)], dv
        for lv in versions[16]:
            answer = ask(s, 16, lv, build(request_class(16, lv), states_filter=()))  # type: ignore[arg-type]
            assert [g.group_id for g in answer.groups] == [f"g{v}" for v in versions[11]], lv
        for n, lv in enumerate(versions[13]):
            group = f"g{n + 1}"
            d = ask(s, 15, 0, build(request_class(15, 0), groups=(group,)))  # type: ignore[arg-type]
            mid = d.groups[0].members[0].member_id
            identity = _nested(13, lv, "MemberIdentity") if lv >= 3 else None
            answer = ask(s, 13, lv, build(request_class(13, lv), group_id=group, member_id=mid,  # type: ignore[arg-type]
                                          members=() if identity is None else (
                                              identity(member_id=mid, group_instance_id=None),)))
            assert answer.error_code == ErrorCode.none, lv
