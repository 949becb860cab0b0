"""The log cleaner's rules without a database (app.domain.log_cleaning)."""

from __future__ import annotations

import dataclasses

import pytest

from hypothesis import given
from hypothesis import strategies as st

from app.domain.log_cleaning import (
    ChunkSummary,
    Compaction,
    CompactionRow,
    RetentionLimits,
    StoredRow,
    expired_until,
    expires_whole,
    keeps_first,
    may_expire_whole,
    retention_bound,
    throttle_pause_s,
)
from app.domain.types import ControlType, RecordState

C, A = ControlType.COMMIT, ControlType.ABORT
OLD, NEW = 100, 1_000  # timestamps: records before 500 have expired
EXPIRED = RetentionLimits(expire_before_ms=500, bytes_over=0)


def rec(offset: int, ts: int = OLD, txn: int | None = None, size: int = 10, at: int | None = None) -> StoredRow:
    """A record; `at`: its transaction committed with its marker at that offset."""
    return StoredRow(offset, ts, txn, None, size, at)


def marker(offset: int, txn: int, kind: ControlType = C) -> StoredRow:
    return StoredRow(offset, NEW, txn, kind, 0)


# --- retention ------------------------------------------------------------------------------


def test_retention_stops_at_the_first_record_not_expired() -> None:
    rows = [rec(0), rec(1), rec(2, NEW), rec(3)]
    assert retention_bound(rows, log_start=0, end=4, limits=EXPIRED) == 2


def test_retention_takes_everything_read_when_all_expired() -> None:
    assert retention_bound([rec(0), rec(1)], log_start=0, end=7, limits=EXPIRED) == 7


def test_retention_by_size_deletes_the_oldest_until_enough_bytes_go() -> None:
    rows = [rec(o, NEW, size=10) for o in range(5)]
    limits = RetentionLimits(expire_before_ms=None, bytes_over=25)
    assert retention_bound(rows, log_start=0, end=5, limits=limits) == 3


def test_time_or_size_either_deletes() -> None:
    rows = [rec(0, OLD), rec(1, NEW), rec(2, NEW)]
    limits = RetentionLimits(expire_before_ms=500, bytes_over=15)
    assert retention_bound(rows, log_start=0, end=3, limits=limits) == 2


def test_no_limits_delete_only_below_the_log_start() -> None:
    assert retention_bound([rec(0), rec(1), rec(2)], log_start=2, end=3, limits=None) == 2


def test_retention_never_goes_below_the_log_start() -> None:
    assert retention_bound([rec(5, NEW)], log_start=5, end=6, limits=EXPIRED) == 5


def test_a_committed_transaction_goes_with_its_marker() -> None:
    rows = [rec(0, txn=7, at=2), rec(1, txn=7, at=2), marker(2, 7), rec(3, NEW)]
    assert retention_bound(rows, log_start=0, end=4, limits=EXPIRED) == 3


def test_a_transaction_whose_marker_is_not_below_the_bound_is_not_split() -> None:
    # txn 7's records are old, but its marker lies past the first record that stays.
    rows = [rec(0), rec(1, txn=7, at=4), rec(2), rec(3, NEW), marker(4, 7)]
    assert retention_bound(rows, log_start=0, end=5, limits=EXPIRED) == 1


def test_a_transaction_whose_marker_is_not_read_yet_holds_the_bound_at_its_first_record() -> None:
    rows = [rec(0), rec(1, txn=7, at=9), rec(2), rec(3)]  # its batch row says where it committed
    assert retention_bound(rows, log_start=0, end=4, limits=EXPIRED) == 1


def test_lowering_the_bound_for_one_transaction_can_hold_another() -> None:
    # txn 8 ends (marker 5) below the first bound (6), but txn 7 (marker 9) holds the bound at
    # 3, past which txn 8's marker then lies: the bound drops to txn 8's first record, 1.
    rows = [rec(0), rec(1, txn=8, at=5), rec(2), rec(3, txn=7, at=9), rec(4, txn=8, at=5), marker(5, 8),
            rec(6, NEW), rec(7), rec(8), marker(9, 7)]
    assert retention_bound(rows, log_start=0, end=10, limits=EXPIRED) == 1


