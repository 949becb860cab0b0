"""Kafka's initial rebalance delay (OUTBOX_GROUP_INITIAL_REBALANCE_DELAY_MS, Kafka's
group.initial.rebalance.delay.ms) on a Kafka door's group, on both databases: a group that is
empty when a member joins forms its first generation no sooner than the delay; each period of
the delay in which a member was added extends it by another, up to the first member's rebalance
timeout; a period with none ends it, and a member leaving does not; a group that has members is
not delayed, nor is a rebalance that a process from before migration 0028 began after ending a
delay. Time is the test's clock: the delay is 3,000 ms and the rebalance timeout 10,000 ms."""

from __future__ import annotations

import pytest

from app.domain.group import StoredGroupState
from app.services.classic_group_protocol import ClassicGroupProtocol, Joined, Joining
from app.services.group_expiry import GroupExpiry
from app.storage import groups

DELAY_MS = 3_000
REBALANCE_TIMEOUT_MS = 10_000


@pytest.fixture
def kafka(services, clock) -> ClassicGroupProtocol:  # type: ignore[no-untyped-def]
    return ClassicGroupProtocol(services.db, services.settings.model_copy(
        update={"group_initial_rebalance_delay_ms": DELAY_MS}), clock)


def _join(kafka: ClassicGroupProtocol, member_id: str = "") -> Joined | Joining:
    return kafka.join("g", member_id=member_id, client_id="c", protocol_type="consumer",
                      protocols=[("range", b"")], topic_names=["t"], session_timeout_ms=10_000,
                      rebalance_timeout_ms=REBALANCE_TIMEOUT_MS)


def _generation(kafka: ClassicGroupProtocol, *joining: Joined | Joining) -> list[tuple[str, int] | None]:
    """Each waiting member's answer now: (member id, generation) once joined, None while it waits."""
    answers = [kafka.joined("g", j.member_id, j.generation_id) for j in joining]
    return [(a.member_id, a.generation_id) if isinstance(a, Joined) else None for a in answers]


def test_the_first_member_of_an_empty_group_waits_out_the_delay(kafka, clock) -> None:  # type: ignore[no-untyped-def]
    first = _join(kafka)
    assert isinstance(first, Joining)

    clock.advance(DELAY_MS - 1)
    assert _generation(kafka, first) == [None]
    clock.advance(1)
    assert _generation(kafka, first) == [(first.member_id, 1)]


def test_members_that_join_during_the_delay_are_in_the_first_generation(kafka, clock) -> None:  # type: ignore[no-untyped-def]
    first = _join(kafka)
    clock.advance(2_000)
    second = _join(kafka)

    clock.advance(DELAY_MS - 2_000)  # the first period ends; a member was added in it
    assert _generation(kafka, first, second) == [None, None]
    clock.advance(DELAY_MS)  # the second period ends with none added
    assert _generation(kafka, first, second) == [(first.member_id, 1), (second.member_id, 1)]


def test_each_period_with_a_new_member_extends_the_delay_up_to_the_rebalance_timeout(  # type: ignore[no-untyped-def]
        kafka, clock) -> None:
    start = clock()
    joining = [_join(kafka)]
    # A member added in each period, at 2 s, 5 s, 8 s and 9.5 s: the periods end at 3 s, 6 s,
    # 9 s and then at 10 s (what the rebalance timeout leaves), where the delay ends.
    for added_ms, period_end_ms in ((2_000, 3_000), (5_000, 6_000), (8_000, 9_000), (9_500, 10_000)):
        clock.now_ms = start + added_ms
        joining.append(_join(kafka))
        clock.now_ms = start + period_end_ms - 1
        assert _generation(kafka, *joining) == [None] * len(joining)
    clock.now_ms = start + REBALANCE_TIMEOUT_MS
    assert _generation(kafka, *joining) == [(j.member_id, 1) for j in joining]


