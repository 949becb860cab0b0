"""Where a partition's log start may be placed: the one rule of DeleteRecords
(app.domain.topic_admin.new_log_start), of the deletion of consumed records
(TopicService.delete_consumed_records) and of retention (app.domain.log_cleaning.retention_bound).

A log start must be a clean cut: an offset such that no committed transaction has a record
below it (at or past the current log start) and its COMMIT marker at or past it. Read in commit
order (HTTP's read_committed Fetch, the SQL views, Spark) such a transaction's records appear at
its marker's offset (docs/GUARANTEES.md#commit-order), so a reader positioned at or past a log
start that cut it has not read it, is never told OFFSET_OUT_OF_RANGE, and would never get the
records left below the log start: the transaction would be lost to it silently. A clean cut
means the same in both read orders: below it lie exactly the committed records a reader in
offset order (the Kafka door) and one in commit order at that offset have both read.

An aborted transaction cut so loses nothing to anyone (no read_committed reader is shown it),
and a transaction still open has no records below the last stable offset, which every log start
stays at or below (new_log_start). The log start itself is always a clean cut: records below it
count for nothing. The last stable offset is not always one: a transaction that committed while
another was open (its marker past the first offset of the open one, its records below) lies
across it; as far as the log start may go is the highest clean cut at or below it.

What lies across an offset is read from the stored batches (committed_across, in
app.storage.read_committed) or, by retention, from the rows it has read (StoredRow.committed_at);
the decision is made here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Across:
    """The committed transactions an offset would cut: each with a record below the offset (at
    or past the log start) and its COMMIT marker at or past it."""

    first_record: int  # the lowest of those records
    first_marker: int  # the lowest of their markers' offsets
    last_marker: int  # the highest

    def describe(self) -> str:
        if self.first_marker == self.last_marker:
            return f"a transaction committed at {self.first_marker} whose records begin at {self.first_record}"
        return (f"transactions committed at {self.first_marker} to {self.last_marker} whose records begin at "
                f"{self.first_record}")


# What lies across an offset: None where nothing does (the offset is a clean cut).
AcrossAt = Callable[[int], "Across | None"]


def clean_cut_at_or_below(offset: int, across: AcrossAt) -> int:
    """The highest clean cut at or below `offset` (at or past the log start, which `across`
    counts records from). Lowered to the first record of what lies across it; lowering can put
    another transaction's marker at or past the new cut with its records below, so repeat until
    nothing lies across. No clean cut between the two is passed over: a transaction with a
    record below the new cut and its marker at or past the old one lies across every offset
    between them."""
    while (cut := across(offset)) is not None:
        offset = cut.first_record
    return offset


def clean_cut_at_or_above(offset: int, across: AcrossAt, *, at_most: int) -> int | None:
    """The lowest clean cut at or above `offset`, not past `at_most` (the last stable offset);
    None if there is none. Raised past the last marker of what lies across it, repeatedly: a
    clean cut above `offset` lies past each of those markers, their records being below it."""
    cut = across(offset)
    while cut is not None:
        offset = cut.last_marker + 1
        if offset > at_most:
            return None
        cut = across(offset)
    return offset
