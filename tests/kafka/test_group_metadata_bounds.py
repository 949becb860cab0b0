"""OUTBOX_KAFKA_GROUP_MAX_METADATA_BYTES and OUTBOX_KAFKA_GROUP_MAX_TOTAL_METADATA_BYTES over the
wire: a member's JoinGroup protocols and the assignments its leader's SyncGroup gives are
stored with the group and sent back in every DescribeGroups and to every leader, so the bytes
of each are bounded below the frame limit, and a group's members' together. Past a bound the
request is answered INVALID_REQUEST, the group is left as it was, and one WARNING names the
principal, never the bytes."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from app.kafka.protocol import request_class
from app.storage import groups
from tests.helpers import create_topic
from tests.kafka.conftest import Listener, ask, listener_with
from tests.kafka.test_groups import DESCRIBE_V, assignment, heartbeat, in_thread, join, subscription, sync

pytestmark = pytest.mark.kafka

BOUND = 2048
# What the metadata is padded with: the log must never show it.
PAD = b"\x7fPAYLOAD"


@pytest.fixture(params=["door", "service"])
def bounded(kafka: Listener, request: pytest.FixtureRequest) -> Iterator[Listener]:
    """A listener whose bound is BOUND bytes: the door's, which checks first, or the group
    service's alone, which checks again for any caller."""
    create_topic(kafka.client, "orders", partitions=2)
    if request.param == "door":
        with listener_with(kafka, kafka_group_max_metadata_bytes=BOUND) as door:
            yield door
        return
    service = kafka.services.classic_group_protocol
    before = service.settings
    service.settings = before.model_copy(update={"kafka_group_max_metadata_bytes": BOUND})
    try:
        yield kafka
    finally:
        service.settings = before


