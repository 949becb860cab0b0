"""A Kafka record as the record model holds it, and back: the Kafka door's way in and out
(app.kafka.records calls them). `from_kafka` (a record) and `kafka_batch` (a whole produced
batch at once) make the RecordToAppend of a topic's value format (app.domain.record_formats),
refusing with INVALID_RECORD what that format cannot hold, by the same rules as a Send's record
(app.domain.records); `to_kafka` turns a stored record back into Kafka's key, value and headers.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from typing import Any

import orjson

from app.domain.errors import InvalidRecord, InvalidRequest, InvalidTimestamp
from app.domain.log_cleaning import record_sizes
from app.domain.record_formats import header_list_json, sized_batch
from app.domain.records import (
    MAX_DEPTH,
    MAX_TIMESTAMP_MS,
    NULL_TEXT,
    RecordColumns,
    RecordToAppend,
    SendBatch,
    check_depth,
    check_timestamp,
    first_largest,
    joined_texts,
    json_value_bytes,
)
from app.domain.types import ValueFormat

KafkaHeaders = Sequence[tuple[str, bytes | None]]


def from_kafka(key: bytes | None, value: bytes | None, headers: KafkaHeaders, timestamp_ms: int,
               value_format: ValueFormat, *, index: int = 0, where: str = "") -> RecordToAppend:
    """A Kafka record (key and value bytes or null, headers in order) as its topic of
    `value_format` stores it, or INVALID_RECORD for what that format cannot hold. A bytes topic
    holds any record. A JSON topic holds what the HTTP API can send it: a UTF-8 key without NUL,
    a value of valid JSON text (null: JSON null, the tombstone), stored as a Send stores it,
    without the white space around it (json_value_bytes), and headers of distinct names whose
    values are UTF-8 without NUL, kept as the object's JSON text. A timestamp a record may not
    have (check_timestamp) is INVALID_TIMESTAMP, as Kafka's broker answers it."""
    try:
        check_timestamp(timestamp_ms, f"record {index} of {where}")
    except InvalidRequest as e:
        raise InvalidTimestamp(e.message, record_indexes=(index,)) from None
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
        return NULL_TEXT
    raw = json_value_bytes(bytes(value))
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
    # http_shapes=False: a Kafka record's JSON value is its own bytes, never the HTTP API's typed
    # {"type": ..., "data": ...}. A batch the door built as JSON for a topic it took for a json
    # topic, but which is now a bytes one (deleted and created again since the door's look), is
    # then refused by for_topic, and the door builds it again for the topic's format; without it,
    # for_topic would read such a value as HTTP's shape and store other bytes than were sent.
    batch = SendBatch(topic=topic, partition=partition, records=[], base_sequence=base_sequence,
                      expected_offset=expected_offset, value_format=value_format, http_shapes=False)
    if value_format is ValueFormat.BYTES:
        columns = _bytes_columns(keys, values, headers, timestamps, where)
    else:
        columns = _json_columns(keys, values, headers, timestamps, where)
    if columns is None:
        out = [from_kafka(k, v, h, ts, value_format, index=i, where=where)
               for i, (k, v, h, ts) in enumerate(zip(keys, values, headers, timestamps, strict=True))]
        return sized_batch(batch, out, value_format)
    key_texts, value_texts, header_texts, sizes = columns
    batch.records = RecordColumns(key_texts, value_texts, header_texts, timestamps)
    batch.size_bytes, batch.largest_record = sum(sizes), first_largest(sizes)
    return batch


_Columns = tuple[Sequence[Any], Sequence[Any], Sequence[str | None], list[int]]


def _timestamps_in_range(timestamps: Sequence[int]) -> bool:
    return not timestamps or (set(map(type, timestamps)) == {int} and min(timestamps) >= 0
                              and max(timestamps) <= MAX_TIMESTAMP_MS)


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
    JSON text holds no NUL byte), each without the white space around it (json_value_bytes:
    the same bytes when it has none)."""
    if not _timestamps_in_range(timestamps):
        return None
    key_texts = joined_texts(keys)
    if key_texts is None:
        return None
    try:
        values = [None if v is None else json_value_bytes(v) for v in values]  # type: ignore[arg-type]
    except (AttributeError, TypeError):  # not bytes: from_kafka copies each
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
    value_texts = joined_texts(values, NULL_TEXT)
    if value_texts is None:
        return None
    texts = _header_texts(headers, where, _json_headers)
    # Sized from the bytes at hand, which are the UTF-8 of the texts stored, rather than by
    # encoding each text again; a null value is stored as the text null.
    stored_values = values if present is values else [NULL_TEXT if v is None else v for v in values]
    return key_texts, value_texts, texts, record_sizes(keys, stored_values, texts)
