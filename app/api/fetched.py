"""How fetched records are written in every answer that carries them (a Fetch, a
multi-partition Fetch, the stream's events): one definition.

A JSON topic's values and headers are stored as JSON text and spliced in unparsed
(orjson.Fragment): a fetch of thousands of records costs no JSON decode and re-encode. A bytes
topic's keys and values are bytes, shown typed and in base64.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Generator
from typing import Any

import orjson
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from app.domain.record_formats import typed_json
from app.domain.types import IsolationLevel
from app.services.fetch_answer import FetchAnswer, PartitionFetch
from app.services.spool import Spool, SpoolBytes
from app.domain.read import FetchResult, StoredRecord

_NULL = orjson.Fragment(b"null")


def records_json(records: list[StoredRecord], isolation: IsolationLevel) -> list[dict[str, Any]]:
    # Unpacked by position, not read by name: one dictionary per record is most of what a
    # fetch costs this process beyond the database driver. One look per record for bytes: a
    # bytes topic's records are shown typed.
    if any(type(r[4]) is bytes or type(r[3]) is bytes for r in records):
        out = _typed_records(records)
    else:
        out = _json_records(records)
    if isolation is IsolationLevel.READ_UNCOMMITTED:
        for fields, r in zip(out, records, strict=True):
            fields["state"] = r.state.value  # type: ignore[union-attr]
    return out


def _json_records(records: list[StoredRecord]) -> list[dict[str, Any]]:
    """A JSON topic's records: the value's and headers' JSON text spliced in as stored."""
    fragment = orjson.Fragment
    return [
        {
            "offset": offset,
            "commit_position": commit_position,
            "timestamp_ms": timestamp_ms,
            "key": key,
            "value": _NULL if value is None else fragment(value),
            "headers": None if headers is None else fragment(headers),
            "producer_id": producer_id,
            "producer_epoch": producer_epoch,
            "sequence": sequence,
            "transactional": transactional,
        }
        for offset, commit_position, timestamp_ms, key, value, headers, producer_id, producer_epoch, sequence,
        transactional, _ in records
    ]


def _typed_records(records: list[StoredRecord]) -> list[dict[str, Any]]:
    """A bytes topic's records (docs/ARCHITECTURE.md#record-formats): key and value as
    {"type": "BINARY", "data": base64}; the headers' stored JSON text is already the list the
    API shows."""
    fragment = orjson.Fragment
    return [
        {
            "offset": offset,
            "commit_position": commit_position,
            "timestamp_ms": timestamp_ms,
            "key": None if key is None else typed_json(key),
            "value": None if value is None else typed_json(value),  # type: ignore[arg-type]
            "headers": None if headers is None else fragment(headers),
            "producer_id": producer_id,
            "producer_epoch": producer_epoch,
            "sequence": sequence,
            "transactional": transactional,
        }
        for offset, commit_position, timestamp_ms, key, value, headers, producer_id, producer_epoch, sequence,
        transactional, _ in records
    ]


def partition_json(topic: str, partition: int, result: FetchResult, isolation: IsolationLevel) -> dict[str, Any]:
    return {
        "topic": topic,
        "partition": partition,
        "isolation": isolation.value,
        "records": records_json(result.records, isolation),
        "next_offset": result.next_offset,
        "high_watermark": result.high_watermark,
        "last_stable_offset": result.last_stable_offset,
        "log_start_offset": result.log_start_offset,
    }


_EMPTY_RECORDS = b'"records":[]'


def records_bytes(records: list[StoredRecord], isolation: IsolationLevel) -> bytes:
    """The records' JSON without its brackets: one chunk of a streamed "records" array."""
    return orjson.dumps(records_json(records, isolation))[1:-1]


def partition_parts(topic: str, partition: int, result: FetchResult,
                    isolation: IsolationLevel) -> tuple[bytes, bytes]:
    """partition_json's JSON, without records, cut where they go: the bytes before them and
    after them. (No topic name can hold the text cut at.)"""
    head, tail = orjson.dumps(partition_json(topic, partition, FetchResult(
        next_offset=result.next_offset, high_watermark=result.high_watermark,
        last_stable_offset=result.last_stable_offset, log_start_offset=result.log_start_offset), isolation)
    ).split(_EMPTY_RECORDS, 1)
    return head + _EMPTY_RECORDS[:-1], _EMPTY_RECORDS[-1:] + tail


class StreamedAnswer(StreamingResponse):
    """A Fetch's JSON answer read from the snapshot it holds (FetchAnswer.held), a chunk at a
    time, to its end and into a spool (app.services.spool), at the database's pace: the
    snapshot is closed once its records are read, not once they are sent, so a client that
    reads slowly or not at all holds no connection. Sent from the spool as it fills. `parts`
    are JSON bytes and partitions, whose records go there: the same bytes as the answer built
    whole. The spool is deleted once the answer is sent, or the client went away, or anything
    failed."""

    def __init__(self, answer: FetchAnswer, parts: list[bytes | PartitionFetch], isolation: IsolationLevel,
                 spooled: SpoolBytes) -> None:
        self._spool = Spool(_answer_bytes(answer, parts, isolation), answer.close, spooled)
        super().__init__(self._body(self._spool), media_type="application/json")

    @staticmethod
    async def _body(spool: Spool) -> AsyncIterator[bytes]:
        async for _, data in spool.read():
            yield data

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self._spool.close()


def _answer_bytes(answer: FetchAnswer, parts: list[bytes | PartitionFetch],
                  isolation: IsolationLevel) -> Generator[tuple[int, bytes], None, None]:
    """StreamedAnswer's bytes, read and encoded in the spool's thread."""
    for part in parts:
        if isinstance(part, bytes):
            yield 0, part
            continue
        first = True
        for chunk in answer.chunks(part):
            if not chunk:  # a transaction whose records are all gone (compacted)
                continue
            yield 0, records_bytes(chunk, isolation) if first else b"," + records_bytes(chunk, isolation)
            first = False


def partition_stream_parts(topic: str, w: PartitionFetch, isolation: IsolationLevel) -> list[bytes | PartitionFetch]:
    """One partition's answer as StreamedAnswer's parts."""
    assert w.result is not None
    head, tail = partition_parts(topic, w.partition, w.result, isolation)
    return [head, w, tail]