def _padded(name: str, size: int) -> bytes:
    """A subscription to "orders" whose protocol, `name` and all, is `size` bytes: user data past
    the version 0 fields is what a client's userdata would be, which the service does not read."""
    base = subscription("orders")
    left = size - len(name.encode()) - len(base)
    return base + (PAD * (left // len(PAD) + 1))[:left]


def _describe(s: Any, group: str) -> Any:
    body = request_class(15, DESCRIBE_V)(groups=(group,), include_authorized_operations=False)  # type: ignore[misc]
    (described,) = ask(s, 15, DESCRIBE_V, body).groups
    return described


def _state(s: Any, group: str) -> Any:
    d = _describe(s, group)
    return (d.group_state, d.protocol_data,
            [(m.member_id, m.member_metadata, m.member_assignment) for m in d.members])


def _refusals(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.levelno == logging.WARNING and "refused" in r.getMessage() and "OUTBOX_KAFKA_GROUP_MAX" in r.getMessage()]


def _one_refusal_logged(caplog: pytest.LogCaptureFixture, *said: str) -> None:
    """One WARNING of the refusal, the door's or the service's, saying `said` and never the bytes."""
    (line,) = _refusals(caplog)
    assert all(s in line for s in said), line
    assert "PAYLOAD" not in line


def test_a_join_whose_metadata_is_past_the_bound_is_invalid_request_and_adds_no_member(
        bounded: Listener, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="app.kafka")
    with bounded.connect() as s:
        joined = join(s, "g", protocols=(("range", _padded("range", BOUND + 1)),))
        assert (joined.error_code, joined.member_id, joined.generation_id) == (ErrorCode.invalid_request, "", -1)
        assert _state(s, "g") == ("Dead", "", [])
    _one_refusal_logged(caplog, "JoinGroup of group 'g' from User:ANONYMOUS", f"{BOUND + 1} bytes")


def test_joins_refused_again_and_again_are_one_warning_a_while(
        bounded: Listener, caplog: pytest.LogCaptureFixture) -> None:
    # A client may repeat a refused JoinGroup as fast as it likes: not a line each time.
    caplog.set_level(logging.WARNING, logger="app.kafka")
    with bounded.connect() as s:
        for _ in range(3):
            assert join(s, "g", protocols=(("range", _padded("range", BOUND + 1)),)).error_code == ErrorCode.invalid_request
    _one_refusal_logged(caplog, "JoinGroup of group 'g' from User:ANONYMOUS")


def test_a_join_whose_protocols_together_are_past_the_bound_is_refused(bounded: Listener) -> None:
    # The sum over its protocols, names included: each alone is under the bound.
    half = BOUND // 2
    with bounded.connect() as s:
        joined = join(s, "g", protocols=(("range", _padded("range", half)), ("roundrobin", _padded("roundrobin", half + 1))))
        assert joined.error_code == ErrorCode.invalid_request
        assert _state(s, "g") == ("Dead", "", [])


def test_a_join_at_the_bound_is_accepted_and_described_as_sent(bounded: Listener) -> None:
    metadata = _padded("range", BOUND)
    with bounded.connect() as s:
        joined = join(s, "g", protocols=(("range", metadata),))
        assert (joined.error_code, joined.generation_id) == (ErrorCode.none, 1)
        assert [m.metadata for m in joined.members] == [metadata]
        given = assignment({"orders": [0, 1]})
        assert sync(s, "g", 1, joined.member_id, {joined.member_id: given}).error_code == ErrorCode.none
        assert _state(s, "g") == ("Stable", "range", [(joined.member_id, metadata, given)])


def test_a_member_rejoining_with_metadata_past_the_bound_leaves_the_group_as_it_was(
        bounded: Listener, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="app.kafka")
    with bounded.connect() as s:
        joined = join(s, "g")
        given = assignment({"orders": [0, 1]})
        assert sync(s, "g", 1, joined.member_id, {joined.member_id: given}).error_code == ErrorCode.none
        before = _state(s, "g")
        again = join(s, "g", joined.member_id, protocols=(("range", _padded("range", BOUND + 1)),))
        assert again.error_code == ErrorCode.invalid_request
        # No rebalance began: the generation is the one the member synced, its metadata its first.
        assert _state(s, "g") == before == ("Stable", "range", [(joined.member_id, subscription("orders"), given)])
        assert sync(s, "g", 1, joined.member_id).error_code == ErrorCode.none
    _one_refusal_logged(caplog, "JoinGroup of group 'g' from User:ANONYMOUS", f"{BOUND + 1} bytes")


def test_a_leaders_assignment_past_the_bound_is_invalid_request_and_stores_nothing(
        bounded: Listener, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="app.kafka")
    with bounded.connect() as s:
        joined = join(s, "g")
        member = joined.member_id
        too_large = assignment({"orders": [0, 1]}) + PAD * (BOUND // len(PAD))
        assert len(too_large) > BOUND
        assert sync(s, "g", 1, member, {member: too_large}).error_code == ErrorCode.invalid_request
        # The group still waits for its leader's assignment, and no member has one.
        assert _state(s, "g") == ("CompletingRebalance", "range", [(member, subscription("orders"), b"")])
        _one_refusal_logged(caplog, "SyncGroup of group 'g' from User:ANONYMOUS", f"{len(too_large)} bytes")
        # One at the bound is taken.
        at_bound = too_large[:BOUND]
        synced = sync(s, "g", 1, member, {member: at_bound})
        assert (synced.error_code, synced.assignment) == (ErrorCode.none, at_bound)
        assert _state(s, "g") == ("Stable", "range", [(member, subscription("orders"), at_bound)])


def test_the_default_bound_takes_a_real_clients_subscription_and_refuses_past_one_mib(kafka: Listener) -> None:
    create_topic(kafka.client, "orders")
    assert kafka.services.settings.kafka_group_max_metadata_bytes == 1_048_576
    with kafka.connect() as s:
        assert join(s, "g").error_code == ErrorCode.none
        assert join(s, "h", protocols=(("range", _padded("range", 1_048_577)),)).error_code \
            == ErrorCode.invalid_request


# --- The group's total (OUTBOX_KAFKA_GROUP_MAX_TOTAL_METADATA_BYTES) ------------------------

TOTAL = BOUND + 1024


@pytest.fixture(params=["door", "service"])
def totalled(kafka: Listener, request: pytest.FixtureRequest) -> Iterator[Listener]:
    """A listener whose groups' members hold at most TOTAL bytes of protocols together, and a
    leader's assignments as many (each member's BOUND): the service checks a join's under the
    group's lock, which only it can; a SyncGroup's the door first ("door", its bounds lowered
    too), the service again."""
    create_topic(kafka.client, "orders", partitions=2)
    bounds = {"kafka_group_max_metadata_bytes": BOUND, "kafka_group_max_total_metadata_bytes": TOTAL}
    service = kafka.services.classic_group_protocol
    before = service.settings
    service.settings = before.model_copy(update=bounds)
    try:
        if request.param == "door":
            with listener_with(kafka, **bounds) as door:
                yield door
        else:
            yield kafka
    finally:
        service.settings = before


def _generation(listener: Listener, group: str) -> int | None:
    with listener.services.db.read() as conn:
        return groups.generation(conn, group)


def _two_members(listener: Listener, a: Any, b: Any, a_size: int, b_size: int) -> tuple[str, str]:
    """The members of "g" at generation 2, in CompletingRebalance: A (its protocols `a_size`
    bytes), the leader, joined first, B (`b_size`) joined after, on connections `a` and `b`."""
    first = join(a, "g", protocols=(("range", _padded("range", a_size)),))
    assert (first.error_code, first.generation_id) == (ErrorCode.none, 1)
    waiting, b_joined = in_thread(join, b, "g", protocols=(("range", _padded("range", b_size)),))
    # B waits at the barrier until A joins again, which A learns from its heartbeat.
    while heartbeat(a, "g", 1, first.member_id) == ErrorCode.none and waiting.is_alive():
        pass
    again = join(a, "g", first.member_id, protocols=(("range", _padded("range", a_size)),))
    waiting.join(10)
    (second,) = b_joined
    assert (again.error_code, again.generation_id, second.error_code, second.generation_id) == (
        ErrorCode.none, 2, ErrorCode.none, 2)
    return first.member_id, second.member_id


def test_a_join_that_would_bring_the_groups_protocols_past_the_total_is_refused_and_changes_nothing(
        totalled: Listener, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="app.kafka")
    with totalled.connect() as a, totalled.connect() as b:
        a_id, b_id = _two_members(totalled, a, b, BOUND, TOTAL - BOUND - 100)
        before = _state(a, "g")
        # Each alone under the member's bound, the three together past the group's by one byte.
        refused = join(b, "g", protocols=(("range", _padded("range", 101)),))
        assert (refused.error_code, refused.member_id, refused.generation_id) == (ErrorCode.invalid_request, "", -1)
        assert _state(a, "g") == before
        assert sorted(m for m, _, _ in before[2]) == sorted([a_id, b_id])
        assert _generation(totalled, "g") == 2
    _one_refusal_logged(caplog, "JoinGroup of group 'g' from User:ANONYMOUS", f"{TOTAL + 1} bytes",
                        "OUTBOX_KAFKA_GROUP_MAX_TOTAL_METADATA_BYTES")


def test_a_join_bringing_the_groups_protocols_to_exactly_the_total_is_accepted(totalled: Listener) -> None:
    with totalled.connect() as a, totalled.connect() as b:
        _two_members(totalled, a, b, BOUND, TOTAL - BOUND)
        assert sum(len("range") + len(metadata) for _, metadata, _ in _state(a, "g")[2]) == TOTAL


def test_a_member_rejoining_with_as_many_bytes_in_a_group_at_the_total_is_accepted(totalled: Listener) -> None:
    # Its own protocols are replaced, not added to: counted twice, the group would be past it.
    with totalled.connect() as a, totalled.connect() as b:
        a_id, b_id = _two_members(totalled, a, b, BOUND, TOTAL - BOUND)
        changed = _padded("range", TOTAL - BOUND)[:-1] + b"!"
        waiting, b_joined = in_thread(join, b, "g", b_id, protocols=(("range", changed),))
        while heartbeat(a, "g", 2, a_id) == ErrorCode.none and waiting.is_alive():
            pass
        again = join(a, "g", a_id, protocols=(("range", _padded("range", BOUND)),))
        waiting.join(10)
        assert [(x.error_code, x.generation_id) for x in (again, *b_joined)] == [(ErrorCode.none, 3)] * 2
        assert dict((m, metadata) for m, metadata, _ in _state(a, "g")[2])[b_id] == changed


def test_a_leaders_assignments_past_the_total_together_are_refused_and_store_nothing(
        totalled: Listener, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="app.kafka")
    with totalled.connect() as a, totalled.connect() as b:
        a_id, b_id = _two_members(totalled, a, b, 100, 100)
        base = assignment({"orders": [0]})
        a_given = base + PAD * ((BOUND - len(base)) // len(PAD))
        b_given = (base + PAD * (BOUND // len(PAD)))[:TOTAL - len(a_given) + 1]
        assert len(a_given) <= BOUND and len(b_given) <= BOUND  # each under the member's bound
        before = _state(a, "g")
        assert sync(a, "g", 2, a_id, {a_id: a_given, b_id: b_given}).error_code == ErrorCode.invalid_request
        # The group still waits for its leader's assignments, and no member has one.
        assert _state(a, "g") == before
        assert before[0] == "CompletingRebalance" and [given for _, _, given in before[2]] == [b"", b""]
        _one_refusal_logged(caplog, "SyncGroup of group 'g' from User:ANONYMOUS", f"{TOTAL + 1} bytes",
                            "OUTBOX_KAFKA_GROUP_MAX_TOTAL_METADATA_BYTES")
        # Together at the total, they are taken.
        synced = sync(a, "g", 2, a_id, {a_id: a_given, b_id: b_given[:-1]})
        assert (synced.error_code, synced.assignment) == (ErrorCode.none, a_given)
        assert sync(b, "g", 2, b_id).assignment == b_given[:-1]
