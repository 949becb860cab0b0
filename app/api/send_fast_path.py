"""The Send body's fast path: decoded by msgspec, each record's value kept as the JSON text
the client sent.

Why: the full path parses the body into Python objects (orjson), validates them into new ones
(pydantic's SendRequest) and writes every value back to JSON text for storage. For a Send of
1,000 records that object churn was the largest cost left in the service: with this path,
plain produce ran 1.28x as fast on PostgreSQL (the service before and after taking turns on
one database; docs/benchmarks.md, session 6). msgspec checks the same schema while it
parses, and `msgspec.Raw` keeps a value as the bytes it arrived as, so no value is ever built
as Python objects.

The full path (StrictJSONRoute's parse and pydantic's SendRequest, which also documents the
body in openapi.yaml) stays the definition of a valid Send. This path takes a body only when
it is sure the full path would take it with the same result, and returns None otherwise:
then the full path runs and answers, refusals included, so every error a client sees comes
from one place. It gives way:

- when the body is not UTF-8, or msgspec refuses it or any field (wrong type, range, length,
  unknown field, nesting past msgspec's own limit);
- when a number in the body is an integer outside -2**63 … 2**64-1 (which the full path
  refuses), a float with a 3-digit exponent (which may overflow) or, to keep the rule
  simple, with 19 or more digits before its point. Text inside strings does not count: a
  key that is a UUID often looks like a number ("…9e12-4…"). A body with a 19-digit run
  that may nest deeper than 64 levels leaves too (_JSON_MODULE_SAFE_DEPTH);
- when the body holds a NUL (the schema's Text refuses it in keys, headers and ids; in JSON it
  can only be the escape backslash-u0000), or a topic or transactional_id holds '/' or a
  control character (IdText); lone surrogates msgspec refuses itself;
- when a value holds more '[' and '{' than the 254 levels orjson writes back (the full
  path's limit), unless orjson does read and write it.

The one difference it makes is in stored text, not in meaning: a value is stored as sent
(whitespace, escapes and number spelling included) rather than re-serialised by orjson.
tests/unit/test_send_fast_path.py holds the two paths to the same batches.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Annotated

import msgspec
import orjson
from msgspec import Meta

from app.api.schemas.common import valid_id
from app.api.strict_json import LONG_DIGIT_RUN
from app.domain.types import MAX_INT32, MAX_INT64, MAX_PRODUCER_EPOCH
from app.services.log_service import SendBatch
from app.storage.log import RecordToAppend

_NULL = msgspec.Raw(b"null")
Int32 = Annotated[int, Meta(ge=0, le=MAX_INT32)]
Int64 = Annotated[int, Meta(ge=0, le=MAX_INT64)]


class _Record(msgspec.Struct, forbid_unknown_fields=True):
    key: str | None = None
    value: msgspec.Raw = _NULL
    headers: dict[str, str] | None = None
    timestamp_ms: Int64 | None = None


class _Batch(msgspec.Struct, forbid_unknown_fields=True):
    topic: Annotated[str, Meta(min_length=1, max_length=249)]
    partition: Int32
    records: Annotated[list[_Record], Meta(min_length=1)]
    base_sequence: Int32 | None = None
    expected_offset: Int64 | None = None


class _Send(msgspec.Struct, forbid_unknown_fields=True):
    batches: Annotated[list[_Batch], Meta(min_length=1)]
    transactional_id: Annotated[str, Meta(min_length=1, max_length=255)] | None = None
    producer_id: Int64 | None = None
    producer_epoch: Annotated[int, Meta(ge=0, le=MAX_PRODUCER_EPOCH)] | None = None


_decoder = msgspec.json.Decoder(_Send)

# Digits -> "0", e/E -> "e", '+' and '-' deleted (_SIGNS), everything else -> " ": a run of
# 19 digits or a 3-digit exponent ("1e+400" -> "0e000", while "1e-05" -> "0e00" is not one)
# is then a substring search over the body, ten times faster than a regular expression. Only
# a first, cheap sieve: strings are taken out before a match counts (_numbers_need_full_path).
_SHAPES = bytes(
    0x30 if 0x30 <= i <= 0x39 else 0x65 if i in (0x45, 0x65) else 0x20 for i in range(256)
)
_SIGNS = b"+-"
_LONG_EXPONENT = b"e000"
# The numbers outside strings, read again more closely: digits -> "0", e/E -> "e", '.' kept,
# '-' and '+' -> "-", everything else -> " ". A 3-digit exponent shows as e000 or e-000. A run
# of 19 or more digits follows ' ' (structure), '-' (a sign), '.' (a fraction) or 'e' (an
# exponent, refused already); the two common kinds, both safe, are a fraction and a positive
# integer of exactly 19 digits (below 10**19 < 2**64), and any other run shows as one of
# _UNCOMMON_RUNS: byte searches, since a regular expression over the body would cost more
# than the full path saves.
_RUN_SHAPES = bytes(
    0x30 if 0x30 <= i <= 0x39 else 0x65 if i in (0x45, 0x65) else 0x2E if i == 0x2E
    else 0x2D if i in (0x2B, 0x2D) else 0x20
    for i in range(256)
)
_LONG_SIGNED_EXPONENT = b"e-000"
_UNCOMMON_RUNS = (
    b"-" + LONG_DIGIT_RUN,  # negative
    b" " + LONG_DIGIT_RUN + b"0",  # 20 digits or more
    b" " + LONG_DIGIT_RUN + b".",  # before a float's point
    b" " + LONG_DIGIT_RUN + b"e",
)
_DIGIT_RUN = re.compile(rb"[0-9]{19,}")
# Where a body holds a run of 19 digits, strings included, the full path parses it with the
# json module (app.api.strict_json), whose nesting limit is Python's recursion limit less the
# stack in use: some 950 levels, depending on the caller. The values this path keeps nest at
# most 254 deep (_records), but a value that a repeated key replaced is never looked at, so
# such a body goes to the full path if it may nest deeper than this (found in review).
_JSON_MODULE_SAFE_DEPTH = 64
_NOT_BRACKETS = bytes(i for i in range(256) if i not in b"[]{}")
# Any NUL sends the body down the full path; JSON can only carry it as the escape \u0000.
_NUL = b"\\u0000"
# orjson writes at most 254 levels; a value cannot nest deeper than it has '[' and '{', nor
# than half its length.
_MAX_DEPTH = 254


@dataclass(frozen=True, slots=True)
class DecodedSend:
    batches: list[SendBatch]
    producer_id: int | None
    producer_epoch: int | None
    transactional_id: str | None


def decode_send(body: bytes, now_ms: int) -> DecodedSend | None:
    """The Send in `body`, or None when the full path must decide."""
    if _NUL in body:
        return None
    try:
        # msgspec does not check the UTF-8 inside a Raw value, and each value is decoded
        # below, but a value that a repeated key replaced never is: so the whole body here.
        if not body.isascii():
            body.decode("utf-8")
        send = _decoder.decode(body)
        # After the decode, which has checked the body's syntax (_numbers_outside_strings
        # relies on it); numbers in a value that a repeated key replaced count too.
        if _numbers_need_full_path(body):
            return None
        if send.transactional_id is not None:
            valid_id(send.transactional_id)
        batches = [
            SendBatch(
                topic=valid_id(b.topic),
                partition=b.partition,
                base_sequence=b.base_sequence,
                expected_offset=b.expected_offset,
                records=_records(b.records, now_ms),
            )
            for b in send.batches
        ]
    except (msgspec.ValidationError, msgspec.DecodeError, ValueError, orjson.JSONEncodeError,
            RecursionError):
        # ValueError: an IdText check, bytes that are not UTF-8 (UnicodeDecodeError) or a value
        # orjson cannot read (JSONDecodeError); JSONEncodeError: nor write back;
        # RecursionError: msgspec's own limit, some 1,000 levels deep.
        return None
    return DecodedSend(batches, send.producer_id, send.producer_epoch, send.transactional_id)


def _numbers_need_full_path(body: bytes) -> bool:
    """Whether a number in the body (valid JSON) is one the full path must judge: a 3-digit
    exponent, or a run of 19 or more digits other than an integer the full path takes; or
    whether the full path, parsing a body with such a run by the json module, might fail on
    its nesting (_JSON_MODULE_SAFE_DEPTH).

    The search over the whole body is cheap and almost always finds nothing. When it does
    find one, it looks again with the strings taken out, since text matches too: the keys of
    a Send of 1,000 records keyed by UUIDs nearly always hold an 'e' and three digits. A
    19-digit integer is common in its own right: a timestamp in nanoseconds."""
    shapes = body.translate(_SHAPES, _SIGNS)
    long_run = LONG_DIGIT_RUN in shapes
    if not long_run and _LONG_EXPONENT not in shapes:
        return False
    outside = _numbers_outside_strings(body)
    if long_run and _nests_deeper_than(outside, _JSON_MODULE_SAFE_DEPTH):
        return True
    shapes = b" " + outside.translate(_RUN_SHAPES) + b" "
    if _LONG_EXPONENT in shapes or _LONG_SIGNED_EXPONENT in shapes:
        return True
    if LONG_DIGIT_RUN not in shapes:
        return False
    if not any(pattern in shapes for pattern in _UNCOMMON_RUNS):
        return False  # every run is of a common safe kind
    return not all(_is_safe_run(outside, run) for run in _DIGIT_RUN.finditer(outside))


def _nests_deeper_than(outside: bytes, depth: int) -> bool:
    """Whether the body's brackets (strings taken out) may nest deeper than `depth` levels.
    Each pass removes the innermost pairs, one level or two ('{[]}' goes at once), so what
    is left after `depth` passes nests deeper than `depth`, and an empty result means at most
    twice that. A Send empties in a few passes over a few kB."""
    skeleton = outside.translate(None, _NOT_BRACKETS)
    for _ in range(depth):
        if not skeleton:
            return False
        skeleton = skeleton.replace(b"[]", b"").replace(b"{}", b"")
    return bool(skeleton)


def _is_safe_run(text: bytes, run: re.Match[bytes]) -> bool:
    """Whether the full path takes a number whose run of 19 or more digits this is: a float's
    fraction (which cannot overflow), or a whole integer within -2**63 … 2**64-1 (the json
    module's int, written back by orjson). A float's digits before its point may overflow:
    the full path decides those."""
    start, end = run.span()
    before, after = text[start - 1:start], text[end:end + 1]
    if before == b".":
        return True
    if after in (b".", b"e", b"E") or end - start > 20:
        return False
    value = -int(run[0]) if before == b"-" else int(run[0])
    return -(2**63) <= value <= 2**64 - 1


def _numbers_outside_strings(body: bytes) -> bytes:
    """The body with the contents of its strings removed: what is left is structure, literals
    and numbers. Valid JSON only.

    Outside strings JSON has no backslash, so every backslash is inside a string, where it
    starts an escape of two characters (or six: the 'u' escape's four hex digits are not
    quotes). Removing the escaped backslashes first (pairs from the left, as JSON reads
    them), then the escaped quotes, leaves only quotes that open and close strings; splitting
    on them, the even pieces are outside. Two searches and a split (about 0.4 ms for a Send
    of 150 kB) instead of a regular expression (about 1.5 ms)."""
    if b"\\" in body:
        body = body.replace(b"\\\\", b"").replace(b'\\"', b"")
    return b"".join(body.split(b'"')[0::2])


def _records(records: list[_Record], now_ms: int) -> list[RecordToAppend]:
    """One loop with its names bound locally: it runs once per record of every Send."""
    out = []
    append, dumps, loads = out.append, orjson.dumps, orjson.loads
    for r in records:
        raw, headers, timestamp_ms = r.value, r.headers, r.timestamp_ms
        if len(raw) > 2 * _MAX_DEPTH:
            value = bytes(raw)
            if value.count(b"[") + value.count(b"{") > _MAX_DEPTH:
                dumps(loads(value))  # raises where the full path would refuse the value
        append(
            RecordToAppend(
                r.key,
                str(raw, "utf-8"),  # the body was checked as UTF-8 in decode_send
                None if headers is None else dumps(headers).decode(),
                now_ms if timestamp_ms is None else timestamp_ms,
            )
        )
    return out
