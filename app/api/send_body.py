"""The Send's decoder: the body, checked once, as the service's SendBatches.

msgspec decodes the body into app.api.schemas.records.SendRequest (app.api.json_body: the
content type, UTF-8, the JSON syntax and the schema), keeping each record's value as the JSON
text sent (`msgspec.Raw`); app.domain.records builds the batches and makes the checks that
define a valid record. Each check that looks at text runs once over the whole body, after a
cheap search, so that an ordinary Send pays a few microseconds for it. In JSON a NUL can only
be the escape \\u0000, so only a body holding that escape is looked through for one, and
refused as the schema's 422 (the pattern the schema states for keys and headers). The search
for that escape looks for a backslash first: a body without escapes, the usual Send, is
passed over at memchr's speed, where the escape's own search compared at every digit 0 (55 µs
of a 1,000-record Send of run.py's records, docs/benchmarks.md, 2026-12-01).
"""

from __future__ import annotations

from dataclasses import dataclass

import msgspec
from fastapi import Request

from app.api.json_body import JsonBody, decode, schema_mismatch
from app.api.schemas.records import BatchIn, SendRequest
from app.api.schemas.transactions import CommitTransactionRequest
from app.domain.records import SendBatch, batch_of, check_finite_numbers, check_record_count

_NUL = b"\\u0000"


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
        check_record_count(sum(len(b.records) for b in send.batches), services.settings.max_records_per_request)
        return to_domain(send, body, services.clock())


@dataclass(frozen=True, slots=True)
class DecodedCommit:
    request: CommitTransactionRequest
    batches: list[SendBatch]  # the transaction's last batches, carried by the Commit; usually none


class CommitBody(JsonBody[DecodedCommit]):
    """The Commit's body dependency: its batches, if it carries any, checked as a Send's."""

    def __init__(self) -> None:
        super().__init__(CommitTransactionRequest)  # type: ignore[arg-type]

    def decode_body(self, request: Request, body: bytes) -> DecodedCommit:
        commit: CommitTransactionRequest = decode(self._decoder, body)
        if not commit.batches:
            return DecodedCommit(commit, [])
        services = request.app.state.services
        check_record_count(sum(len(b.records) for b in commit.batches), services.settings.max_records_per_request)
        return DecodedCommit(commit, _batches(commit.batches, body, services.clock()))


def to_domain(send: SendRequest, body: bytes, now_ms: int) -> DecodedSend:
    return DecodedSend(_batches(send.batches, body, now_ms), send.producer_id, send.producer_epoch,
                       send.transactional_id)


def _batches(batches: list[BatchIn], body: bytes, now_ms: int) -> list[SendBatch]:
    if b"\\" in body and _NUL in body:
        _refuse_nul(batches)
    check_finite_numbers(body)
    return [batch_of(b.topic, b.partition, b.records, now_ms, no_value=msgspec.UNSET,
                     base_sequence=b.base_sequence, expected_offset=b.expected_offset)
            for b in batches]


def _refuse_nul(batches: list[BatchIn]) -> None:
    for i, b in enumerate(batches):
        for j, r in enumerate(b.records):
            where_ = ("body", "batches", i, "records", j)
            if type(r.key) is str and "\x00" in r.key:
                raise _nul_refusal((*where_, "key"))
            # A bytes topic's typed key and header list hold any bytes (base64, JSON escapes).
            for name, text in (r.headers.items() if type(r.headers) is dict else ()):
                if "\x00" in name or "\x00" in text:
                    raise _nul_refusal((*where_, "headers", name))


def _nul_refusal(loc: tuple[str | int, ...]) -> Exception:
    return schema_mismatch("must not contain NUL (U+0000)", loc)

