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
  a 3-digit exponent or 309 digits in a row; only a text with one of those (or text that looks
  like one: a UUID often holds "e123") is parsed, by orjson, which refuses exactly those numbers;
- a value nests at most MAX_DEPTH levels, so that any JSON parser reads a Fetch back (Python's
  own gives up at about 1,000 levels, counting the response's own). Only a value longer than
  2 * MAX_DEPTH bytes with more brackets than MAX_DEPTH can be that deep;
- at most OUTBOX_MAX_RECORDS_PER_REQUEST records in one Send.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import orjson

from app.domain.errors import InvalidRequest, RecordListTooLarge
from app.domain.types import MAX_INT32, MAX_INT64

MAX_DEPTH = 254

_NULL = "null"
# Digits -> "0", e/E -> "e", everything else -> " ", and '+'/'-' deleted: "1e+400" reads
# "0e000", so a 3-digit exponent, or a run of 309 digits, is a substring search over the text
# (ten times faster than a regular expression).
_SHAPES = bytes(0x30 if 0x30 <= i <= 0x39 else 0x65 if i in (0x45, 0x65) else 0x20 for i in range(256))
_SIGNS = b"+-"
_LONG_EXPONENT = b"e000"
_LONG_RUN = b"0" * 309  # 10**308 is within a float; 309 digits before a point may not be
_NOT_BRACKETS = bytes(i for i in range(256) if i not in b"[]{}")
# One pass removes the innermost pairs of either kind at once: exactly one level everywhere.
_INNERMOST = re.compile(rb"\[\]|\{\}")
# A topic's name: Kafka's length, and nothing a URL path or a log line would misread.
_TOPIC_NAME = re.compile(r"[^/\x00-\x1f\x7f]{1,249}")


@dataclass(slots=True)
class RecordToAppend:
    key: str | None
    value: str | None  # JSON text
    headers: str | None  # JSON text of an object, or None
    timestamp_ms: int


@dataclass(slots=True)
class SendBatch:
    topic: str
    partition: int
    records: list[RecordToAppend]
    base_sequence: int | None = None
    expected_offset: int | None = None
    # The records' bytes (app.domain.log_cleaning.record_size), and the largest record's
    # (its index, its bytes); computed by the log when not given. batch_of gives both,
    # counted while it builds the records.
    size_bytes: int | None = None
    largest_record: tuple[int, int] | None = None


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
    if _LONG_EXPONENT in shapes or _LONG_RUN in shapes:
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


def batch_of(topic: str, partition: int, records: Iterable[Any], now_ms: int, *, no_value: Any = None,
             base_sequence: int | None = None, expected_offset: int | None = None) -> SendBatch:
    """The batch of `records`, each with `key`, `value` (UTF-8 JSON text as bytes, or
    `no_value`: null), `headers` (a dict of strings, or None) and `timestamp_ms` (None: now),
    checked for depth (the other checks are the caller's, made once over all its text), with
    the records' bytes (app.domain.log_cleaning.record_size, summed: counted here from the
    bytes at hand rather than by encoding each text again) and the largest record's (its
    index, its bytes), which the topic's max_message_bytes is checked against.

    One loop with its names bound locally: it runs once per record of every Send."""
    out: list[RecordToAppend] = []
    append, dumps = out.append, orjson.dumps
    size = largest = largest_at = 0
    for r in records:
        raw, key, headers, timestamp_ms = r.value, r.key, r.headers, r.timestamp_ms
        before = size
        if raw is no_value:
            value = _NULL
            size += len(_NULL)
        else:
            if len(raw) > 2 * MAX_DEPTH:
                check_depth(bytes(raw), len(out), topic, partition)
            value = str(raw, "utf-8")
            size += len(raw)
        if key is not None:
            size += len(key) if key.isascii() else len(key.encode())
        if headers is not None:
            header_bytes = dumps(headers)
            size += len(header_bytes)
            headers = header_bytes.decode()
        if size - before > largest:
            largest, largest_at = size - before, len(out)
        append(RecordToAppend(key, value, headers, now_ms if timestamp_ms is None else timestamp_ms))
    return SendBatch(topic=topic, partition=partition, records=out, base_sequence=base_sequence,
                     expected_offset=expected_offset, size_bytes=size, largest_record=(largest_at, largest))