def test_an_aborted_transaction_may_be_cut() -> None:
    # No read_committed reader is shown its records: the bound is a clean cut
    # (app.domain.log_start), which only a committed transaction can make lower.
    rows = [rec(0, txn=7), rec(1, NEW), marker(2, 7, A)]
    assert retention_bound(rows, log_start=0, end=3, limits=EXPIRED) == 1


def test_expired_until_is_the_first_record_kept_by_the_limits_alone() -> None:
    rows = [rec(0, txn=7, at=3), rec(1), rec(2, NEW), marker(3, 7)]
    assert expired_until(rows, log_start=0, end=4, limits=EXPIRED) == 2
    assert retention_bound(rows, log_start=0, end=4, limits=EXPIRED) == 0  # txn 7 holds it lower


def test_expired_until_is_the_end_when_every_record_read_may_go() -> None:
    rows = [rec(0), rec(1, txn=7, at=5)]  # txn 7's marker lies past the rows read
    assert expired_until(rows, log_start=0, end=2, limits=EXPIRED) == 2
    assert retention_bound(rows, log_start=0, end=2, limits=EXPIRED) == 1


# --- a chunk that goes whole, seen from its summary ---------------------------------------------


def summed(rows: list[StoredRow]) -> ChunkSummary:
    """What app.storage.cleaning.chunk_summary answers for these rows."""
    return ChunkSummary(
        rows=len(rows),
        transactional=sum(r.txn_id is not None for r in rows),
        markers=sum(r.control_type is not None for r in rows),
        newest_ms=max((r.timestamp_ms for r in rows), default=None),
        size=sum(r.size for r in rows if r.control_type is None),
    )


def test_plain_records_all_expired_go_whole() -> None:
    assert expires_whole(summed([rec(0), rec(1), rec(2)]), EXPIRED)


def test_one_record_not_expired_means_reading_the_rows() -> None:
    assert not expires_whole(summed([rec(0), rec(1, NEW), rec(2)]), EXPIRED)


def test_a_record_of_a_transaction_means_reading_the_rows() -> None:
    assert not expires_whole(summed([rec(0), rec(1, txn=7), rec(2)]), EXPIRED)


def test_a_marker_means_reading_the_rows() -> None:
    assert not expires_whole(summed([rec(0), marker(1, 7)]), EXPIRED)


def test_by_size_rows_go_whole_only_if_all_of_them_are_fewer_bytes_than_the_excess() -> None:
    rows = [rec(o, NEW, size=10) for o in range(3)]
    assert expires_whole(summed(rows), RetentionLimits(expire_before_ms=None, bytes_over=31))
    assert not expires_whole(summed(rows), RetentionLimits(expire_before_ms=None, bytes_over=30))


def test_no_rows_are_never_a_whole_chunk() -> None:
    assert not expires_whole(summed([]), EXPIRED)


_rows = st.lists(
    st.tuples(st.sampled_from([OLD, NEW]), st.sampled_from([None, None, 7, 8]), st.booleans(), st.integers(0, 20)),
    min_size=1, max_size=12,
)


def _stored(spec: list, start: int) -> list[StoredRow]:
    # Each transaction committed past the rows (where its marker among them says otherwise,
    # the marker row is only there for its size and kind).
    return [StoredRow(start + i, ts, txn, C if is_marker and txn is not None else None,
                      0 if is_marker and txn is not None else size,
                      start + len(spec) if txn is not None and not is_marker else None)
            for i, (ts, txn, is_marker, size) in enumerate(spec)]


