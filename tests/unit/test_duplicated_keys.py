"""app.domain.request_shape.duplicated: the keys a request names more than once, which every
door refuses (the HTTP door the whole request, Kafka's ListOffsets each entry of them)."""

from __future__ import annotations

import pytest

from app.domain.errors import InvalidRequest
from app.domain.offsets import NO_LEADER_EPOCH, OffsetToStage, ReadOrder, check_distinct_partitions
from app.domain.request_shape import duplicated


def test_keys_each_named_once_are_not_duplicated() -> None:
    assert duplicated([("orders", 0), ("orders", 1), ("payments", 0)]) == []


def test_a_key_named_twice_is_duplicated_once() -> None:
    assert duplicated([("orders", 0), ("orders", 1), ("orders", 0)]) == [("orders", 0)]


def test_a_key_named_three_times_is_answered_once() -> None:
    assert duplicated([("orders", 0)] * 3) == [("orders", 0)]


def test_duplicated_keys_come_in_the_order_they_were_named_again() -> None:
    assert duplicated(["a", "b", "c", "b", "a", "b"]) == ["b", "a"]


def test_any_hashable_key_is_taken() -> None:
    assert duplicated(["orders", "payments", "orders"]) == ["orders"]
    assert duplicated([3, 1, 3]) == [3]


def test_nothing_named_is_nothing_duplicated() -> None:
    assert duplicated([]) == []


def test_the_http_door_refuses_the_first_partition_named_again() -> None:
    offsets = [OffsetToStage("orders", p, o, None, NO_LEADER_EPOCH, ReadOrder.COMMIT) for p, o in ((0, 5), (1, 5), (1, 6), (0, 6))]
    with pytest.raises(InvalidRequest) as refused:
        check_distinct_partitions(offsets)
    assert (refused.value.error_code, refused.value.message) == ("INVALID_REQUEST",
                                                                 "two offsets for orders/1 in one request")


def test_the_http_door_takes_each_partition_named_once() -> None:
    check_distinct_partitions([OffsetToStage("orders", 0, 5, None, NO_LEADER_EPOCH, ReadOrder.COMMIT),
                               OffsetToStage("orders", 1, 5, None, NO_LEADER_EPOCH, ReadOrder.COMMIT)])
