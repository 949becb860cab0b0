"""A record to append and a Send's batch of them: the one definition of a valid record, which
every appender applies (the HTTP Send through app.api.send_body, the in-database Python API
app.in_database; PostgreSQL's outbox.append, app/storage/sql/appender.postgresql.sql, gives
the same verdicts, as tests/appender_cases.py holds them all to).

A value is JSON text, kept as given: checked, never parsed into Python objects on the way in
(a Send of 1,000 records builds none for its values, docs/benchmarks.md, session 9). Each check
is one function raising the domain error a Send answers:

- keys and header names and values hold no NUL (PostgreSQL cannot store it in text);
- every number in a value is finite as a 64-bit float. JSON itself sets no bound, but 1e400 or
  a 400-digit integer reads as infinity in most parsers, and some (orjson) refuse it outright,
  which would make every Fetch of the partition unreadable to their users. Such a number has
  a 3-digit exponent or 210 digits in a row (with at most 99 for an exponent, 209 digits before
  a point stay below 10**308); only a text with one of those (or text that looks like one: a
  UUID often holds "e123") is parsed, by orjson, which refuses exactly those numbers;
- a value nests at most MAX_DEPTH levels, so that any JSON parser reads a Fetch back (Python's
  own gives up at about 1,000 levels, counting the response's own). Only a value longer than
  2 * MAX_DEPTH bytes with more brackets than MAX_DEPTH can be that deep;
- at most OUTBOX_MAX_RECORDS_PER_REQUEST records in one Send.

That is a JSON topic's record. A topic's value_format (app.domain.types.ValueFormat,
docs/ARCHITECTURE.md#record-formats) says which rules apply: a bytes topic's key and value are
any bytes and its headers an ordered list of (name, bytes or null). `for_topic` turns a batch
built from a Send's JSON into its topic's format (once per batch; nothing per record for a JSON
topic), `from_kafka` (a record) and `to_kafka` are the Kafka door's way in and out, `kafka_batch`
applies `from_kafka` to a whole produced batch at once, and every refusal of a record its
topic's format cannot hold is INVALID_RECORD, whichever door it came through.
"""

from __future__ import annotations

import base64
import binascii
import re
from bisect import bisect_right
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import accumulate
from typing import Any

import orjson

from app.domain.errors import InvalidRecord, InvalidRequest, RecordListTooLarge
from app.domain.log_cleaning import record_sizes
from app.domain.types import MAX_INT32, MAX_INT64, ValueFormat

MAX_DEPTH = 254

_NULL = "null"
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
# A topic's name: Kafka's length, and nothing a URL path or a log line would misread.
_TOPIC_NAME = re.compile(r"[^/\x00-\x1f\x7f]{1,249}")


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
    (app.storage.append), never asks. Equal to any sequence of the same records."""

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
    # Kafka door's JSON values are the records' own bytes, no such thing (it appends to JSON
    # topics only, until it builds its batches with kafka_batch for its topic's format).
    http_shapes: bool = True


def check_record_count(total: int, limit: int) -> None:
    """At most `limit` (OUTBOX_MAX_RECORDS_PER_REQUEST) records in one Send. Asked once per
    Send, before a record is built, so that an oversized Send costs no work per record."""
    if total > limit:
        raise RecordListTooLarge(
            f"{total} records in one request; the limit is {limit} (OUTBOX_MAX_RECORDS_PER_REQUEST)"
        )


def check_address(topic: Any, partition: Any) -> None:
    """A topic's name and a partition number as a Send's schema takes them."""
    if not isinstance(topic, str) or not _TOPIC_NAME.fullmatch(topic):
        raise InvalidRequest(f"topic: a topic's name is 1 to 249 characters without '/' or control characters, not {topic!r}")
    if type(partition) is not int or not 0 <= partition <= MAX_INT32:
        raise InvalidRequest(f"partition: must be an integer from 0 to {MAX_INT32}, not {partition!r}")


def check_text(text: Any, what: str) -> None:
    """A key, or a header's name or value: a string without NUL."""
    if not isinstance(text, str):
        raise InvalidRequest(f"{what}: must be a string, not {type(text).__name__}")
    if "\x00" in text:
        raise InvalidRequest(f"{what}: must not contain NUL (U+0000)")


