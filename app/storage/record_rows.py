"""A batch to append (BatchToAppend) and its records as rows of `records`: the columns a data
record sets, and the writing of the rows once app.storage.append has taken their offsets and
judged their batches; on PostgreSQL a JSON topic's go in one COPY in text format, in pieces."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from itertools import chain, repeat

from sqlalchemy import Connection

from app.domain.log_cleaning import record_sizes
from app.domain.records import RecordColumns, RecordToAppend, chunk_bounds
from app.domain.types import ValueFormat
from app.storage import dialect
from app.storage.tables import record_leaf, records


@dataclass(slots=True)
class BatchToAppend:
    """One partition's records to append (app.storage.append.append_batches), and what they are
    checked against."""
    topic_id: int
    partition: int
    records: Sequence[RecordToAppend]
    base_sequence: int | None = None
    expected_offset: int | None = None
    size_bytes: int = 0  # app.domain.log_cleaning.record_size of the records, summed
    # The records' format (app.domain.record_formats.for_topic made it their topic's): which columns
    # their keys and values go to.
    value_format: ValueFormat = ValueFormat.JSON
    # The version of the topic's row it was checked against, where that row is a process's
    # copy (app.storage.seen_topics; a plain batch on PostgreSQL only): its offsets are taken
    # only if the row is still that one. None: read in this transaction.
    topic_row: str | None = None


# Every column of `records` a JSON topic's data record sets (control_type stays NULL), and a
# bytes topic's: the same row shape, its key and value in the binary columns
# (docs/ARCHITECTURE.md#record-formats). A JSON topic's rows carry nothing for the other.
# Who wrote a record (producer, epoch, sequence, transaction) is its batch's row in
# record_batches, written once a batch (app.storage.batch_rows), never once a record.
DATA_RECORD_COLUMNS = ("topic_id", "partition", "offset", "timestamp_ms", "key", "value", "headers")
BYTES_RECORD_COLUMNS = tuple({"key": "key_bytes", "value": "value_bytes"}.get(c, c) for c in DATA_RECORD_COLUMNS)

# The columns a COPY's (or an INSERT's) rows carry beyond DATA_RECORD_COLUMNS (or
# BYTES_RECORD_COLUMNS), with the one value each has in every record's row of it: where the
# markers go with JSON topics' records (write_records), a data record's control_type is NULL;
# where the records are of self-committed batches (batch_rows.self_committed), their
# self_committed is true, and where those are an idempotent producer's, their producer_id is
# its id (_self_committed). Never both: markers are written with a transaction's batches only.
_NO_CONTROL_TYPE = (("control_type",), (None,))
_SELF_COMMITTED = (("self_committed",), (True,))
_WITH_MARKERS = (*DATA_RECORD_COLUMNS, *_NO_CONTROL_TYPE[0])


def _self_committed(producer_id: int | None) -> tuple[tuple[str, ...], tuple]:
    """The columns and values a self-committed batch's records carry: a producer's batch its
    producer id too, the one the view reads for them (migration 0044); a batch with no producer
    leaves producer_id to its NULL default, a field less a line."""
    if producer_id is None:
        return _SELF_COMMITTED
    return (*_SELF_COMMITTED[0], "producer_id"), (*_SELF_COMMITTED[1], producer_id)


def _copy_fields(values: tuple) -> str:
    """`values` as the fields that end a line of COPY's text format, each after a tab."""
    return "".join("\t" + (dialect.COPY_NULL if v is None else "t" if v is True else str(v)) for v in values)


