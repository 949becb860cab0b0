"""app.domain.offsets.plan_reset: where a reset puts a group in one partition, the rule both
doors and the CLI use. A partition whose log is [10, 20), the group at 15."""

from __future__ import annotations

import pytest

from app.domain.errors import InvalidRequest
from app.domain.offsets import OffsetResetSpec, PlannedReset, ReadOrder, ResetScope, ResetTo, plan_reset


def _plan(spec: OffsetResetSpec, at_timestamp: int | None = None) -> int:
    planned = plan_reset(spec, "orders", 3, committed_offset=15, committed_read_order=ReadOrder.COMMIT,
                         door_order=ReadOrder.COMMIT, log_start_offset=10, log_end_offset=20,
                         offset_for_timestamp=at_timestamp)
    assert (planned.topic, planned.partition, planned.committed_offset) == ("orders", 3, 15)
    return planned.new_offset


@pytest.mark.parametrize(("spec", "at_timestamp", "new"), [
    (OffsetResetSpec(ResetTo.EARLIEST), None, 10),
    (OffsetResetSpec(ResetTo.LATEST), None, 20),
    (OffsetResetSpec(ResetTo.OFFSET, offset=12), None, 12),
    (OffsetResetSpec(ResetTo.OFFSET, offset=3), None, 10),
    (OffsetResetSpec(ResetTo.OFFSET, offset=99), None, 20),
    (OffsetResetSpec(ResetTo.TIMESTAMP, timestamp_ms=5), 17, 17),
    (OffsetResetSpec(ResetTo.TIMESTAMP, timestamp_ms=5), None, 20),
    (OffsetResetSpec(ResetTo.CURRENT), None, 15),
    (OffsetResetSpec(ResetTo.SHIFT, shift_by=3), None, 18),
    (OffsetResetSpec(ResetTo.SHIFT, shift_by=-2), None, 13),
    (OffsetResetSpec(ResetTo.SHIFT, shift_by=-9), None, 10),
    (OffsetResetSpec(ResetTo.SHIFT, shift_by=9), None, 20),
], ids=["earliest: log start", "latest: log end", "offset", "offset below the log: log start",
        "offset past the log: log end", "timestamp: its record", "timestamp after every record: log end",
        "current: the committed offset", "shift forward", "shift back", "shift below the log: log start",
        "shift past the log: log end"])
def test_each_kind_of_reset_plans_its_offset(spec: OffsetResetSpec, at_timestamp: int | None, new: int) -> None:
    assert _plan(spec, at_timestamp) == new


def test_the_plan_names_the_committed_offset_it_replaces_or_none() -> None:
    assert plan_reset(OffsetResetSpec(ResetTo.LATEST), "orders", 0, committed_offset=None, committed_read_order=None,
                      door_order=ReadOrder.COMMIT, log_start_offset=0,
                      log_end_offset=4, offset_for_timestamp=None) == PlannedReset("orders", 0, None, 4, None, ReadOrder.COMMIT)


@pytest.mark.parametrize("fields", [
    {"to": ResetTo.OFFSET}, {"to": ResetTo.TIMESTAMP}, {"to": ResetTo.EARLIEST, "offset": 1},
    {"to": ResetTo.LATEST, "timestamp_ms": 1}, {"to": ResetTo.OFFSET, "offset": 1, "timestamp_ms": 1},
    {"to": ResetTo.SHIFT}, {"to": ResetTo.OFFSET, "offset": 1, "shift_by": 1}, {"to": ResetTo.CURRENT, "shift_by": 0},
], ids=["offset without one", "timestamp without one", "offset with earliest", "timestamp with latest", "both",
        "shift without shift_by", "shift_by with offset", "shift_by with current"])
def test_a_spec_carries_exactly_the_value_its_kind_needs(fields: dict) -> None:
    with pytest.raises(InvalidRequest):
        OffsetResetSpec(**fields)


def test_current_without_a_committed_offset_plans_the_log_end() -> None:
    assert plan_reset(OffsetResetSpec(ResetTo.CURRENT), "orders", 0, committed_offset=None, committed_read_order=None,
                      door_order=ReadOrder.COMMIT, log_start_offset=2,
                      log_end_offset=4, offset_for_timestamp=None) == PlannedReset("orders", 0, None, 4, None, ReadOrder.COMMIT)


def test_a_shift_without_a_committed_offset_is_refused_naming_the_partition() -> None:
    with pytest.raises(InvalidRequest) as refused:
        plan_reset(OffsetResetSpec(ResetTo.SHIFT, shift_by=1), "orders", 2, committed_offset=None, committed_read_order=None,
                      door_order=ReadOrder.COMMIT, log_start_offset=0,
                   log_end_offset=4, offset_for_timestamp=None)
    assert refused.value.details == {"partitions": [{"topic": "orders", "partition": 2}]}


@pytest.mark.parametrize("fields", [
    {}, {"topic": "orders", "all_topics": True}, {"all_topics": True, "partitions": (0,)},
    {"topic": "orders", "partitions": (1, 1)},
], ids=["neither a topic nor all topics", "both", "partitions with all topics", "a partition twice"])
def test_a_scope_names_one_topic_or_all_of_them(fields: dict) -> None:
    with pytest.raises(InvalidRequest):
        ResetScope(**fields)


@pytest.mark.parametrize(("named", "committed", "door", "order"), [
    (ReadOrder.OFFSET, ReadOrder.COMMIT, ReadOrder.COMMIT, ReadOrder.OFFSET),
    (None, ReadOrder.OFFSET, ReadOrder.COMMIT, ReadOrder.OFFSET),
    (None, None, ReadOrder.OFFSET, ReadOrder.OFFSET),
    (None, None, ReadOrder.COMMIT, ReadOrder.COMMIT),
], ids=["the order named", "the replaced offset's", "the group's door's (Kafka)", "the group's door's (HTTP)"])
def test_the_new_offsets_read_order_is_the_one_named_else_the_replaced_offsets_else_the_doors(
        named: ReadOrder | None, committed: ReadOrder | None, door: ReadOrder, order: ReadOrder) -> None:
    planned = plan_reset(OffsetResetSpec(ResetTo.EARLIEST, read_order=named), "orders", 0,
                         committed_offset=None if committed is None else 5, committed_read_order=committed,
                         door_order=door, log_start_offset=0, log_end_offset=9, offset_for_timestamp=None)
    assert (planned.committed_read_order, planned.read_order) == (committed, order)