def check_headers(headers: Any, what: str) -> None:
    """Headers: an object of strings without NUL."""
    if not isinstance(headers, dict):
        raise InvalidRequest(f"{what}: headers must be an object of strings, not {type(headers).__name__}")
    for name, text in headers.items():
        check_text(name, f"{what}: a header name")
        check_text(text, f"{what}.{name}")


def check_timestamp(timestamp_ms: Any, what: str) -> None:
    if type(timestamp_ms) is not int or not 0 <= timestamp_ms <= MAX_INT64:
        raise InvalidRequest(f"{what}: timestamp_ms must be an integer from 0 to {MAX_INT64}, not {timestamp_ms!r}")


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
    (docs/benchmarks.md, 2026-11-30). The values are decoded joined by NUL (_joined_texts),
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
    present = [v for v in raws if v is not no_value] if no_value in raws else raws
    if present and max(map(len, present)) > 2 * MAX_DEPTH:
        for i, raw in enumerate(raws):
            if raw is not no_value and len(raw) > 2 * MAX_DEPTH:
                check_depth(bytes(raw), i, topic, partition)
    texts = _joined_texts(raws, _NULL, absent=no_value)
    if texts is None:  # a value holding NUL, which no JSON text does: each on its own
        texts = [_NULL if v is no_value else str(v, "utf-8") for v in raws]
    if present is not raws:  # some values are null: stored as the text null, sized as it
        raws = [_NULL if v is no_value else v for v in raws]
    if None in timestamps:
        timestamps = [now_ms if t is None else t for t in timestamps]
    try:
        if headers.count(None) != len(headers):
            dumps = orjson.dumps
            headers = [None if h is None else dumps(h).decode() for h in headers]
        sizes = record_sizes(keys, raws, headers)
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
            value = _NULL
        else:
            if len(raw) > 2 * MAX_DEPTH:
                check_depth(bytes(raw), i, topic, partition)
            value = str(raw, "utf-8")
        if type(headers) is dict:
            headers = orjson.dumps(headers).decode()
        out.append(RecordToAppend(key, value, headers, now_ms if r.timestamp_ms is None else r.timestamp_ms))
    return SendBatch(topic=topic, partition=partition, records=out, base_sequence=base_sequence,
                     expected_offset=expected_offset, typed=True)


# --- formats ------------------------------------------------------------------------------

# How the HTTP API names the encoding of a bytes topic's key or value (as Confluent's REST API
# v3 does): BINARY, its bytes in base64; STRING, text standing for its UTF-8 bytes. A Fetch
# always answers BINARY: the stored bytes need not be text.
BINARY = "BINARY"
STRING = "STRING"


def for_topic(batch: SendBatch, value_format: ValueFormat) -> SendBatch:
    """The batch in its topic's format, or INVALID_RECORD for a record that format cannot hold.
    Asked once per batch by every append (app.services.log_service.batches_to_append): a
    batch already in its topic's format costs nothing more, so a JSON topic's Send pays no
    work per record for formats."""
    where = f"{batch.topic}/{batch.partition}"
    if batch.value_format is value_format:
        if batch.typed:
            raise InvalidRecord(
                f"a record of {where}: topic {batch.topic!r} is a json topic, whose keys are strings and headers an "
                "object of strings; typed keys ({\"type\": ...}) and header lists are a bytes topic's")
        return batch
    if value_format is not ValueFormat.BYTES:
        raise InvalidRecord(f"records of {where} are {batch.value_format.value}, but the topic is {value_format.value}")
    if not batch.http_shapes:
        raise InvalidRecord(f"topic {batch.topic!r} is a bytes topic; these records were read as JSON, which only a "
                            "json topic takes")
    records = [RecordToAppend(_typed_bytes(r.key, "key", i, where), _bytes_value(r.value, i, where),
                              _header_list(r.headers, i, where), r.timestamp_ms)
               for i, r in enumerate(batch.records)]
    return _sized(batch, records, ValueFormat.BYTES)


