"""Compaction's rules (app.domain.log_cleaning.Compaction) against both doors' readers, without a
database (hypothesis).

Random logs of keyed plain records, tombstones (value null) and records of three transactions
that interleave with them and with each other, each committed or aborted, compacted by several
passes at random cleaning points up to the last stable offset and random tombstone ages. A pass
is fed as app.services.log_cleaner feeds it: the dirty section (the committed records whose
commit positions lie from the checkpoint to the cleaning point) in commit order, then the rows
below the cleaning point from the top down in chunks of a random size, then it deletes the
tombstones expired and the markers left empty; the cleaning point is the next checkpoint.

After every pass, for each door, each key's last value must be the one it had with nothing
compacted: an HTTP reader's (read_committed from the log start: committed records in commit
order, a transaction's at its COMMIT marker) and a Kafka consumer's (read_committed in offset
order below the last stable offset, aborted records dropped); a key is absent where its last
record is a tombstone, or where none is left. So no tombstone that expired brings back a value
it hid, in either door. And compaction does its work: below the cleaning point no aborted
record is left, a key keeps at most two of the records judged there (its latest in each order),
and no key keeps only tombstones older than the pass's limit there.

OUTBOX_COMPACTION_ORDER_EXAMPLES (default 1000) sets the examples.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.domain.log_cleaning import Compaction, CompactionRow
from app.domain.types import ControlType, RecordState

EXAMPLES = int(os.environ.get("OUTBOX_COMPACTION_ORDER_EXAMPLES", "1000"))
KEYS = "ab"
TIDS = [0, 1, 2]

ops = st.lists(
    st.one_of(
        st.tuples(st.just("plain"), st.sampled_from(KEYS), st.booleans()),  # True: a tombstone
        st.tuples(st.just("send"), st.sampled_from(TIDS), st.sampled_from(KEYS), st.booleans()),
        st.tuples(st.just("commit"), st.sampled_from(TIDS)),
        st.tuples(st.just("abort"), st.sampled_from(TIDS)),
        # Where the cleaning point falls from the checkpoint to the last stable offset (1: at
        # it, as the cleaner's usually does); how many steps old a tombstone must be to expire
        # (0: every one, 1,000: none); the scan's chunk size.
        st.tuples(st.just("clean"), st.one_of(st.just(1.0), st.floats(0, 1)),
                  st.one_of(st.sampled_from([0, 1_000]), st.integers(0, 10)), st.integers(1, 4)),
    ),
    max_size=40,
)


@dataclass(frozen=True)
class Stored:
    offset: int
    key: str | None
    txn: int | None  # the transaction a record is of, or a marker ends
    control: ControlType | None
    ts: int
    tombstone: bool


@dataclass
class Log:
    """The partition's rows by offset, and each transaction's outcome: its marker's type and
    offset (None while open)."""

    rows: dict[int, Stored] = field(default_factory=dict)
    ended: dict[int, tuple[ControlType, int] | None] = field(default_factory=dict)
    next_offset: int = 0

    def last_stable(self) -> int:
        firsts = [r.offset for r in self.rows.values() if r.control is None and r.txn is not None
                  and self.ended[r.txn] is None]
        return min(firsts, default=self.next_offset)

    def state(self, r: Stored) -> tuple[RecordState, int | None]:
        """A record's outcome and commit position, as its batch row holds them."""
        if r.txn is None:
            return RecordState.COMMITTED, r.offset
        end = self.ended[r.txn]
        if end is None:
            return RecordState.OPEN, None
        if end[0] is ControlType.COMMIT:
            return RecordState.COMMITTED, end[1]
        return RecordState.ABORTED, None

    def committed(self) -> list[tuple[int, Stored]]:
        """(commit position, record) of every committed record stored."""
        out = []
        for r in self.rows.values():
            if r.control is None:
                state, position = self.state(r)
                if state is RecordState.COMMITTED:
                    assert position is not None
                    out.append((position, r))
        return out

    def compaction_row(self, r: Stored) -> CompactionRow:
        if r.control is not None:
            return CompactionRow(r.offset, None, r.txn, r.control, None, None, r.ts, False)
        state, position = self.state(r)
        return CompactionRow(r.offset, r.key, r.txn, None, state, position, r.ts, r.tombstone)