def write_records(conn: Connection, appended: list[tuple[BatchToAppend, int]],
                  bytes_appended: list[tuple[BatchToAppend, int]], marker_rows: list[dict], *,
                  self_committed: bool = False, producer_id: int | None = None) -> None:
    """Write the records of the batches appended, each at its base offset: a JSON topic's
    (`appended`), a bytes topic's (`bytes_appended`, BYTES_RECORD_COLUMNS) and the markers
    written with them (markers.marker_row). On PostgreSQL each kind is one COPY, a JSON topic's
    records as lines of COPY's text format (_copy_pieces), the markers with them as rows: a
    version 2 Commit that carries its transaction's last Send writes its records as a plain
    Send does (the driver's write_row, a row at a time, cost such a Commit about 1.5 µs a record
    more than a plain Send of the same records: docs/benchmarks.md, 2026-12-02).

    `self_committed`: the batches are self-committed (batch_rows.self_committed), and so is
    every record written (the column set in the same COPY, a field more a line), each with
    `producer_id`, the batches' producer's (None: no producer)."""
    assert not (self_committed and marker_rows), "markers are written with a transaction's batches only"
    extra = _self_committed(producer_id) if self_committed else ((), ())
    postgresql = conn.dialect.name == "postgresql"
    if postgresql:
        locked = _lock_new_leaves(conn, [(b.topic_id, b.partition) for b, _ in chain(appended, bytes_appended)]
                                  + [(m["topic_id"], m["partition"]) for m in marker_rows])
    if marker_rows:
        # The markers go with the records, in one COPY: rows of every column a JSON topic's
        # record or a marker sets (a bytes topic's records follow in their own, below).
        markers = [tuple(m.get(c) for c in _WITH_MARKERS) for m in marker_rows]
        if postgresql:
            dialect.copy_pieces(conn, records, _WITH_MARKERS,
                                chain(_copy_pieces(appended, _NO_CONTROL_TYPE[1]), [markers]))
        else:
            dialect.bulk_insert(conn, records, _WITH_MARKERS, _rows(appended, _NO_CONTROL_TYPE[1]) + markers)
    elif appended:
        if postgresql:
            dialect.copy_pieces(conn, records, (*DATA_RECORD_COLUMNS, *extra[0]), _copy_pieces(appended, extra[1]))
        else:
            dialect.bulk_insert(conn, records, DATA_RECORD_COLUMNS, _rows(appended), dict(zip(*extra)))
    if bytes_appended:
        dialect.bulk_insert(conn, records, BYTES_RECORD_COLUMNS, _rows(bytes_appended), dict(zip(*extra)))
    if postgresql and locked:
        _leaves_known(conn).update(locked)


# The leaves of `records` a database connection has written to: its backend's cached list of
# leaves holds them (_lock_new_leaves). Per connection, as that list is its backend's; cleared
# when it grows past LEAVES_KNOWN_MAX (topics come and go), at the price of a lock a leaf again.
_LEAVES_KNOWN = "outbox_leaves_known"
LEAVES_KNOWN_MAX = 10_000


def _leaves_known(conn: Connection) -> set[tuple[int, int]]:
    known: set[tuple[int, int]] = conn.connection.info.setdefault(_LEAVES_KNOWN, set())
    if len(known) > LEAVES_KNOWN_MAX:
        known.clear()
    return known


def _lock_new_leaves(conn: Connection, partitions: list[tuple[int, int]]) -> set[tuple[int, int]]:
    """Take the leaves of `records` the COPY writes to (records_<topic_id>_<partition>,
    app/storage/sql/record_leaves.postgresql.sql) before it, where this connection has not
    written to them yet; returns those it took. The COPY routes each row by its backend's
    cached list of the leaves, and a topic's creation is seen committed (its partitions' rows
    are, and this Send took their offsets) a moment before its cache invalidations reach the
    backend: the new leaf is then not in the list, and the row finds no partition. Taking a
    lock not held yet reads the invalidations that have arrived, and a new leaf's lock waits
    for its creation, which holds it until its invalidations are out (publish_pending writes
    into the leaf by name for the same reason). A leaf this backend has written to is in its
    list for good (a detach removes it only once its topic is deleted): no lock, no round trip
    (a 10-record Send paid about 8 % of its throughput for it, docs/benchmarks.md)."""
    new = set(partitions) - _leaves_known(conn)
    if new:
        names = ", ".join(f'"{record_leaf(t, p)}"' for t, p in sorted(new))
        conn.exec_driver_sql(f"LOCK TABLE {names} IN ROW EXCLUSIVE MODE")
    return new


def _columns(records: Sequence[RecordToAppend]) -> RecordColumns:
    """A batch's records by column: as batch_of and kafka_batch built them, or taken apart."""
    if isinstance(records, RecordColumns):
        return records
    return RecordColumns([r.key for r in records], [r.value for r in records], [r.headers for r in records],
                         [r.timestamp_ms for r in records])