@given(_rows, st.sampled_from([None, 500]), st.integers(0, 200), st.integers(0, 3))
def test_whatever_goes_whole_is_what_retention_bound_deletes(spec, expire_before, bytes_over, start) -> None:  # type: ignore[no-untyped-def]
    rows = _stored(spec, start)
    end = start + len(rows) + 1  # the range may end past its last row
    limits = RetentionLimits(expire_before_ms=expire_before, bytes_over=bytes_over)
    if expires_whole(summed(rows), limits):
        assert retention_bound(rows, log_start=start, end=end, limits=limits) == end


def test_a_first_record_not_expired_keeps_everything() -> None:
    assert keeps_first(rec(0, NEW), EXPIRED)
    assert not keeps_first(rec(0, OLD), EXPIRED)
    assert not keeps_first(marker(0, 7), EXPIRED)  # its transaction's records may lie further on
    assert not keeps_first(rec(0, NEW), RetentionLimits(expire_before_ms=500, bytes_over=1))


def test_a_last_row_that_cannot_go_whole_says_so_without_a_sum() -> None:
    assert may_expire_whole(rec(5), EXPIRED)
    assert not may_expire_whole(rec(5, NEW), EXPIRED)
    assert not may_expire_whole(rec(5, txn=7), EXPIRED)
    assert not may_expire_whole(marker(5, 7), EXPIRED)
    assert may_expire_whole(rec(5, NEW), RetentionLimits(expire_before_ms=None, bytes_over=1))  # the sum decides


@given(_rows, st.sampled_from([None, 500]), st.integers(0, 200), st.integers(0, 3))
def test_a_first_row_that_stays_is_where_retention_bound_stops(spec, expire_before, bytes_over, start) -> None:  # type: ignore[no-untyped-def]
    rows = _stored(spec, start)
    limits = RetentionLimits(expire_before_ms=expire_before, bytes_over=bytes_over)
    if keeps_first(rows[0], limits):
        end = start + len(rows) + 1
        assert retention_bound(rows, log_start=start, end=end, limits=limits) == start
        assert expired_until(rows, log_start=start, end=end, limits=limits) == start  # no longer read moves it


@given(_rows, st.sampled_from([None, 500]), st.integers(0, 200), st.integers(0, 3))
def test_a_last_row_that_cannot_go_whole_means_the_sum_would_say_so(spec, expire_before, bytes_over, start) -> None:  # type: ignore[no-untyped-def]
    rows = _stored(spec, start)
    limits = RetentionLimits(expire_before_ms=expire_before, bytes_over=bytes_over)
    if not may_expire_whole(rows[-1], limits):
        assert not expires_whole(summed(rows), limits)


def test_the_throttle_pauses_until_the_records_average_the_limit() -> None:
    assert throttle_pause_s(1_000, 0.25, 2_000) == 0.25  # 1,000 records take half a second at 2,000/s
    assert throttle_pause_s(1_000, 0.75, 2_000) == 0.0  # slower than the limit already


# --- compaction -----------------------------------------------------------------------------


def row(offset: int, key: str | None = None, txn: int | None = None, ts: int = NEW,
        tombstone: bool = False) -> CompactionRow:
    """A record; its outcome as a plain one's (committed), compacted() gives a transaction's."""
    return CompactionRow(offset, key, txn, None, RecordState.COMMITTED, None, ts, tombstone)


def mark(offset: int, txn: int, kind: ControlType = C) -> CompactionRow:
    return CompactionRow(offset, None, txn, kind, None, None, NEW, False)


def with_outcomes(rows: list[CompactionRow]) -> list[CompactionRow]:
    """The rows with each record's outcome and commit position as its batch row holds them:
    from its transaction's marker wherever that lies (open without one), a plain record's
    commit position its own offset (a batch of one record)."""
    outcome = {r.txn_id: (r.control_type, r.offset) for r in rows if r.control_type is not None}
    out = []
    for r in rows:
        if r.control_type is not None:
            out.append(r)
        elif r.txn_id is None:
            out.append(dataclasses.replace(r, commit_position=r.offset))
        elif r.txn_id not in outcome:
            out.append(dataclasses.replace(r, state=RecordState.OPEN))
        elif outcome[r.txn_id][0] is C:
            out.append(dataclasses.replace(r, commit_position=outcome[r.txn_id][1]))
        else:
            out.append(dataclasses.replace(r, state=RecordState.ABORTED))
    return out