def last_values(records: list[Stored]) -> dict[str, int]:
    """Each key's last value in `records` (a record's value is its offset: values that differ
    tell records apart), absent where the last is a tombstone."""
    last: dict[str, Stored] = {}
    for r in records:
        assert r.key is not None
        last[r.key] = r
    return {key: r.offset for key, r in last.items() if not r.tombstone}


def over_http(log: Log) -> dict[str, int]:
    return last_values([r for _, r in sorted(log.committed(), key=lambda c: (c[0], c[1].offset))])


def in_the_kafka_door(log: Log) -> dict[str, int]:
    below = log.last_stable()
    return last_values(sorted((r for _, r in log.committed() if r.offset < below), key=lambda r: r.offset))


def compact(log: Log, checkpoint: int, point: int, tombstones_before: int, chunk: int,
            max_keys_met: int | None = None) -> None:
    compaction = Compaction(tombstones_before_ms=tombstones_before, max_keys_met=max_keys_met)
    for position, r in sorted(log.committed(), key=lambda c: (c[0], c[1].offset)):
        if checkpoint <= position < point:
            compaction.supersede(r.key, position, r.offset)
    compaction.close_dirty_section(point)
    scanned = sorted((r for r in log.rows.values() if r.offset < point), key=lambda r: -r.offset)
    for i in range(0, len(scanned), chunk):
        for offset in compaction.scan([log.compaction_row(r) for r in scanned[i:i + chunk]]).delete:
            del log.rows[offset]
    for offset in compaction.tombstones_expired() + compaction.markers_left_empty():
        del log.rows[offset]


def assert_compacted(log: Log, point: int, tombstones_before: int) -> None:
    below = [log.compaction_row(r) for r in log.rows.values() if r.offset < point and r.control is None]
    assert not [r for r in below if r.state is RecordState.ABORTED], "an aborted record left"
    for key in KEYS:
        of_key = [r for r in below if r.key == key]
        judged = [r for r in of_key if r.state is RecordState.COMMITTED and r.commit_position < point]
        assert len(judged) <= 2, f"{key}: more than its latest in each order"
        if of_key and of_key == judged:
            assert not all(r.tombstone and r.timestamp_ms < tombstones_before for r in judged), \
                f"{key}: only old tombstones left"


@settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
@given(run=ops, max_keys_met=st.sampled_from([None, None, 0, 1, 2]))
def test_every_key_ends_with_the_same_value_in_both_doors_after_every_compaction(
        run: list[tuple], max_keys_met: int | None) -> None:
    """With the keys a pass remembers bounded (max_keys_met), the keys it cannot remember keep
    more than their latest records, and every reader still ends as before."""
    log, whole = Log(), Log()  # `whole` is never compacted
    checkpoint, txns, now = 0, {}, 0  # txns: tid -> its open transaction
    ended = [("commit", t) for t in TIDS] + [("clean", 1.0, 0, 2)]
    for op in run + ended:
        now += 1
        kind = op[0]
        if kind in ("plain", "send"):
            txn = None
            if kind == "send":
                txn = txns.setdefault(op[1], len(log.ended))
                log.ended.setdefault(txn, None)
                whole.ended.setdefault(txn, None)
            record = Stored(log.next_offset, op[-2], txn, None, now, op[-1])
        elif kind in ("commit", "abort"):
            txn = txns.pop(op[1], None)
            if txn is None:
                continue
            control = ControlType.COMMIT if kind == "commit" else ControlType.ABORT
            record = Stored(log.next_offset, None, txn, control, now, False)
            log.ended[txn] = whole.ended[txn] = (control, record.offset)
        else:
            _, where, age, chunk = op
            point = checkpoint + round(where * (log.last_stable() - checkpoint))
            if point > checkpoint:
                compact(log, checkpoint, point, now - age, chunk, max_keys_met)
                checkpoint = point
                assert over_http(log) == over_http(whole), f"HTTP, after a pass below {point}"
                assert in_the_kafka_door(log) == in_the_kafka_door(whole), f"Kafka, after a pass below {point}"
                if max_keys_met is None:
                    assert_compacted(log, point, now - age)
            continue
        log.rows[record.offset] = whole.rows[record.offset] = record
        log.next_offset = whole.next_offset = record.offset + 1
    assert over_http(log) == over_http(whole)
    assert in_the_kafka_door(log) == in_the_kafka_door(whole)
