"""Kafka's classic group protocol without I/O: the assignor the members choose, what the
door reads from a consumer's subscription and assignment bytes, and which requests of a static
member (KIP-345) go on."""

from __future__ import annotations

import uuid

import pytest

from app.domain.errors import FencedInstanceId, InvalidRequest, UnknownMemberId
from app.domain.group import (
    MEMBER_ID_CLIENT_PART_MAX_LENGTH,
    check_current_member,
    check_group_instance_id,
    new_member_id,
    select_protocol,
)
from app.kafka.groups import _assigned, _subscribed
from tests.kafka.test_groups import assignment, subscription


def test_each_member_votes_for_its_first_shared_protocol_and_the_most_voted_wins() -> None:
    assert select_protocol([["range", "roundrobin"], ["roundrobin", "range"], ["roundrobin"]]) == "roundrobin"


def test_a_tie_goes_to_the_first_members_preference() -> None:
    assert select_protocol([["range", "sticky"], ["sticky", "range"]]) == "range"


def test_members_that_share_no_protocol_have_none() -> None:
    assert select_protocol([["range"], ["sticky"]]) is None
    assert select_protocol([]) is None


def test_a_consumers_subscription_and_assignment_are_read_from_their_bytes() -> None:
    assert _subscribed("consumer", [("range", subscription("orders", "refunds"))]) == ["orders", "refunds"]
    assert _assigned("consumer", assignment({"orders": [1, 0], "refunds": [2]})) == [
        ("orders", 0), ("orders", 1), ("refunds", 2)]


def test_bytes_that_are_not_the_consumer_protocols_name_no_topics() -> None:
    assert _subscribed("consumer", [("range", b"\x00\x00\x7f\xff\xff\xff")]) == []
    assert _subscribed("connect", [("range", subscription("orders"))]) == []
    assert _assigned("consumer", b"\x00") == []


def test_a_new_member_id_is_the_client_id_a_dash_and_a_uuid() -> None:
    member_id = new_member_id("rdkafka")
    assert member_id.startswith("rdkafka-") and str(uuid.UUID(member_id.removeprefix("rdkafka-"))) == \
        member_id.removeprefix("rdkafka-")


def test_a_member_id_without_a_client_id_starts_with_member() -> None:
    for nothing in (None, "", "/\x00\x7f"):
        assert new_member_id(nothing).startswith("member-")


def test_a_member_id_keeps_no_character_an_id_may_not_hold_and_at_most_255() -> None:
    assert new_member_id("a/b\nc").startswith("abc-")
    long = new_member_id("x" * 1000)
    assert len(long) == 255 and long.startswith("x" * MEMBER_ID_CLIENT_PART_MAX_LENGTH + "-")


# Member "m1" holds instance id "i-1"; "m2" is dynamic.
_INSTANCES = {"m1": "i-1", "m2": None}


def test_a_request_naming_an_instance_id_goes_on_only_for_the_member_id_holding_it() -> None:
    check_current_member("g", "m1", "i-1", _INSTANCES)
    with pytest.raises(FencedInstanceId):
        check_current_member("g", "m2", "i-1", _INSTANCES)
    with pytest.raises(FencedInstanceId):
        check_current_member("g", "m-replaced", "i-1", _INSTANCES)
    with pytest.raises(UnknownMemberId):
        check_current_member("g", "m1", "i-unheld", _INSTANCES)


def test_a_request_naming_no_instance_id_goes_on_for_any_member_static_or_dynamic() -> None:
    check_current_member("g", "m1", None, _INSTANCES)
    check_current_member("g", "m2", None, _INSTANCES)
    with pytest.raises(UnknownMemberId):
        check_current_member("g", "m-replaced", None, _INSTANCES)


def test_a_group_instance_id_is_none_or_1_to_249_characters() -> None:
    for fine in (None, "i", "x" * 249):
        check_group_instance_id(fine)
    for bad in ("", "x" * 250):
        with pytest.raises(InvalidRequest):
            check_group_instance_id(bad)
