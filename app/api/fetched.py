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
    # Unpacked by position, not read by name: one dictionary per record is most of what a
    # fetch costs this process beyond the database driver.
    fragment = orjson.Fragment
    out = [
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