def compacted(rows: list[CompactionRow], point: int, *, tombstones_before: int = 0,
              dirty_from: int = 0) -> tuple[list[int], list[int]]:
    """Feed a Compaction the committed records of the dirty section as read_committed gives
    them, scan the rows top down with their outcomes (with_outcomes): (deleted offsets, empty
    markers)."""
    rows = with_outcomes(rows)
    committed = []
    for r in rows:
        if r.control_type is None and r.state is RecordState.COMMITTED:
            committed.append((r.offset if r.txn_id is None else r.commit_position, r.offset, r.key))
    compaction = Compaction(tombstones_before_ms=tombstones_before)
    for position, offset, key in sorted(committed):
        if dirty_from <= position < point:
            compaction.supersede(key, position, offset)
    compaction.close_dirty_section(point)
    plan = compaction.scan(sorted((r for r in rows if r.offset < point), key=lambda r: -r.offset))
    return sorted(plan.delete + compaction.tombstones_expired()), compaction.markers_left_empty()


def compacted_again(rows: list[CompactionRow], deleted: list[int], new: list[CompactionRow], point: int, *,
                    tombstones_before: int, dirty_from: int) -> list[int]:
    """A later pass: the rows a first one left, `new` ones appended, compacted below `point`
    with the dirty section from `dirty_from` (the first pass's cleaning point)."""
    left = [r for r in rows if r.offset not in deleted] + new
    return compacted(left, point, tombstones_before=tombstones_before, dirty_from=dirty_from)[0]


def test_compaction_keeps_each_keys_latest_record() -> None:
    rows = [row(0, "a"), row(1, "b"), row(2, "a"), row(3, "c"), row(4, "b")]
    assert compacted(rows, 5)[0] == [0, 1]


def test_where_commit_order_and_offset_order_differ_the_latest_of_each_stays() -> None:
    # txn 7 wrote a=… at offset 0 and committed at 2, after the plain a=… at offset 1: the
    # HTTP door's last a is txn 7's (commit order), a Kafka consumer's the plain one (offsets).
    rows = [row(0, "a", txn=7), row(1, "a"), mark(2, 7)]
    assert compacted(rows, 3) == ([], [])


def test_a_record_goes_once_a_record_of_its_key_kept_comes_after_it_in_both_orders() -> None:
    # a@0 comes before txn 7's a@1 (committed at 3) and the plain a@2 in both orders; each of
    # those is the latest of one order.
    rows = [row(0, "a"), row(1, "a", txn=7), row(2, "a"), mark(3, 7)]
    assert compacted(rows, 4)[0] == [0]


def test_a_record_latest_in_neither_order_goes_though_none_comes_after_it_in_both() -> None:
    # Transactions 1, 2, 3 write a at 0, 1, 2 and commit in the other order (3, 4, 5): 2's a@1
    # comes after 1's in offset order and after 3's in commit order, but is neither's latest.
    rows = [row(0, "a", txn=1), row(1, "a", txn=2), row(2, "a", txn=3), mark(3, 3), mark(4, 2), mark(5, 1)]
    assert compacted(rows, 6) == ([1], [4])


def test_an_old_tombstone_latest_in_commit_order_stays_with_the_value_latest_in_offset_order() -> None:
    # txn 7's tombstone of a (offset 0) commits at 2, after the plain a=… at 1: over HTTP a is
    # deleted, a Kafka consumer ends with the plain value. Neither may go: without the plain
    # record the consumer would find a deleted, without the tombstone HTTP readers a alive.
    rows = [row(0, "a", txn=7, ts=OLD, tombstone=True), row(1, "a"), mark(2, 7)]
    assert compacted(rows, 3, tombstones_before=500) == ([], [])