def _rows(appended: list[tuple[BatchToAppend, int]], extra: tuple = ()) -> list[tuple]:
    """The batches' records as rows, tuples in DATA_RECORD_COLUMNS order, each followed by
    the values `extra`."""
    rows: list[tuple] = []
    for b, base_offset in appended:
        rows.extend(_batch_rows_with(extra)(b, base_offset, 0, len(b.records)))
    return rows


def _batch_rows(b: BatchToAppend, base_offset: int, start: int, stop: int) -> Iterator[tuple]:
    """Records start to stop of a batch as rows, tuples in DATA_RECORD_COLUMNS order (the
    columns looked up by those names, so the order is that tuple's)."""
    c = _columns(b.records)
    by_name = {"topic_id": repeat(b.topic_id), "partition": repeat(b.partition),
               "offset": range(base_offset + start, base_offset + stop), "timestamp_ms": c.timestamps[start:stop],
               "key": c.keys[start:stop], "value": c.values[start:stop], "headers": c.headers[start:stop]}
    return zip(*(by_name[name] for name in DATA_RECORD_COLUMNS))


def _batch_rows_with(extra: tuple) -> Callable[[BatchToAppend, int, int, int], Iterator[tuple]]:
    """_batch_rows, each row followed by the values `extra` (none: _batch_rows itself)."""
    if not extra:
        return _batch_rows
    return lambda b, base_offset, start, stop: (row + extra for row in _batch_rows(b, base_offset, start, stop))


def _copy_pieces(appended: list[tuple[BatchToAppend, int]], extra: tuple = ()) -> Iterator[str | Iterator[tuple]]:
    """The same rows as _rows, for one COPY (dialect.copy_pieces), in pieces of about
    COPY_PIECE_CHARS: lines of COPY's text format (_copy_lines) as long as the texts can go that
    way, and from the first chunk whose texts cannot (one holding NUL) to the end, rows for the
    driver to write.

    In pieces, each written before the next is made, rather than as one string: one character
    outside the Basic Multilingual Plane makes a joined string 4 bytes a character, and a 32 MB
    Send's COPY built whole raised the service's peak memory 100 MB above what it is in pieces
    (docs/benchmarks.md, 2026-11-30); and the database stores a piece while the next is built
    (COPY_PIECE_CHARS). A batch is cut by its records' bytes (record_sizes; a
    text's bytes are at least its characters) only when it is larger than a piece, which a
    1,000-record Send of ~100-byte values is not: it costs that Send one comparison.

    `extra`: the values that follow each record's row (_NO_CONTROL_TYPE's, _self_committed's),
    the COPY's columns being DATA_RECORD_COLUMNS followed by theirs."""
    more, rows_of = _copy_fields(extra), _batch_rows_with(extra)
    pending: list[str] = []
    size = 0
    for i, (b, base_offset) in enumerate(appended):
        c = _columns(b.records)
        bounds = ([(0, len(c))] if b.size_bytes <= COPY_PIECE_CHARS
                  else chunk_bounds(record_sizes(c.keys, c.values, c.headers), COPY_PIECE_CHARS))
        for start, stop in bounds:
            lines = _copy_lines(b, base_offset, c, start, stop, more)
            if lines is None:
                if pending:
                    yield "".join(pending)
                yield rows_of(b, base_offset, start, len(c))
                for later, later_offset in appended[i + 1:]:
                    yield rows_of(later, later_offset, 0, len(later.records))
                return
            pending.append(lines)
            size += len(lines)
            if size >= COPY_PIECE_CHARS:
                yield "".join(pending)
                pending, size = [], 0
    if pending:
        yield "".join(pending)


# The characters of COPY lines written at once (_copy_pieces): under a MB even at 4 bytes a
# character. Small enough that a large batch goes in several pieces, which PostgreSQL's backend,
# another process, stores while this one builds the next: a batch written as one piece kept the
# whole of the backend's work after the last line was built, most of a large Produce's COPY
# (an idempotent librdkafka producer's request of ~9,000 records waits on it, one request at a
# time: docs/benchmarks.md, 2026-12-01). Large enough that a 1,000-record Send of ~100-byte
# values is one piece and is not cut at all (its size_bytes is below it).
COPY_PIECE_CHARS = 1 << 17


