"""OUTBOX_KAFKA_GROUP_MAX_METADATA_BYTES over the wire: a member's JoinGroup protocols and the
assignments its leader's SyncGroup gives are stored with the group and sent back in every
DescribeGroups and to every leader, so the bytes of each are bounded below the frame limit.
Past the bound the request is answered INVALID_REQUEST, the group is left as it was, and one
WARNING names the principal, never the bytes."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from app.kafka.protocol import request_class
from tests.helpers import create_topic
from tests.kafka.conftest import Listener, ask, listener_with
from tests.kafka.test_groups import DESCRIBE_V, assignment, join, subscription, sync

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
            if r.levelno == logging.WARNING and "refused" in r.getMessage() and "GROUP_MAX_METADATA" in r.getMessage()]


def _one_refusal_logged(bounded: Listener, caplog: pytest.LogCaptureFixture, *said: str) -> None:
    """One WARNING of the door's refusal, saying `said` and never the bytes; none when only the
    service's bound is lowered (the service answers, the door logs what it refuses itself)."""
    lines = _refusals(caplog)
    if bounded.door.services.settings.kafka_group_max_metadata_bytes != BOUND:
        assert lines == []
        return
    (line,) = lines
    assert all(s in line for s in said), line
    assert "PAYLOAD" not in line


def test_a_join_whose_metadata_is_past_the_bound_is_invalid_request_and_adds_no_member(
        bounded: Listener, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="app.kafka")
    with bounded.connect() as s:
        joined = join(s, "g", protocols=(("range", _padded("range", BOUND + 1)),))
        assert (joined.error_code, joined.member_id, joined.generation_id) == (ErrorCode.invalid_request, "", -1)
        assert _state(s, "g") == ("Dead", "", [])
    _one_refusal_logged(bounded, caplog, "JoinGroup of group 'g' from User:ANONYMOUS", f"{BOUND + 1} bytes")


def test_joins_refused_again_and_again_are_one_warning_a_while(
        bounded: Listener, caplog: pytest.LogCaptureFixture) -> None:
    # A client may repeat a refused JoinGroup as fast as it likes: not a line each time.
    caplog.set_level(logging.WARNING, logger="app.kafka")
    with bounded.connect() as s:
        for _ in range(3):
            assert join(s, "g", protocols=(("range", _padded("range", BOUND + 1)),)).error_code == ErrorCode.invalid_request
    _one_refusal_logged(bounded, caplog, "JoinGroup of group 'g' from User:ANONYMOUS")


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
    _one_refusal_logged(bounded, caplog, "JoinGroup of group 'g' from User:ANONYMOUS", f"{BOUND + 1} bytes")


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
        _one_refusal_logged(bounded, caplog, "SyncGroup of group 'g' from User:ANONYMOUS", f"{len(too_large)} bytes")
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