def test_a_member_leaving_does_not_end_the_delay(kafka, clock) -> None:  # type: ignore[no-untyped-def]
    start = clock()
    first = _join(kafka)
    second = _join(kafka)
    clock.now_ms = start + 1_000

    assert kafka.leave("g", [(second.member_id, None)]) == [None]
    assert _generation(kafka, first) == [None]
    third = _join(kafka)  # started with them: still in the first generation
    # The second's join extended the delay by a period: 3 s, then 3 s more.
    clock.now_ms = start + 2 * DELAY_MS
    assert _generation(kafka, first, third) == [(first.member_id, 1), (third.member_id, 1)]


def test_a_group_with_members_rebalances_without_the_delay(kafka, clock) -> None:  # type: ignore[no-untyped-def]
    first = _join(kafka)
    clock.advance(DELAY_MS)
    assert _generation(kafka, first) == [(first.member_id, 1)]

    second = _join(kafka)  # the group has a member: a rebalance, not an initial one
    rejoined = _join(kafka, first.member_id)
    assert isinstance(rejoined, Joined)
    assert (rejoined.generation_id, _generation(kafka, second)) == (2, [(second.member_id, 2)])


def _as_a_process_before_0028(services, clock, first: str) -> str:  # type: ignore[no-untyped-def]
    """What a process from before migration 0028, which knows no delay, writes in a mixed fleet:
    it ends the delayed join phase (every member has joined, which is all it waits for), the
    leader's assignment makes the group Stable, and a second member's join begins the next
    rebalance; none of it touches the delay's columns. The second member's id."""
    with services.db.write() as conn:
        groups.update_group(conn, "g", generation_id=1, state=StoredGroupState.COMPLETING_REBALANCE,
                            protocol_name="range", leader_id=first, rebalance_deadline_ms=None, updated_ms=clock())
        groups.update_member(conn, "g", first, member_assignment=b"", last_heartbeat_ms=clock())
        groups.update_group(conn, "g", state=StoredGroupState.STABLE, updated_ms=clock())
        groups.add_member(conn, "g", groups.Member(
            "second", ["t"], [], 10_000, clock(), clock(), [("range", b"")], REBALANCE_TIMEOUT_MS, 2))
        groups.update_group(conn, "g", state=StoredGroupState.PREPARING_REBALANCE,
                            rebalance_deadline_ms=clock() + REBALANCE_TIMEOUT_MS, updated_ms=clock())
    return "second"


def test_a_rebalance_after_a_delay_an_older_process_ended_completes_when_every_member_has_joined(  # type: ignore[no-untyped-def]
        kafka, services, clock) -> None:
    first = _join(kafka)
    second = _as_a_process_before_0028(services, clock, first.member_id)

    rejoined = _join(kafka, first.member_id)  # the last member joins again: not a delay's join phase
    assert isinstance(rejoined, Joined)
    assert (rejoined.generation_id, _generation(kafka, Joining(second, 2))) == (2, [(second, 2)])


def test_group_expiry_ends_a_delay_whose_deadline_passed_with_no_request_waiting(  # type: ignore[no-untyped-def]
        kafka, services, clock) -> None:
    first = _join(kafka)
    clock.advance(DELAY_MS + 1)

    assert GroupExpiry(services.db, kafka.settings).expire_members(clock()) == 0
    with services.db.read() as conn:
        g = groups.group(conn, "g")
    assert g is not None
    assert (g.state, g.generation_id, g.leader_id) == (StoredGroupState.COMPLETING_REBALANCE, 1, first.member_id)


def test_group_expiry_extends_a_delay_in_whose_period_a_member_was_added(  # type: ignore[no-untyped-def]
        kafka, services, clock) -> None:
    _join(kafka)
    clock.advance(2_000)
    _join(kafka)  # added in the first period, which then ends with no request
    clock.advance(DELAY_MS - 2_000 + 1)

    assert GroupExpiry(services.db, kafka.settings).expire_members(clock()) == 0
    with services.db.read() as conn:
        g = groups.group(conn, "g")
    assert g is not None
    assert (g.state, g.generation_id) == (StoredGroupState.PREPARING_REBALANCE, 0)
