"""What the log cleaner may delete: pure rules, no I/O (app.services.log_cleaner runs them).

Sizes. A partition's size, which `retention_bytes` limits, is the UTF-8 bytes of its data
records' keys, values and headers as stored (`record_size`); control markers have none.

Nothing at or past a partition's last stable offset is ever touched (the transactional
high watermark): the cleaner reads only below it, and every rule here takes its input from
there. Records are never rewritten and offsets never change: a deleted record leaves a hole.

Retention (`retention_bound`) deletes a prefix of the log: everything below the log start
(garbage a DeleteRecords left), then the oldest records while they are older than
`retention_ms` or the partition holds more than `retention_bytes`. Its bound is a clean cut
(app.domain.log_start, the rule DeleteRecords follows too): if a committed transaction's
records start below the bound and its marker is not below it, the bound stops at the
transaction's first record, so a reader in commit order starting at the new log start misses
no committed transaction, and a COMMIT marker goes only with all of its records. An aborted
transaction may be cut (no read_committed reader is shown its records); its ABORT marker stays
with the records left.

Compaction (`Compaction`) keeps, below a cleaning point that never passes the last stable
offset, each key's latest committed record in each of the two orders the doors read it: commit
order, the HTTP door's read_committed (a committed transaction's records at its COMMIT
marker's offset), and offset order, the Kafka door's read_committed consumer's (records in
offset order up to the last stable offset, aborted ones dropped). The two differ where a
transaction commits after a record of its key written later in the log: then both records
stay, and a reader of either door ends with the value it ended with before. Every other
committed record of a key goes: in each order a record of the key kept comes after it.
Records of aborted transactions go, and a marker goes once none of its records are left.
Records of transactions committed at or past the cleaning point, and records without a key,
stay, and supersede nothing. A tombstone (a kept record whose value is null) goes once older
than `delete_retention_ms`, but only with every other record of its key left below the
cleaning point: a key whose records there are all such tombstones loses them together; one
that keeps anything else (a value, a younger tombstone, a record of a transaction committed
past the point) keeps its tombstones too, or the value left would come back to life for the
readers of the order whose last record the tombstone was. As in Kafka, the cleaning point
advances by "dirty" sections: the records whose commit position lies between the last
cleaning point (the checkpoint) and the new one supersede older records anywhere below; the
clean part below the checkpoint already holds each key's latest in each order only, at most
two records of it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from operator import add

from app.domain.log_start import Across, clean_cut_at_or_below
from app.domain.types import ControlType, RecordState


def record_sizes(keys: Iterable[str | bytes | None], values: Iterable[str | bytes | None],
                 headers: Iterable[str | bytes | None], *, value_bytes: list[int] | None = None) -> list[int]:
    """The bytes each record counts for (max_message_bytes, retention_bytes, a Fetch's byte
    limits): its key, value and headers as stored, text (a JSON topic's key and value, every
    topic's headers) in UTF-8, bytes as they are, null none. The one definition, column by
    column: record_size applies it to one record, a Send's batch (app.domain.records.batch_of)
    and the Kafka door (kafka_batch) to a whole batch in one pass, with no Python call per
    record (they run for every batch appended). A field that is none of these (a typed key
    object) is a TypeError; columns of different lengths are a ValueError. Faults in several
    columns raise the first column's (keys, values, headers), not the first record's: through
    batch_of, the Kafka door and record_rows only the key column can be at fault (their values
    and headers come checked), so there which comes first makes no difference. `value_bytes`:
    the values' bytes, where the caller has counted them already (batch_of, for its own checks)."""
    columns = [c if isinstance(c, list) else list(c) for c in (keys, values, headers)]
    if not len(columns[0]) == len(columns[1]) == len(columns[2]):
        raise ValueError("a batch's key, value and header columns must be of one length")
    if not columns[0]:
        return []
    sizes: list[int] | None = None
    for i, column in enumerate(columns):
        if column[0] is None and column.count(None) == len(column):
            continue  # no field of this column (a Send's headers, usually): nothing to add
        lengths = value_bytes if i == 1 and value_bytes is not None else _field_bytes(column)
        sizes = lengths if sizes is None else list(map(add, sizes, lengths))
    return [0] * len(columns[0]) if sizes is None else sizes


def _field_bytes(column: list[str | bytes | None]) -> list[int]:
    """The bytes of each field of one column (record_sizes). A column of texts all ASCII, or
    of bytes alone, is its lengths, looked through by C loops (an ASCII text's bytes are its
    characters; the flag is one Python keeps on every str): the rule field by field, a Python
    loop, cost a 1,000-record Send some 140 µs (docs/benchmarks.md, 2026-12-02). Not by
    joining the texts, which would make a string of the whole column, 4 bytes a character if
    one is outside the Basic Multilingual Plane. Any other column (nulls among its fields,
    texts beyond ASCII, a mix) takes the rule field by field, which is the definition."""
    try:
        lengths = list(map(len, column))  # a null, or a typed key, has no length
        if type(column[0]) is str:
            if all(map(str.isascii, column)):  # TypeError if a field is not a str
                return lengths
        elif str not in map(type, column):
            return lengths
    except TypeError:
        pass
    return [0 if f is None else (len(f) if f.isascii() else len(f.encode())) if type(f) is str else len(f)
            for f in column]


def record_size(key: str | bytes | None, value: str | bytes | None, headers: str | None) -> int:
    """The bytes one record counts for (record_sizes)."""
    return record_sizes((key,), (value,), (headers,))[0]


# --- retention ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StoredRow:
    """What the cleaner reads of a stored record or control marker (never its value), with
    the transaction of the batch row that holds it."""

    offset: int
    timestamp_ms: int
    txn_id: int | None  # its batch row's: a record's transaction, or the one a marker ends
    control_type: ControlType | None
    size: int  # record_size; 0 for a marker
    # A committed transaction's record: its COMMIT marker's offset (its batch row's commit
    # position), wherever the marker lies. None for any other row (a plain record, a marker, a
    # record of an aborted transaction). Read by retention_bound only.
    committed_at: int | None = None


@dataclass(frozen=True, slots=True)
class RetentionLimits:
    expire_before_ms: int | None  # records older than this go (now - retention_ms); None: no time limit
    bytes_over: int  # bytes to delete to bring the partition down to retention_bytes; 0: none


def retention_bound(
    rows: Sequence[StoredRow], *, log_start: int, end: int, limits: RetentionLimits | None
) -> int:
    """The offset below which to delete, given the rows stored in [first stored offset, end)
    in offset order, `end` at most the last stable offset. Never below `log_start` (rows
    below it go whatever the limits); `limits` None: only those."""
    bound = expired_until(rows, log_start=log_start, end=end, limits=limits)
    if bound <= log_start:
        return log_start
    return _unsplit(rows, log_start, bound)


def expired_until(
    rows: Sequence[StoredRow], *, log_start: int, end: int, limits: RetentionLimits | None
) -> int:
    """The first record retention keeps by its limits alone, before any transaction holds the
    bound lower (`end` if every record read may go). `retention_bound` never passes it, and
    reading past `end` cannot move it unless it is `end`: the first record kept is among those
    read, and a transaction whose marker lies past `end` lies past it too."""
    bound = end
    freed = 0
    for row in rows:
        if row.offset < log_start:
            freed += row.size
            continue
        if row.control_type is not None:
            continue  # a marker goes with its records: the bound stops at a record
        expired = limits is not None and (
            (limits.expire_before_ms is not None and row.timestamp_ms < limits.expire_before_ms)
            or freed < limits.bytes_over
        )
        if not expired:
            bound = row.offset
            break
        freed += row.size
    return bound


@dataclass(frozen=True, slots=True)
class ChunkSummary:
    """What one aggregate over the stored rows of a range says of them, without reading each."""

    rows: int  # records and markers
    # Batch rows with a txn_id (transactions' batches, and markers) meeting the range: 0 means
    # no row of it is a transaction's. A batch whose records there compaction deleted still
    # counts: a range then read row by row that could have gone whole, never the reverse.
    transactional: int
    markers: int
    newest_ms: int | None  # the highest timestamp_ms; None: no rows
    size: int  # record_size of the data records, summed

    @property
    def records(self) -> int:
        return self.rows - self.markers


def keeps_first(row: StoredRow, limits: RetentionLimits) -> bool:
    """Whether retention keeps `row`, the first row stored at or past the log start, and so
    everything after it: a record (a marker goes with its records, which may lie further
    on) that has not expired, with no bytes to free. Then `retention_bound` over rows
    starting with it answers its offset, and no more need be read."""
    return (row.control_type is None and limits.bytes_over <= 0
            and (limits.expire_before_ms is None or row.timestamp_ms >= limits.expire_before_ms))


def may_expire_whole(last: StoredRow, limits: RetentionLimits) -> bool:
    """False where `expires_whole` is false for any range whose last stored row is `last`,
    without summing it: a marker or a record of a transaction, or a record that has not
    expired when no bytes are to be freed (its timestamp bounds the newest from below)."""
    if last.control_type is not None or last.txn_id is not None:
        return False
    return limits.bytes_over > 0 or (limits.expire_before_ms is not None
                                     and last.timestamp_ms < limits.expire_before_ms)


def expires_whole(summary: ChunkSummary, limits: RetentionLimits) -> bool:
    """Whether retention deletes every row of a range so summed, all at or past the log start:
    whether `retention_bound` over them would answer the range's end. So when they are records
    of no transaction (nothing to split, no marker) and every one has expired: the newest is
    older than expire_before_ms, or all of them together are fewer bytes than bytes_over (so
    fewer went before each). False only means: read the rows (`retention_bound`)."""
    if not summary.rows or summary.transactional or summary.markers:
        return False
    if (limits.expire_before_ms is not None and summary.newest_ms is not None
            and summary.newest_ms < limits.expire_before_ms):
        return True
    return summary.size < limits.bytes_over


def throttle_pause_s(records: int, elapsed_s: float, max_records_per_s: float) -> float:
    """How long the cleaner pauses so that the `records` it deleted in `elapsed_s` average at
    most `max_records_per_s`: Kafka's log cleaner throttle (log.cleaner.io.max.bytes.per.second,
    kafka.utils.Throttler), counted in records, since here a row costs about the same to
    delete whatever its size."""
    return max(0.0, records / max_records_per_s - elapsed_s)


def _unsplit(rows: Sequence[StoredRow], log_start: int, bound: int) -> int:
    """Lower `bound` to the highest clean cut at or below it (app.domain.log_start), what lies
    across an offset read from `rows`: each committed transaction's first record among them
    (at or past the log start) and its marker's offset."""
    first: dict[int, int] = {}
    marker: dict[int, int] = {}
    for row in rows:
        if row.offset < log_start or row.committed_at is None or row.txn_id is None:
            continue
        first.setdefault(row.txn_id, row.offset)
        marker[row.txn_id] = row.committed_at

    def across(offset: int) -> Across | None:
        cut = [(start, marker[txn]) for txn, start in first.items() if start < offset <= marker[txn]]
        if not cut:
            return None
        return Across(min(start for start, _ in cut), min(m for _, m in cut), max(m for _, m in cut))

    return max(clean_cut_at_or_below(bound, across), log_start)


# --- compaction -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CompactionRow:
    """A stored record or marker as the compaction scan reads it (never the value itself),
    with what its batch row says of it: its transaction, and a record's outcome."""

    offset: int
    key: str | bytes | None  # as stored: a bytes topic's keys are bytes, compared as bytes
    txn_id: int | None  # a record's transaction, or the one a marker ends
    control_type: ControlType | None  # a marker's
    state: RecordState | None  # a record's outcome; None for a marker
    commit_position: int | None  # its batch's: set exactly when state is committed
    timestamp_ms: int
    tombstone: bool  # value null


@dataclass(slots=True)
class ChunkPlan:
    """What one database transaction of the scan deletes and rewrites."""

    delete: list[int] = field(default_factory=list)  # offsets


# What the scan has met of a key (Compaction._met), as bit flags.
_MET_COMMITTED = 1  # a committed record judged here: the key's latest in offset order is behind
_HOLDS = 2  # a record of it stays that does not expire in this pass


class Compaction:
    """One compaction pass over a partition.

    1. `supersede` is fed the committed records whose commit positions lie in the dirty
       section, from the checkpoint on, in commit order (as read_committed reads them over
       HTTP): the last one of each key is that key's latest record in commit order.
       `close_dirty_section(point)` ends it: the cleaning point, which every record fed lies
       below and which never passes the last stable offset.
    2. `scan` is fed the stored rows of [log start, cleaning point) in DESCENDING offset
       order, a chunk at a time, each record with its outcome and commit position (its batch
       row's), and answers each chunk's deletions. Descending, a transaction's marker comes
       before its records, and the first committed record of a key met is its latest in
       offset order (as a Kafka consumer reads them). A run with holes keeps its batch row
       and reads the same (the records' primary key steps over them), so nothing of a batch
       is rewritten.
    3. Once the scan has reached the log start, `tombstones_expired` names the tombstones
       that go, and `markers_left_empty` the markers met all of whose records are gone.
       A tombstone's fate waits for the end: with descending offsets the scan meets it before
       the older records of its key that it must not leave behind alive.

    The scan remembers the keys it meets (`_met`, a small int each): whether a key's latest
    record in offset order, or a record of it that stays, was met higher up is what a record
    met lower down is judged by. Unbounded, a pass would hold the keys of the whole partition
    below the cleaning point, where Kafka's cleaner holds the dirty section's only; so at most
    `max_keys_met` of them (the service passes the dirty map's bound,
    app.services.log_cleaner.MAX_COMPACTION_KEYS), the keys first met past it kept whole.
    """

    def __init__(self, *, tombstones_before_ms: int, max_keys_met: int | None = None) -> None:
        self.tombstones_before_ms = tombstones_before_ms
        # The most keys `_met` holds (None: no bound). A key first met once it is full is not
        # remembered, and judged as one whose latest record in offset order is still to come
        # and that keeps something: none of its records goes for being superseded and none of
        # its tombstones expires in this pass. Keeping is always safe; only remembering lets
        # a record go, so the bound costs space, never a record shown wrong. The scan meets the
        # same keys first in every pass (the highest offsets'), so in a partition holding more
        # keys below the cleaning point than the bound the lowest ones keep that space.
        self.max_keys_met = max_keys_met
        self.cleaning_point: int | None = None
        self._latest: dict[str | bytes, tuple[int, int]] = {}  # key -> (commit position, offset)
        self._met: dict[str | bytes, int] = {}  # key -> _MET_COMMITTED | _HOLDS, for the keys met
        # key -> (offset, txn) of each old tombstone kept as its key's latest in an order
        self._expiring: dict[str | bytes, list[tuple[int, int | None]]] = {}
        self._markers: dict[int, int] = {}  # txn -> its marker's offset, for the markers met
        self._survivors: dict[int, int] = {}  # txn -> records of it kept
        self._last_scanned: int | None = None

    @property
    def keys(self) -> int:
        return len(self._latest)

    def supersede(self, key: str | bytes | None, commit_position: int, offset: int) -> None:
        assert self.cleaning_point is None, "the dirty section is closed"
        if key is not None:
            self._latest[key] = (commit_position, offset)

    def close_dirty_section(self, cleaning_point: int) -> None:
        assert all(position < cleaning_point for position, _ in self._latest.values())
        self.cleaning_point = cleaning_point

    def scan(self, rows: Iterable[CompactionRow]) -> ChunkPlan:
        assert self.cleaning_point is not None, "close the dirty section first"
        plan = ChunkPlan()
        for row in rows:
            assert row.offset < self.cleaning_point
            assert self._last_scanned is None or row.offset < self._last_scanned, "descending offsets"
            self._last_scanned = row.offset
            if row.control_type is not None:
                if row.txn_id is not None:
                    self._markers[row.txn_id] = row.offset
                    self._survivors.setdefault(row.txn_id, 0)
                continue
            keep = self._keeps(row)
            if not keep:
                plan.delete.append(row.offset)
            if keep and row.txn_id is not None:
                self._survivors[row.txn_id] = self._survivors.get(row.txn_id, 0) + 1
        return plan

    def _keeps(self, row: CompactionRow) -> bool:
        assert self.cleaning_point is not None
        if row.state is RecordState.ABORTED:
            return False  # never shown to read_committed, wherever its marker lies
        if row.key is None:
            return True  # nothing to compact it against
        met = self._met.get(row.key)
        if met is None:
            if self.max_keys_met is not None and len(self._met) >= self.max_keys_met:
                return True  # a key not remembered (max_keys_met): kept
            met = 0
        if row.state is not RecordState.COMMITTED:
            self._met[row.key] = met | _HOLDS
            return True  # not ended (below the last stable offset, never so): not decided here
        # Where read_committed over HTTP shows it: a plain record at its own offset, a
        # transaction's at its COMMIT marker's (its batch's commit position).
        position = row.offset if row.txn_id is None else row.commit_position
        assert position is not None
        if position >= self.cleaning_point:
            # Committed past the cleaning point: neither superseded nor superseding here. Its
            # key's tombstones stay with it: it may lie under one in either order.
            self._met[row.key] = met | _HOLDS
            return True
        self._met[row.key] = met | _MET_COMMITTED
        latest = self._latest.get(row.key)
        later_in_commit_order = latest is not None and latest > (position, row.offset)
        if met & _MET_COMMITTED and later_in_commit_order:
            return False  # later in both orders, a record of its key is kept
        # The key's latest record in one order at least. A tombstone old enough goes at the
        # end, if nothing else of its key stays (tombstones_expired).
        if row.tombstone and row.timestamp_ms < self.tombstones_before_ms:
            self._expiring.setdefault(row.key, []).append((row.offset, row.txn_id))
        else:
            self._met[row.key] |= _HOLDS
        return True

    def _expired(self) -> list[tuple[int, int | None]]:
        return [tombstone for key, tombstones in self._expiring.items() if not self._met[key] & _HOLDS
                for tombstone in tombstones]

    def tombstones_expired(self) -> list[int]:
        """Offsets of the old tombstones the scan kept whose keys keep nothing else below the
        cleaning point: they go, all of a key's together. One that went alone would leave the
        record it hid in its order (the other order's latest, a value) the last of its key in
        both, the key alive again where it had been deleted: a later pass, whose map holds the
        dirty section only, once let one go so. Only valid once the scan has reached the log
        start."""
        return sorted(offset for offset, _ in self._expired())

    def markers_left_empty(self) -> list[int]:
        """Offsets of the markers met whose transactions have no record left in the partition,
        once the tombstones expired go too. Only valid once the scan has reached the log start."""
        gone: dict[int, int] = {}
        for _, txn in self._expired():
            if txn is not None:
                gone[txn] = gone.get(txn, 0) + 1
        return sorted(offset for txn, offset in self._markers.items()
                      if self._survivors.get(txn, 0) == gone.get(txn, 0))