def test_an_old_tombstone_latest_in_offset_order_stays_with_the_value_latest_in_commit_order() -> None:
    # txn 7's a=… (offset 0) commits at 2, after the plain tombstone of a at 1: a Kafka consumer
    # finds a deleted, an HTTP reader ends with txn 7's value.
    rows = [row(0, "a", txn=7), row(1, "a", ts=OLD, tombstone=True), mark(2, 7)]
    assert compacted(rows, 3, tombstones_before=500) == ([], [])


def test_old_tombstones_latest_in_either_order_go_together_and_their_marker_with_them() -> None:
    rows = [row(0, "a", txn=7, ts=OLD, tombstone=True), row(1, "a", ts=OLD, tombstone=True), mark(2, 7)]
    assert compacted(rows, 3, tombstones_before=500) == ([0, 1], [2])


def test_an_old_tombstone_stays_while_the_other_orders_latest_is_a_recent_one() -> None:
    rows = [row(0, "a", txn=7, ts=OLD, tombstone=True), row(1, "a", ts=NEW, tombstone=True), mark(2, 7)]
    assert compacted(rows, 3, tombstones_before=500) == ([], [])


def test_an_old_tombstone_stays_over_a_record_of_its_key_committed_past_the_cleaning_point() -> None:
    # txn 7's a@0 commits at 3, past the cleaning point 2: a Kafka consumer finds a deleted by
    # the plain tombstone at 1, and would find txn 7's value without it.
    rows = [row(0, "a", txn=7), row(1, "a", ts=OLD, tombstone=True), mark(3, 7)]
    assert compacted(rows, 2, tombstones_before=500) == ([], [])


def test_an_old_tombstone_goes_once_the_scan_is_over_not_with_its_chunk() -> None:
    compaction = Compaction(tombstones_before_ms=500)
    compaction.supersede("a", 1, 1)
    compaction.close_dirty_section(2)
    assert compaction.scan([row(1, "a", ts=OLD, tombstone=True)]).delete == []  # what lies below decides
    assert compaction.scan([row(0, "b")]).delete == []
    assert compaction.tombstones_expired() == [1]


def test_a_later_pass_keeps_an_old_tombstone_over_a_value_an_earlier_pass_kept_beside_it() -> None:
    # Pass 1 (point 3) keeps both: txn 7's tombstone (HTTP's latest a, recent then) and the
    # plain a@1 (a Kafka consumer's). Pass 2 (point 5) has only b in its map; the tombstone,
    # old now, must still stay, or HTTP readers would find a alive again with the value at 1.
    rows = [row(0, "a", txn=7, ts=NEW, tombstone=True), row(1, "a"), mark(2, 7)]
    deleted, _ = compacted(rows, 3, tombstones_before=0)
    assert deleted == []
    assert compacted_again(rows, deleted, [row(3, "b"), row(4, "b")], 5,
                           tombstones_before=2_000, dirty_from=3) == [3]


def test_a_later_pass_keeps_an_old_tombstone_over_a_value_below_it_in_offset_order() -> None:
    # The other way round: the plain tombstone at 1 is a Kafka consumer's latest a, txn 7's
    # a@0 (committed at 2) an HTTP reader's; pass 2 meets the tombstone before the value.
    rows = [row(0, "a", txn=7), row(1, "a", ts=NEW, tombstone=True), mark(2, 7)]
    deleted, _ = compacted(rows, 3, tombstones_before=0)
    assert deleted == []
    assert compacted_again(rows, deleted, [row(3, "b"), row(4, "b")], 5,
                           tombstones_before=2_000, dirty_from=3) == [3]


def test_records_past_the_cleaning_point_are_neither_touched_nor_superseding() -> None:
    rows = [row(0, "a"), row(1, "a")]
    assert compacted(rows, 1)[0] == []