def _sized(batch: SendBatch, records: list[RecordToAppend], value_format: ValueFormat) -> SendBatch:
    sizes = record_sizes([r.key for r in records], [r.value for r in records], [r.headers for r in records])
    return SendBatch(topic=batch.topic, partition=batch.partition, records=records,
                     base_sequence=batch.base_sequence, expected_offset=batch.expected_offset,
                     size_bytes=sum(sizes), largest_record=first_largest(sizes), value_format=value_format)


def first_largest(sizes: list[int]) -> tuple[int, int]:
    """The largest record (its index, the first of the largest, and its bytes); (0, 0) for none."""
    if not sizes:
        return 0, 0
    largest = max(sizes)
    return sizes.index(largest), largest


def _typed_bytes(field: Any, what: str, index: int, where: str) -> bytes | None:
    """A bytes topic's key or value as a Send gives it: null, {"type": "BINARY", "data":
    base64} or {"type": "STRING", "data": text}; a key may also be a plain string (keys have
    always been strings in the HTTP API), which is its UTF-8 bytes."""
    if field is None:
        return None
    if type(field) is str and what == "key":
        return _utf8(field, what, index, where)
    kind, data = (field.get("type"), field.get("data")) if type(field) is dict else (
        getattr(field, "type", None), getattr(field, "data", None))
    if type(field) is dict and set(field) != {"type", "data"} or type(data) is not str:
        kind = None
    if kind == BINARY:
        try:
            return base64.b64decode(data, validate=True)
        except (binascii.Error, ValueError):
            raise InvalidRecord(f"record {index} of {where}: the {what}'s data is not base64") from None
    if kind == STRING:
        return _utf8(data, what, index, where)
    raise InvalidRecord(
        f"record {index} of {where}: a bytes topic's {what} is null, {{\"type\": \"BINARY\", \"data\": "
        f"<base64>}} or {{\"type\": \"STRING\", \"data\": <text>}}")


def _utf8(text: str, what: str, index: int, where: str) -> bytes:
    try:
        return text.encode()
    except UnicodeEncodeError:
        raise InvalidRecord(f"record {index} of {where}: the {what} holds a lone surrogate, which is no UTF-8") from None


def _bytes_value(value_json: str | bytes | None, index: int, where: str) -> bytes | None:
    """A bytes topic's value from the JSON text a Send gave (batch_of kept it as text)."""
    if value_json is None or value_json == _NULL:
        return None
    try:
        value = orjson.loads(value_json)
    except orjson.JSONDecodeError:
        raise InvalidRecord(f"record {index} of {where}: the value is not JSON") from None
    return _typed_bytes(value, "value", index, where)


def _header_list(headers: Any, index: int, where: str) -> str | None:
    """A bytes topic's headers as stored: the JSON text of [{"name": ..., "value": base64 or
    null}, ...] in the order given, repeats kept. A Send gives that list, or an object of
    strings (each value its UTF-8 bytes)."""
    if headers is None:
        return None
    if type(headers) is str:  # an object of strings, which batch_of already wrote as its JSON text
        headers = orjson.loads(headers)
    if type(headers) is dict:
        pairs = [(name, _utf8(text, "header " + repr(name), index, where)) for name, text in headers.items()]
    else:
        pairs = []
        for h in headers:
            name, data = getattr(h, "name", None), getattr(h, "value", None)
            if type(name) is not str or not (data is None or type(data) is str):
                raise InvalidRecord(f"record {index} of {where}: a header is {{\"name\": text, \"value\": base64 or null}}")
            try:
                pairs.append((name, None if data is None else base64.b64decode(data, validate=True)))
            except (binascii.Error, ValueError):
                raise InvalidRecord(f"record {index} of {where}: header {name!r}'s value is not base64") from None
    return header_list_json(pairs, index, where)


