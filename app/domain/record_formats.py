"""A topic's value format (app.domain.types.ValueFormat, docs/ARCHITECTURE.md#record-formats):
which records a topic holds and how. A JSON topic's record is app.domain.records' (text keys,
JSON values, headers an object of strings); a bytes topic's key and value are any bytes and its
headers an ordered list of (name, bytes or null). `for_topic` turns a batch built from a Send's
JSON (app.domain.records.batch_of) into its topic's format (once per batch; nothing per record
for a JSON topic), and every refusal of a record its topic's format cannot hold is
INVALID_RECORD, whichever door it came through. `typed_json` and `header_list_json` are how the
HTTP API shows a bytes topic's key, value and headers.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence
from typing import Any

import orjson

from app.domain.errors import InvalidRecord
from app.domain.log_cleaning import record_sizes
from app.domain.records import NULL_TEXT, RecordToAppend, SendBatch, first_largest
from app.domain.types import ValueFormat

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
    return sized_batch(batch, records, ValueFormat.BYTES)


def sized_batch(batch: SendBatch, records: list[RecordToAppend], value_format: ValueFormat) -> SendBatch:
    """`batch` holding `records` in `value_format` instead, sized from them (for_topic's, and
    kafka_batch's for a batch it took record by record)."""
    sizes = record_sizes([r.key for r in records], [r.value for r in records], [r.headers for r in records])
    return SendBatch(topic=batch.topic, partition=batch.partition, records=records,
                     base_sequence=batch.base_sequence, expected_offset=batch.expected_offset,
                     size_bytes=sum(sizes), largest_record=first_largest(sizes), value_format=value_format,
                     http_shapes=batch.http_shapes)


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
    if value_json is None or value_json == NULL_TEXT:
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