def test_a_transaction_decided_past_the_cleaning_point_keeps_its_records() -> None:
    rows = [row(0, "a", txn=7), row(1, "b", txn=7), row(2, "a"), row(3, "b"), mark(4, 7)]
    # Cleaning point 4: txn 7's marker is not below it, so its records stay, and do not
    # supersede anything either.
    assert compacted(rows, 4)[0] == []


def test_a_transaction_aborted_past_the_cleaning_point_loses_its_records_but_not_its_marker() -> None:
    # Cleaning point 3: txn 7's records are aborted (their batch row says so), so they go,
    # though its marker at 3 is not scanned; it goes in a later pass that meets it.
    rows = [row(0, "a", txn=7), row(1, "b", txn=7), row(2, "c"), mark(3, 7, A)]
    assert compacted(rows, 3) == ([0, 1], [])


def test_aborted_records_go_and_so_does_their_empty_marker() -> None:
    rows = [row(0, "a", txn=7), row(1, "b", txn=7), mark(2, 7, A), row(3, "c")]
    deleted, empty = compacted(rows, 4)
    assert deleted == [0, 1]
    assert empty == [2]


def test_a_committed_marker_goes_once_every_record_of_it_is_compacted_away() -> None:
    rows = [row(0, "a", txn=7), mark(1, 7), row(2, "a")]
    deleted, empty = compacted(rows, 3)
    assert (deleted, empty) == ([0], [1])


def test_a_marker_with_a_record_left_stays() -> None:
    rows = [row(0, "a", txn=7), row(1, "b", txn=7), mark(2, 7), row(3, "a")]
    deleted, empty = compacted(rows, 4)
    assert (deleted, empty) == ([0], [])


def test_a_transactions_superseded_records_go_and_the_rest_of_its_batch_stays() -> None:
    # One batch of txn 7 at offsets 0..3, committed at 4; a and b are superseded after it.
    # What stays of the batch is read through its batch row, holes and all: nothing to rewrite.
    rows = [row(0, "a", txn=7), row(1, "b", txn=7), row(2, "c", txn=7), row(3, "d", txn=7),
            mark(4, 7), row(5, "a"), row(6, "b")]
    assert compacted(rows, 7) == ([0, 1], [])


def test_keyless_records_stay() -> None:
    assert compacted([row(0), row(1), row(2, "a"), row(3, "a")], 4)[0] == [2]


def test_an_old_tombstone_goes_a_recent_one_stays() -> None:
    rows = [row(0, "a"), row(1, "a", ts=100, tombstone=True), row(2, "b"), row(3, "b", ts=900, tombstone=True)]
    assert compacted(rows, 4, tombstones_before=500)[0] == [0, 1, 2]


def test_the_clean_section_is_superseded_only_by_the_dirty_one() -> None:
    # Below the checkpoint (3) each key is already once; a and c are written again above it.
    rows = [row(0, "a"), row(1, "b"), row(2, "c"), row(3, "a"), row(4, "d"), row(5, "c")]
    assert compacted(rows, 6, dirty_from=3)[0] == [0, 2]


@pytest.mark.parametrize("point", [0, 1, 5])
def test_every_record_fed_lies_below_the_cleaning_point(point: int) -> None:
    compaction = Compaction(tombstones_before_ms=0)
    compaction.supersede("a", 5, 5)
    if point <= 5:
        with pytest.raises(AssertionError):
            compaction.close_dirty_section(point)


def test_a_key_first_met_once_the_pass_remembers_max_keys_met_keeps_every_record() -> None:
    # a is remembered (the first key met, descending): its superseded record goes, its old
    # tombstone too; b is not: its superseded record and its old tombstone stay.
    compaction = Compaction(tombstones_before_ms=500, max_keys_met=1)
    compaction.supersede("a", 3, 3)
    compaction.supersede("b", 2, 2)
    compaction.close_dirty_section(4)
    deleted = compaction.scan([row(3, "a", ts=OLD, tombstone=True), row(2, "b", ts=OLD, tombstone=True),
                               row(1, "a"), row(0, "b")]).delete
    assert (deleted, compaction.tombstones_expired()) == ([1], [3])