def header_list_json(pairs: Sequence[tuple[str, bytes | None]], index: int = 0, where: str = "") -> str:
    try:
        return orjson.dumps([{"name": name, "value": None if data is None else base64.b64encode(data).decode()}
                             for name, data in pairs]).decode()
    except TypeError:  # orjson refuses a lone surrogate in a name
        raise InvalidRecord(f"record {index} of {where}: a header name holds a lone surrogate, which is no UTF-8") from None


def typed_json(data: bytes) -> dict[str, str]:
    """A bytes topic's key or value as the HTTP API shows it."""
    return {"type": BINARY, "data": base64.b64encode(data).decode()}


# --- the Kafka door ----------------------------------------------------------------------

KafkaHeaders = Sequence[tuple[str, bytes | None]]


def from_kafka(key: bytes | None, value: bytes | None, headers: KafkaHeaders, timestamp_ms: int,
               value_format: ValueFormat, *, index: int = 0, where: str = "") -> RecordToAppend:
    """A Kafka record (key and value bytes or null, headers in order) as its topic of
    `value_format` stores it, or INVALID_RECORD for what that format cannot hold. A bytes topic
    holds any record. A JSON topic holds what the HTTP API can send it: a UTF-8 key without NUL,
    a value of valid JSON text (null: JSON null, the tombstone), and headers of distinct names
    whose values are UTF-8 without NUL, kept as the object's JSON text."""
    check_timestamp(timestamp_ms, f"record {index} of {where}")
    if value_format is ValueFormat.BYTES:
        return RecordToAppend(None if key is None else bytes(key), None if value is None else bytes(value),
                              header_list_json(headers, index, where) if headers else None, timestamp_ms)
    return RecordToAppend(_json_key(key, index, where), _json_value(value, index, where),
                          _json_headers(headers, index, where), timestamp_ms)


def _text(data: bytes, what: str, index: int, where: str) -> str:
    try:
        text = bytes(data).decode()
    except UnicodeDecodeError:
        raise InvalidRecord(f"record {index} of {where}: a json topic's {what} must be UTF-8") from None
    if "\x00" in text:
        raise InvalidRecord(f"record {index} of {where}: a json topic's {what} must not contain NUL")
    return text


def _json_key(key: bytes | None, index: int, where: str) -> str | None:
    return None if key is None else _text(key, "key", index, where)


def _json_value(value: bytes | None, index: int, where: str) -> str:
    if value is None:
        return _NULL
    raw = bytes(value)
    try:
        # orjson takes exactly JSON (RFC 8259), and refuses a number beyond a 64-bit float and
        # a lone surrogate, as a Send's checks do.
        orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        raise InvalidRecord(f"record {index} of {where}: a json topic's value must be JSON: {e}") from None
    if len(raw) > 2 * MAX_DEPTH:
        try:
            check_depth(raw, index, "", 0)
        except InvalidRequest:
            raise InvalidRecord(f"record {index} of {where}: the value nests deeper than {MAX_DEPTH} levels of "
                                "arrays and objects") from None
    return raw.decode()


def _json_headers(headers: KafkaHeaders, index: int, where: str) -> str | None:
    if not headers:
        return None
    texts: dict[str, str] = {}
    for name, data in headers:
        if name in texts:
            raise InvalidRecord(f"record {index} of {where}: a json topic's headers are an object: {name!r} is repeated")
        if data is None:
            raise InvalidRecord(f"record {index} of {where}: a json topic's header {name!r} must have a value")
        if "\x00" in name:
            raise InvalidRecord(f"record {index} of {where}: a json topic's header names must not contain NUL")
        texts[name] = _text(data, f"header {name!r}", index, where)
    return orjson.dumps(texts).decode()


