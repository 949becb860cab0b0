"""A record to append and a Send's batch of them: the one definition of a valid record, which
every appender applies (the HTTP Send through app.api.send_body, the in-database Python API
app.in_database; PostgreSQL's outbox.append, app/storage/sql/appender.postgresql.sql, gives
the same verdicts, as tests/appender_cases.py holds them all to).

A value is JSON text, kept as given without the white space JSON allows around it
(json_value_bytes): checked, never parsed into Python objects on the way in (a Send of 1,000
records builds none for its values, docs/benchmarks.md, session 9). Each check is one function
raising the domain error a Send answers:

- keys and header names and values hold no NUL (PostgreSQL cannot store it in text);
- a message id (the in-database API's key of a record, which a Send does not carry) is text of
  1 to MAX_MESSAGE_ID_LENGTH characters without NUL (check_message_id);
- every number in a value is finite as a 64-bit float. JSON itself sets no bound, but 1e400 or
  a 400-digit integer reads as infinity in most parsers, and some (orjson) refuse it outright,
  which would make every Fetch of the partition unreadable to their users. Such a number has
  a 3-digit exponent or 210 digits in a row (with at most 99 for an exponent, 209 digits before
  a point stay below 10**308); only a text with one of those (or text that looks like one: a
  UUID often holds "e123") is parsed, by orjson, which refuses exactly those numbers;
- a value nests at most MAX_DEPTH levels, so that any JSON parser reads a Fetch back (Python's
  own gives up at about 1,000 levels, counting the response's own). Only a value longer than
  2 * MAX_DEPTH bytes with more brackets than MAX_DEPTH can be that deep;
- a timestamp_ms is 0 to MAX_TIMESTAMP_MS, 9999-12-31T23:59:59.999Z (check_timestamp): the
  last instant every reader of a record represents (Spark's timestamp, Python's datetime), so
  that no record a door takes makes its partition unreadable to one of them;
- at most OUTBOX_MAX_RECORDS_PER_REQUEST records in one Send.

That is a JSON topic's record. A topic's value_format (app.domain.types.ValueFormat,
docs/ARCHITECTURE.md#record-formats) says which rules apply: app.domain.record_formats turns a
batch built here into its topic's format, and app.domain.kafka_records is the Kafka door's way
in and out.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import accumulate
from typing import Any

import orjson

from app.domain.errors import InvalidRequest, RecordListTooLarge
from app.domain.log_cleaning import record_sizes
from app.domain.topic_names import check_topic_address
from app.domain.types import MAX_INT32, ValueFormat

MAX_DEPTH = 254
# The last timestamp_ms a record may have: 9999-12-31T23:59:59.999Z, the last instant of Spark's
# timestamp and of Python's datetime. Past it Spark's readers cannot make the record's timestamp
# (the data source's Arrow cast overflows from 2**63 microseconds on, the JDBC read's
# timestamp_millis with DATETIME_OVERFLOW; a collect() of a year past 9999 fails in Python), and
# one such record made every Spark read of its partition fail. Every door derives its bound from
# this one: a Send's schema (app.api.schemas.records), the Python API (check_timestamp), the
# Kafka door (app.domain.kafka_records, INVALID_TIMESTAMP) and outbox.append
# (app/storage/sql/appender.postgresql.sql, which holds the number itself).
MAX_TIMESTAMP_MS = 253_402_300_799_999

# The text a null value is stored as, in a JSON topic (every door writes it so).
NULL_TEXT = "null"
# Digits -> "0", e/E -> "e", everything else -> " ", and '+'/'-' deleted: "1e+400" reads
# "0e000", so a 3-digit exponent, or a run of 210 digits, is a substring search over the text
# (ten times faster than a regular expression over the text itself). The exponent's search is
# the regular expression module's literal search: the text is mostly "0", "e" and " ", where
# `in` steps one byte at a time at every "0" (77 µs against 47 over a 1,000-record Send).
_SHAPES = bytes(0x30 if 0x30 <= i <= 0x39 else 0x65 if i in (0x45, 0x65) else 0x20 for i in range(256))
_SIGNS = b"+-"
_HAS_LONG_EXPONENT = re.compile(rb"e000").search
# A 2-digit exponent adds at most 99 to a number's digits before its point: 210 of them times
# 1e99 may be past 2**1024 (1e210 * 1e99 is), 209 never are. A run of 309 missed "1" + 300
# zeros + "e10", which orjson's readers then refused.
_LONG_RUN = b"0" * 210
_NOT_BRACKETS = bytes(i for i in range(256) if i not in b"[]{}")
# One pass removes the innermost pairs of either kind at once: exactly one level everywhere.
_INNERMOST = re.compile(rb"\[\]|\{\}")
# JSON's white space (space, tab, line feed, carriage return): what may stand around a value's text and is no part of it.
JSON_WHITESPACE = b" \t\n\r"


@dataclass(slots=True)
class RecordToAppend:
    # A JSON topic's: key text, value JSON text ("null" for null), headers the JSON text of an
    # object of strings. A bytes topic's: key and value bytes (None: null), headers the JSON
    # text of a list of {"name": text, "value": base64 or null}, which is also
    # how the HTTP API shows them. Until for_topic has run, a batch built from a Send's JSON
    # (batch_of) may carry a typed key or a header list as the Send decoded them instead.
    key: Any
    value: str | bytes | None
    headers: Any
    timestamp_ms: int


class RecordColumns(Sequence[RecordToAppend]):
    """A batch's records held column by column (each column a list, one item a record), as
    batch_of and kafka_batch build them: the RecordToAppend of a record is made only when asked
    for, and a plain Send's append, which writes the columns as they are
    (app.storage.record_rows), never asks. Equal to any sequence of the same records."""

    __slots__ = ("keys", "values", "headers", "timestamps")

    def __init__(self, keys: Sequence[Any], values: Sequence[str | bytes | None], headers: Sequence[Any],
                 timestamps: Sequence[int]) -> None:
        if not len(keys) == len(values) == len(headers) == len(timestamps):
            raise ValueError("a batch's columns must be of one length")
        self.keys, self.values, self.headers, self.timestamps = keys, values, headers, timestamps

    def __len__(self) -> int:
        return len(self.keys)

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return list(self)[i]
        return RecordToAppend(self.keys[i], self.values[i], self.headers[i], self.timestamps[i])

    def __iter__(self) -> Iterator[RecordToAppend]:
        return map(RecordToAppend, self.keys, self.values, self.headers, self.timestamps)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence) or isinstance(other, (str, bytes)):
            return NotImplemented
        return list(self) == list(other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"RecordColumns({list(self)!r})"


@dataclass(slots=True)
class SendBatch:
    topic: str
    partition: int
    records: Sequence[RecordToAppend]
    base_sequence: int | None = None
    expected_offset: int | None = None
    # The records' bytes (app.domain.log_cleaning.record_size), and the largest record's
    # (its index, its bytes); computed by the log when not given. batch_of gives both,
    # counted from the values' bytes it was given.
    size_bytes: int | None = None
    largest_record: tuple[int, int] | None = None
    # The format the records are in: JSON for a batch built from a Send's JSON (batch_of),
    # whatever its topic's format, until for_topic converts it.
    value_format: ValueFormat = ValueFormat.JSON
    # Whether a record carried a typed key or a header list, which only a bytes topic takes.
    typed: bool = False
    # Whether a bytes topic may read the values as the HTTP API's typed JSON (a Send's): the
    # Kafka door's JSON values are the records' own bytes, no such thing (kafka_batch sets it
    # False, so that for_topic refuses such a batch for a bytes topic instead of converting it).
    http_shapes: bool = True


def check_record_count(total: int, limit: int) -> None:
    """At most `limit` (OUTBOX_MAX_RECORDS_PER_REQUEST) records in one Send. Asked once per
    Send, before a record is built, so that an oversized Send costs no work per record. An HTTP
    Send (or a Commit carrying batches) counts all its batches together; the Kafka door counts
    each record batch, as each partition of a Produce is answered on its own there (the request
    as a whole is bounded by its decompressed bytes, app.kafka.decompressed)."""
    if total > limit:
        raise RecordListTooLarge(
            f"{total} records in one request; the limit is {limit} (OUTBOX_MAX_RECORDS_PER_REQUEST)"
        )


def check_address(topic: Any, partition: Any) -> None:
    """A topic's name and a partition number as a Send's schema takes them."""
    check_topic_address(topic)
    if type(partition) is not int or not 0 <= partition <= MAX_INT32:
        raise InvalidRequest(f"partition: must be an integer from 0 to {MAX_INT32}, not {partition!r}")


def check_text(text: Any, what: str) -> None:
    """A key, a message id, or a header's name or value: a string without NUL (which
    PostgreSQL's text cannot hold) or a lone surrogate (which is not UTF-8, so no database
    and no JSON document can hold it)."""
    if not isinstance(text, str):
        raise InvalidRequest(f"{what}: must be a string, not {type(text).__name__}")
    if "\x00" in text:
        raise InvalidRequest(f"{what}: must not contain NUL (U+0000)")
    if not text.isascii():
        try:
            text.encode()
        except UnicodeEncodeError:
            raise InvalidRequest(f"{what}: must not contain a lone surrogate, which is not UTF-8") from None


# A message id is the application's key of a record, unique per topic in record_message_ids'
# primary key (topic_id, message_id): a B-tree entry of PostgreSQL holds at most about 2,700
# bytes, and a longer id failed only at the commit, where publish_pending inserts it, aborting
# the whole application transaction. 255 characters are at most 1,020 bytes of UTF-8. An empty
# id is a missing one written as text: every later record given it would be skipped as a retry.
MAX_MESSAGE_ID_LENGTH = 255


def check_message_id(message_id: Any, what: str) -> None:
    """A record's message id: a string of 1 to MAX_MESSAGE_ID_LENGTH characters without NUL
    (which PostgreSQL's text cannot hold) or a lone surrogate (which is not UTF-8). outbox.append
    applies the same rule (app/storage/sql/appender.postgresql.sql), where its text parameter
    can hold neither."""
    check_text(message_id, what)  # a string without NUL or a lone surrogate, as a key
    if not 1 <= len(message_id) <= MAX_MESSAGE_ID_LENGTH:
        raise InvalidRequest(
            f"{what}: a message id is 1 to {MAX_MESSAGE_ID_LENGTH} characters, not {len(message_id)}")


def check_headers(headers: Any, what: str) -> None:
    """Headers: an object of strings without NUL."""
    if not isinstance(headers, dict):
        raise InvalidRequest(f"{what}: headers must be an object of strings, not {type(headers).__name__}")
    for name, text in headers.items():
        check_text(name, f"{what}: a header name")
        check_text(text, f"{what}.{name}")


def check_timestamp(timestamp_ms: Any, what: str) -> None:
    """A record's timestamp_ms: an integer from 0 to MAX_TIMESTAMP_MS (9999-12-31T23:59:59.999Z)."""
    if type(timestamp_ms) is not int or not 0 <= timestamp_ms <= MAX_TIMESTAMP_MS:
        raise InvalidRequest(f"{what}: timestamp_ms must be an integer from 0 to {MAX_TIMESTAMP_MS} "
                             f"(9999-12-31T23:59:59.999Z), not {timestamp_ms!r}")


def json_value_bytes(raw: bytes) -> bytes:
    """A value's JSON text as it is stored and sized: without the white space around it. A
    Send's value is the text between its body's tokens (msgspec.Raw), which holds none, and
    the Python API writes none; outbox.append (its btrim) and the Kafka door, given the text on
    its own, strip it, so that one record is the same bytes whichever door it came through.
    The value as given when there is none to strip (bytes.strip returns it)."""
    return raw.strip(JSON_WHITESPACE)


def check_finite_numbers(json_text: bytes) -> None:
    """Refuse JSON text holding a number that is not finite as a 64-bit float. A cheap search
    first: a Send's whole body is looked through at once."""
    shapes = json_text.translate(_SHAPES, _SIGNS)
    if _HAS_LONG_EXPONENT(shapes) or _LONG_RUN in shapes:
        try:
            orjson.loads(json_text)
        except orjson.JSONDecodeError as e:
            raise InvalidRequest(f"the body holds JSON that readers cannot parse back: {e}") from None


def check_depth(value: bytes, index: int, topic: str, partition: int) -> None:
    """Refuse a value nesting deeper than MAX_DEPTH. Brackets inside strings do not count:
    the strings' contents are taken out first (every backslash is inside a string, where it
    starts an escape; with the escaped backslashes and quotes gone, the quotes left delimit
    strings, and the even pieces between them are outside). Each pass then removes one level,
    the innermost pairs, so what is left after MAX_DEPTH passes nests deeper."""
    if value.count(b"[") + value.count(b"{") <= MAX_DEPTH:
        return
    if b"\\" in value:
        value = value.replace(b"\\\\", b"").replace(b'\\"', b"")
    skeleton = b"".join(value.split(b'"')[0::2]).translate(None, _NOT_BRACKETS)
    for _ in range(MAX_DEPTH):
        if not skeleton:
            return
        skeleton = _INNERMOST.sub(b"", skeleton)
    if skeleton:
        raise InvalidRequest(
            f"record {index} of {topic}/{partition}: the value nests deeper than {MAX_DEPTH} "
            "levels of arrays and objects"
        )


def batch_of(topic: str, partition: int, records: Sequence[Any], now_ms: int, *, no_value: Any = None,
             base_sequence: int | None = None, expected_offset: int | None = None) -> SendBatch:
    """The batch of `records`, each with `key`, `value` (UTF-8 JSON text as bytes, or
    `no_value`: null), `headers` (a dict of strings, or None) and `timestamp_ms` (None: now),
    checked for depth (the other checks are the caller's, made once over all its text), with
    the records' bytes and the largest record's (its index, its bytes), which the topic's
    max_message_bytes is checked against: record_sizes over the batch once, given the values'
    bytes at hand rather than the texts to encode again.

    Built column by column: it runs for every record of every Send, and a Python loop with a
    few steps per record cost a 1,000-record Send more than a microsecond a record
    (docs/benchmarks.md, 2026-11-30). The values are decoded joined by NUL (joined_texts),
    which JSON text cannot hold outside a string nor a string unescaped: the join splits back
    into as many texts as values exactly when each is what str(value, "utf-8") makes of it. A record
    with a bytes topic's typed key or header list (which only a Send's schema lets through)
    fails the headers' JSON call or record_sizes (a typed key has no length); the batch is then
    built by _typed_batch_of, so that a JSON topic's Send pays nothing per record for formats.
    The records are held as the columns built (RecordColumns)."""
    keys = [r.key for r in records]
    raws = [r.value for r in records]
    headers = [r.headers for r in records]
    timestamps = [r.timestamp_ms for r in records]
    try:
        # Every value's bytes, counted once for the depth's screen, the decoding's chunks and
        # the records' sizes; `no_value` has no length, so a null among them is the TypeError.
        lengths: list[int] | None = list(map(len, raws))
    except TypeError:
        lengths = None
    if lengths is not None:
        present, longest = raws, max(lengths, default=0)
    else:
        present = [v for v in raws if v is not no_value]
        longest = max(map(len, present), default=0)
    if longest > 2 * MAX_DEPTH:
        for i, raw in enumerate(raws):
            if raw is not no_value and len(raw) > 2 * MAX_DEPTH:
                check_depth(bytes(raw), i, topic, partition)
    texts = joined_texts(raws, NULL_TEXT, absent=no_value, lengths=lengths)
    if texts is None:  # a value holding NUL, which no JSON text does: each on its own
        texts = [NULL_TEXT if v is no_value else str(v, "utf-8") for v in raws]
    if present is not raws:  # some values are null: stored as the text null, sized as it
        raws = [NULL_TEXT if v is no_value else v for v in raws]
    if None in timestamps:
        # Usually none was given: every record then takes the clock's, without a look at each.
        timestamps = ([now_ms] * len(timestamps) if timestamps.count(None) == len(timestamps)
                      else [now_ms if t is None else t for t in timestamps])
    try:
        if headers.count(None) != len(headers):
            dumps = orjson.dumps
            headers = [None if h is None else dumps(h).decode() for h in headers]
        sizes = record_sizes(keys, raws, headers, value_bytes=lengths)
    except (AttributeError, TypeError):  # orjson cannot dump a header list; a typed key has no length
        return _typed_batch_of(topic, partition, records, now_ms, no_value=no_value, base_sequence=base_sequence,
                               expected_offset=expected_offset)
    return SendBatch(topic=topic, partition=partition, records=RecordColumns(keys, texts, headers, timestamps),
                     base_sequence=base_sequence, expected_offset=expected_offset, size_bytes=sum(sizes),
                     largest_record=first_largest(sizes))


def _typed_batch_of(topic: str, partition: int, records: Sequence[Any], now_ms: int, *, no_value: Any,
                    base_sequence: int | None, expected_offset: int | None) -> SendBatch:
    """batch_of for records of which some have a typed key or a header list: those are kept as
    given, for for_topic to convert (a bytes topic) or refuse (a JSON topic), and the batch is
    marked `typed`. Its sizes are for_topic's to count."""
    out = []
    for i, r in enumerate(records):
        raw, key, headers = r.value, r.key, r.headers
        if raw is no_value:
            value = NULL_TEXT
        else:
            if len(raw) > 2 * MAX_DEPTH:
                check_depth(bytes(raw), i, topic, partition)
            value = str(raw, "utf-8")
        if type(headers) is dict:
            headers = orjson.dumps(headers).decode()
        out.append(RecordToAppend(key, value, headers, now_ms if r.timestamp_ms is None else r.timestamp_ms))
    return SendBatch(topic=topic, partition=partition, records=out, base_sequence=base_sequence,
                     expected_offset=expected_offset, typed=True)


def first_largest(sizes: list[int]) -> tuple[int, int]:
    """The largest record (its index, the first of the largest, and its bytes); (0, 0) for none."""
    if not sizes:
        return 0, 0
    largest = max(sizes)
    return sizes.index(largest), largest


def joined_texts(column: Sequence[Any], null: str | None = None, *, absent: Any = None,
                 lengths: Sequence[int] | None = None) -> list[str | None] | None:
    """Each piece of bytes decoded as UTF-8 (`absent`: `null`), or None if one is not UTF-8 or
    holds NUL. `lengths`: each piece's bytes, where the caller has counted them (then none is
    `absent`), so that the column is not looked through again for them.

    Decoded joined by NUL, which no UTF-8 sequence can span: a join decodes, and splits back
    into as many pieces, exactly when every piece is UTF-8 without NUL. One call a chunk of
    about JOIN_CHUNK_BYTES (chunk_bounds) rather than one for the whole column: a single
    character outside the Basic Multilingual Plane makes a decoded string 4 bytes a character,
    and a 32 MB Send's values joined in one string took 128 MB for a moment; the pieces split off
    keep each its own width (docs/benchmarks.md, 2026-11-30)."""
    nulls = lengths is None and absent in column
    present = [b for b in column if b is not absent] if nulls else column
    texts: list[str] = []
    try:
        for start, stop in chunk_bounds(map(len, present) if lengths is None else lengths, JOIN_CHUNK_BYTES):
            chunk = present[start:stop] if stop - start < len(present) else present
            pieces = b"\x00".join(chunk).decode().split("\x00")
            if len(pieces) != stop - start:
                return None
            texts.extend(pieces)
    except (UnicodeDecodeError, TypeError):
        return None
    if not nulls:
        return texts  # type: ignore[return-value]
    pieces = iter(texts)
    return [null if b is absent else next(pieces) for b in column]


# The bytes of values joined_texts decodes in one call: small enough that the decoded string
# stays a few MB at 4 bytes a character, large enough that a chunk's call costs nothing beside
# its records' (a 1,000-record Send of ~100-byte values is one chunk).
JOIN_CHUNK_BYTES = 1 << 20


def chunk_bounds(lengths: Iterable[int], limit: int) -> list[tuple[int, int]]:
    """(start, stop) of each run of consecutive items, in order and covering them all, whose
    lengths sum to at most `limit`, or of one item longer than `limit` on its own: a column cut
    into pieces to process one at a time, so that what a piece makes stays bounded. A column
    within `limit` (a usual Send's values, each time they are decoded) is summed, not
    accumulated: half the time of building the running totals it then has no use for."""
    lengths = list(lengths)
    if sum(lengths) <= limit:
        return [(0, len(lengths))] if lengths else []
    ends = list(accumulate(lengths))
    bounds: list[tuple[int, int]] = []
    start, base = 0, 0
    while start < len(ends):
        stop = max(bisect_right(ends, base + limit, start), start + 1)
        bounds.append((start, stop))
        start, base = stop, ends[stop - 1]
    return bounds
