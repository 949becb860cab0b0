"""The JoinGroup whose transaction forms a generation carries the other members' answers
(Joined.others), on both databases: the Kafka door gives them to its requests waiting at the
barrier at once, as Kafka's coordinator answers every member when the join phase ends. A
JoinGroup that forms no generation carries none."""

from __future__ import annotations

from app.services.classic_group_protocol import Joined, Joining
from tests.helpers import create_topic


def _join(kafka, member_id: str = ""):  # type: ignore[no-untyped-def]
    return kafka.join("g", member_id=member_id, client_id=None, protocol_type="consumer",
                      protocols=[("range", b"")], topic_names=["t"], session_timeout_ms=10_000,
                      rebalance_timeout_ms=10_000)


def test_the_join_that_forms_a_generation_carries_each_other_members_answer(client, services) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "t", 2)
    kafka = services.classic_group_protocol
    first = _join(kafka)
    assert isinstance(first, Joined) and first.others == ()  # alone: no one else to answer
    follower = _join(kafka)
    assert isinstance(follower, Joining)

    leader = _join(kafka, first.member_id)  # the last member to join again forms generation 2

    assert isinstance(leader, Joined)
    assert leader.others == (Joined(follower.member_id, 2, "consumer", "range", first.member_id, []),)
    assert kafka.joined("g", follower.member_id, 2) == leader.others[0]  # what the service answers when asked


def test_a_join_that_forms_no_generation_carries_no_answers(client, services) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "t", 2)
    kafka = services.classic_group_protocol
    first = _join(kafka)
    assert isinstance(first, Joined)
    follower = _join(kafka)
    leader = _join(kafka, first.member_id)
    assert isinstance(leader, Joined) and isinstance(follower, Joining)

    again = _join(kafka, follower.member_id)  # a follower asking again, nothing changed: the current generation

    assert again == Joined(follower.member_id, 2, "consumer", "range", first.member_id, [])


def test_the_waiting_member_whose_deadline_passed_forms_the_generation_and_carries_the_others(  # type: ignore[no-untyped-def]
        client, services, clock) -> None:
    create_topic(client, "t", 2)
    kafka = services.classic_group_protocol
    first = _join(kafka)
    second = _join(kafka)
    clock.advance(1)  # the second joined first: it leads
    third = _join(kafka)
    assert isinstance(first, Joined) and isinstance(second, Joining) and isinstance(third, Joining)
    clock.advance(10_000)  # the first never joined generation 2: removed as the deadline has passed

    answer = kafka.joined("g", third.member_id, 2)

    assert isinstance(answer, Joined)
    assert (answer.generation_id, answer.leader_id) == (2, second.member_id)
    every = sorted([(second.member_id, None, b""), (third.member_id, None, b"")])  # stored by member id
    assert answer.others == (Joined(second.member_id, 2, "consumer", "range", second.member_id, every),)