def _copy_lines(b: BatchToAppend, base_offset: int, c: RecordColumns, start: int, stop: int,
                more: str = "") -> str | None:
    """_batch_rows' rows as the lines of a COPY in text format (dialect.copy_texts), each
    followed by the fields `more` (each after a tab, as _copy_fields writes them); None if a text
    cannot go that way. Built column by column: one escaping pass over each column, and
    one format per row, its fields in the order _check_line_order holds to _batch_rows'."""
    keys, values, headers = (dialect.copy_texts(c.keys[start:stop]),  # type: ignore[arg-type]
                             dialect.copy_texts(c.values[start:stop]), dialect.copy_texts(c.headers[start:stop]))
    if keys is None or values is None or headers is None:
        return None
    timestamps = c.timestamps[start:stop]
    # The usual Send: every record stamped by the service's clock, none with headers. The
    # fields alike in every row are written once into its format: two fields fewer a row, a
    # third of the lines' time (docs/benchmarks.md, 2026-12-01). Chosen once a run of offsets
    # (up to 1,000 rows), not once a row.
    alike = bool(timestamps) and (headers.count(dialect.COPY_NULL) == len(headers)
                                  and timestamps.count(timestamps[0]) == len(timestamps))
    middle, tail = (f"\t{timestamps[0]}\t", f"\t{dialect.COPY_NULL}{more}\n") if alike else ("", "")
    lines: list[str] = []
    i = 0
    for head, lows in _offset_runs(f"{b.topic_id}\t{b.partition}\t", base_offset + start, base_offset + stop):
        j = i + len(lows)
        if alike:
            lines += [f"{head}{low}{middle}{k}\t{v}{tail}" for low, k, v in zip(lows, keys[i:j], values[i:j])]
        else:
            lines += [f"{head}{low}\t{ts}\t{k}\t{v}\t{h}{more}\n" for low, ts, k, v, h in zip(
                lows, timestamps[i:j], keys[i:j], values[i:j], headers[i:j])]
        i = j
    return "".join(lines)


# The texts of 0 to 999, and of 000 to 999: an offset's last three digits, looked up rather than
# formatted, which was a sixth of the lines' time (docs/benchmarks.md, 2026-12-05).
_LOW_DIGITS = tuple(str(i) for i in range(1000))
_LOW_DIGITS_PADDED = tuple(f"{i:03d}" for i in range(1000))


def _offset_runs(lead: str, first: int, stop: int) -> Iterator[tuple[str, Sequence[str]]]:
    """The offsets first to stop (not negative) as runs that share all but their last three
    digits: for each, `lead` followed by those digits, and the texts of the last three
    (an offset's text is the two joined)."""
    while first < stop:
        high, low = divmod(first, 1000)
        end = min(stop, first - low + 1000)
        yield (f"{lead}{high}", _LOW_DIGITS_PADDED[low:low + end - first]) if high else (
            lead, _LOW_DIGITS[low:low + end - first])
        first = end


def _check_line_order() -> None:
    """_copy_lines writes its fields in _batch_rows' order, which is DATA_RECORD_COLUMNS': one
    record with a distinct field in every column, through both of its ways (with headers, and
    without, where the constant fields are folded into the row's format), and with each kind of
    columns after them (the markers', a self-committed record's with a producer id or without)
    as _batch_rows_with's rows have them. Run at import, so that a change to one order and not
    the other cannot load."""
    for record in (RecordToAppend("k", "v", "h", 4), RecordToAppend("k", "v", None, 4)):
        batch = BatchToAppend(1, 2, [record])
        for extra in ((), _NO_CONTROL_TYPE[1], _SELF_COMMITTED[1], _self_committed(12)[1]):
            row = next(_batch_rows_with(extra)(batch, 3, 0, 1))
            if _copy_lines(batch, 3, _columns(batch.records), 0, 1, _copy_fields(extra)) != "\t".join(
                    dialect.COPY_NULL if f is None else "t" if f is True else str(f) for f in row) + "\n":
                raise AssertionError("_copy_lines and the rows of the records' COPY order their columns differently")


_check_line_order()

