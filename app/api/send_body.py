"""The one decoder of a Send: the body, checked once, as the service's SendBatches.

msgspec decodes the body into app.api.schemas.records.SendRequest (app.api.json_body: the
content type, UTF-8, the JSON syntax and the schema), keeping each record's value as the JSON
text sent (`msgspec.Raw`). So a Send of 1,000 records builds no Python objects for its
values: it costs a third of what parsing the values and writing them back as JSON did, and a
Fetch returns each value exactly as it was sent (docs/benchmarks.md, session 9).

What msgspec does not check, this module does, each with a cheap search over the whole body
first, so that an ordinary Send pays a few microseconds for it:

- keys and header names and values hold no NUL (PostgreSQL cannot store it in text). In JSON
  a NUL can only be the escape \\u0000, so only a body holding that escape is looked through.
- every number in a value is finite as a 64-bit float. JSON itself sets no bound, but 1e400 or
  a 400-digit integer reads as infinity in most parsers, and some (orjson) refuse it outright,
  which would make every Fetch of the partition unreadable to their users. Such a number has
  a 3-digit exponent or 309 digits in a row; only a body with one of those (or text that looks
  like one: a UUID often holds "e123") is parsed once more, by orjson, which refuses exactly
  those numbers.
- a value nests at most MAX_DEPTH levels, so that any JSON parser reads a Fetch back (Python's
  own gives up at about 1,000 levels, counting the response's own). Only a value longer than
  2 * MAX_DEPTH bytes with more brackets than MAX_DEPTH can be that deep.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import msgspec
import orjson
from fastapi import Request

from app.api.json_body import MAX_DEPTH, JsonBody, decode, schema_mismatch
from app.api.schemas.records import RecordIn, SendRequest
from app.domain.errors import InvalidRequest
from app.services.log_service import RecordToAppend, SendBatch, check_record_count

_NUL = b"\\u0000"
_NULL = "null"
# Digits -> "0", e/E -> "e", everything else -> " ", and '+'/'-' deleted: "1e+400" reads
# "0e000", so a 3-digit exponent, or a run of 309 digits, is a substring search over the body
# (ten times faster than a regular expression).
_SHAPES = bytes(0x30 if 0x30 <= i <= 0x39 else 0x65 if i in (0x45, 0x65) else 0x20 for i in range(256))
_SIGNS = b"+-"
_LONG_EXPONENT = b"e000"
_LONG_RUN = b"0" * 309  # 10**308 is within a float; 309 digits before a point may not be
_NOT_BRACKETS = bytes(i for i in range(256) if i not in b"[]{}")
# One pass removes the innermost pairs of either kind at once: exactly one level everywhere.
_INNERMOST = re.compile(rb"\[\]|\{\}")


@dataclass(frozen=True, slots=True)
class DecodedSend:
    batches: list[SendBatch]
    producer_id: int | None
    producer_epoch: int | None
    transactional_id: str | None


class SendBody(JsonBody[DecodedSend]):
    """The Send's body dependency: decoded as SendRequest, answered as a DecodedSend."""

    def __init__(self) -> None:
        super().__init__(SendRequest)  # type: ignore[arg-type]

    def decode_body(self, request: Request, body: bytes) -> DecodedSend:
        services = request.app.state.services
        send: SendRequest = decode(self._decoder, body)
        check_record_count(sum(len(b.records) for b in send.batches), services.settings)
        return to_domain(send, body, services.clock())


def to_domain(send: SendRequest, body: bytes, now_ms: int) -> DecodedSend:
    if _NUL in body:
        _refuse_nul(send)
    shapes = body.translate(_SHAPES, _SIGNS)
    if _LONG_EXPONENT in shapes or _LONG_RUN in shapes:
        try:
            orjson.loads(body)
        except orjson.JSONDecodeError as e:
            raise InvalidRequest(f"the body holds JSON that readers cannot parse back: {e}") from None
    batches = []
    for b in send.batches:
        records, size, largest = _records(b.records, now_ms, b.topic, b.partition)
        batches.append(SendBatch(topic=b.topic, partition=b.partition, records=records,
                                 base_sequence=b.base_sequence, expected_offset=b.expected_offset,
                                 size_bytes=size, largest_record=largest))
    return DecodedSend(batches, send.producer_id, send.producer_epoch, send.transactional_id)


def _records(records: list[RecordIn], now_ms: int, topic: str,
             partition: int) -> tuple[list[RecordToAppend], int, tuple[int, int]]:
    """The records to append, their bytes (app.domain.log_cleaning.record_size, summed:
    computed here from the bytes at hand rather than by encoding each text again), and the
    largest record's (its index, its bytes), which the topic's max_message_bytes is checked
    against.

    One loop with its names bound locally: it runs once per record of every Send."""
    out = []
    append, unset, dumps = out.append, msgspec.UNSET, orjson.dumps
    size = largest = largest_at = 0
    for r in records:
        raw, key, headers, timestamp_ms = r.value, r.key, r.headers, r.timestamp_ms
        before = size
        if raw is unset:
            value = _NULL
            size += len(_NULL)
        else:
            if len(raw) > 2 * MAX_DEPTH:
                _check_depth(bytes(raw), len(out), topic, partition)
            value = str(raw, "utf-8")  # the whole body was checked as UTF-8
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
    return out, size, (largest_at, largest)


def _check_depth(value: bytes, index: int, topic: str, partition: int) -> None:
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


def _refuse_nul(send: SendRequest) -> None:
    for i, b in enumerate(send.batches):
        for j, r in enumerate(b.records):
            where_ = ("body", "batches", i, "records", j)
            if r.key is not None and "\x00" in r.key:
                raise _nul_refusal((*where_, "key"))
            for name, text in (r.headers or {}).items():
                if "\x00" in name or "\x00" in text:
                    raise _nul_refusal((*where_, "headers", name))


def _nul_refusal(loc: tuple[str | int, ...]) -> Exception:
    return schema_mismatch("must not contain NUL (U+0000)", loc)

