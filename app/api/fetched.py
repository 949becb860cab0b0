"""How fetched records are written in every answer that carries them (a Fetch, a
multi-partition Fetch, the stream's events): one definition.

Values and headers are stored as JSON text and spliced in unparsed (orjson.Fragment): a fetch
of thousands of records costs no JSON decode and re-encode.
"""

from __future__ import annotations

from typing import Any

import orjson

from app.domain.types import IsolationLevel
from app.storage.log import FetchResult, StoredRecord

_NULL = orjson.Fragment(b"null")


def records_json(records: list[StoredRecord], isolation: IsolationLevel) -> list[dict[str, Any]]:
    out = [
        {
            "offset": r.offset,
            "commit_position": r.commit_position,
            "timestamp_ms": r.timestamp_ms,
            "key": r.key,
            "value": _NULL if r.value is None else orjson.Fragment(r.value),
            "headers": None if r.headers is None else orjson.Fragment(r.headers),
            "producer_id": r.producer_id,
            "producer_epoch": r.producer_epoch,
            "sequence": r.sequence,
            "transactional": r.transactional,
        }
        for r in records
    ]
    if isolation is IsolationLevel.READ_UNCOMMITTED:
        for fields, r in zip(out, records, strict=True):
            fields["state"] = r.state.value  # type: ignore[union-attr]
    return out


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