def to_kafka(key: str | bytes | None, value: str | bytes | None,
             headers: str | None) -> tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]:
    """A stored record as Kafka's key, value and headers (the Kafka door's Fetch,
    app.kafka.records): a bytes topic's exactly as stored; a JSON topic's as the UTF-8 of its
    texts (its JSON null value too: the 4 bytes `null`, as the door documents), its headers in
    the object's order."""
    key_bytes = key.encode() if type(key) is str else key  # type: ignore[union-attr]
    value_bytes = value.encode() if type(value) is str else value
    if headers is None:
        return key_bytes, value_bytes, []  # type: ignore[return-value]
    parsed = orjson.loads(headers)
    if type(parsed) is dict:
        return key_bytes, value_bytes, [(n, t.encode()) for n, t in parsed.items()]  # type: ignore[return-value]
    return key_bytes, value_bytes, [  # type: ignore[return-value]
        (h["name"], None if h["value"] is None else base64.b64decode(h["value"])) for h in parsed]


def kafka_batch(topic: str, partition: int, keys: Sequence[bytes | None], values: Sequence[bytes | None],
                headers: Sequence[KafkaHeaders], timestamps: Sequence[int], value_format: ValueFormat, *,
                base_sequence: int | None = None, expected_offset: int | None = None) -> SendBatch:
    """A Kafka batch's records, given column by column (key, value, headers and timestamp_ms of
    each), as a SendBatch for a topic of `value_format`: what from_kafka makes of each record.

    The Kafka door calls it once per produced batch. A batch is checked as a whole where a
    check can be (one UTF-8 decode of all its keys, one of all its values, one range check of
    its timestamps); each whole-batch check passes only batches whose every record from_kafka
    takes, so a batch one of them does not pass goes record by record through from_kafka,
    which keeps the one verdict and names the first record it refuses."""
    where = f"{topic}/{partition}"
    batch = SendBatch(topic=topic, partition=partition, records=[], base_sequence=base_sequence,
                      expected_offset=expected_offset, value_format=value_format)
    if value_format is ValueFormat.BYTES:
        columns = _bytes_columns(keys, values, headers, timestamps, where)
    else:
        columns = _json_columns(keys, values, headers, timestamps, where)
    if columns is None:
        out = [from_kafka(k, v, h, ts, value_format, index=i, where=where)
               for i, (k, v, h, ts) in enumerate(zip(keys, values, headers, timestamps, strict=True))]
        return _sized(batch, out, value_format)
    key_texts, value_texts, header_texts, sizes = columns
    batch.records = RecordColumns(key_texts, value_texts, header_texts, timestamps)
    batch.size_bytes, batch.largest_record = sum(sizes), first_largest(sizes)
    return batch


_Columns = tuple[Sequence[Any], Sequence[Any], Sequence[str | None], list[int]]


def _timestamps_in_range(timestamps: Sequence[int]) -> bool:
    return not timestamps or (set(map(type, timestamps)) == {int} and min(timestamps) >= 0
                              and max(timestamps) <= MAX_INT64)


def _header_texts(headers: Sequence[KafkaHeaders], where: str, one: Any) -> list[str | None]:
    """Each record's headers as `one` (from_kafka's own function for the format) stores them;
    most batches have none, which costs one look at the column."""
    if not any(headers):
        return [None] * len(headers)
    return [one(h, i, where) if h else None for i, h in enumerate(headers)]


def _bytes_columns(keys: Sequence[bytes | None], values: Sequence[bytes | None], headers: Sequence[KafkaHeaders],
                   timestamps: Sequence[int], where: str) -> _Columns | None:
    """A bytes topic's columns, or None for a batch to take record by record."""
    if not _timestamps_in_range(timestamps):
        return None
    if set(map(type, keys)) - {bytes, type(None)} or set(map(type, values)) - {bytes, type(None)}:
        return None  # views into the request's buffer: from_kafka copies them
    texts = _header_texts(headers, where, header_list_json)
    return keys, values, texts, record_sizes(keys, values, texts)


def _json_columns(keys: Sequence[bytes | None], values: Sequence[bytes | None], headers: Sequence[KafkaHeaders],
                  timestamps: Sequence[int], where: str) -> _Columns | None:
    """A JSON topic's columns, or None for a batch to take record by record.

    The keys are decoded joined by NUL, which no key may hold and which no UTF-8 sequence can
    span: the join decodes, and splits back into as many pieces, exactly when every key is
    UTF-8 without NUL (_text). The values likewise, once orjson has taken each as JSON (valid
    JSON text holds no NUL byte)."""
    if not _timestamps_in_range(timestamps):
        return None
    key_texts = _joined_texts(keys)
    if key_texts is None:
        return None
    present = values if None not in values else [v for v in values if v is not None]
    try:
        for v in present:
            orjson.loads(v)  # type: ignore[arg-type]
    except (orjson.JSONDecodeError, TypeError):
        return None
    if present and max(map(len, present)) > 2 * MAX_DEPTH:  # type: ignore[arg-type]
        try:
            for i, v in enumerate(present):
                if len(v) > 2 * MAX_DEPTH:  # type: ignore[arg-type]
                    check_depth(bytes(v), i, "", 0)  # type: ignore[arg-type]
        except InvalidRequest:
            return None
    value_texts = _joined_texts(values, _NULL)
    if value_texts is None:
        return None
    texts = _header_texts(headers, where, _json_headers)
    # Sized from the bytes at hand, which are the UTF-8 of the texts stored, rather than by
    # encoding each text again; a null value is stored as the text null.
    stored_values = values if present is values else [_NULL if v is None else v for v in values]
    return key_texts, value_texts, texts, record_sizes(keys, stored_values, texts)


def _joined_texts(column: Sequence[Any], null: str | None = None, *, absent: Any = None) -> list[str | None] | None:
    """Each piece of bytes decoded as UTF-8 (`absent`: `null`), or None if one is not UTF-8 or
    holds NUL.

    Decoded joined by NUL, which no UTF-8 sequence can span: a join decodes, and splits back
    into as many pieces, exactly when every piece is UTF-8 without NUL. One call a chunk of
    about JOIN_CHUNK_BYTES (chunk_bounds) rather than one for the whole column: a single
    character outside the Basic Multilingual Plane makes a decoded string 4 bytes a character,
    and a 32 MB Send's values joined in one string took 128 MB for a moment; the pieces split off
    keep each its own width (docs/benchmarks.md, 2026-11-30)."""
    nulls = absent in column
    present = [b for b in column if b is not absent] if nulls else column
    texts: list[str] = []
    try:
        for start, stop in chunk_bounds(map(len, present), JOIN_CHUNK_BYTES):
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


# The bytes of values _joined_texts decodes in one call: small enough that the decoded string
# stays a few MB at 4 bytes a character, large enough that a chunk's call costs nothing beside
# its records' (a 1,000-record Send of ~100-byte values is one chunk).
JOIN_CHUNK_BYTES = 1 << 20


def chunk_bounds(lengths: Iterable[int], limit: int) -> list[tuple[int, int]]:
    """(start, stop) of each run of consecutive items, in order and covering them all, whose
    lengths sum to at most `limit`, or of one item longer than `limit` on its own: a column cut
    into pieces to process one at a time, so that what a piece makes stays bounded."""
    ends = list(accumulate(lengths))
    if not ends or ends[-1] <= limit:
        return [(0, len(ends))] if ends else []
    bounds: list[tuple[int, int]] = []
    start, base = 0, 0
    while start < len(ends):
        stop = max(bisect_right(ends, base + limit, start), start + 1)
        bounds.append((start, stop))
        start, base = stop, ends[stop - 1]
    return bounds
