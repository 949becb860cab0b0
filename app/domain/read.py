"""What a reader is given: the records of a fetch and the bounds of the log it read."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from app.domain.types import RecordState



class StoredRecord(NamedTuple):
    """A record as a fetch returns it. A tuple, not a frozen dataclass: a fetch builds one per
    record, and a frozen dataclass's __init__ cost ten times as much (a setattr per field)."""

    offset: int
    commit_position: int | None
    timestamp_ms: int
    key: str | None
    value: str | None
    headers: str | None
    producer_id: int | None
    producer_epoch: int | None
    sequence: int | None
    transactional: bool
    state: RecordState | None = None  # read_uncommitted only (read_committed returns committed ones)


@dataclass(slots=True)
class FetchResult:
    records: list[StoredRecord] = field(default_factory=list)
    next_offset: int = 0
    high_watermark: int = 0
    last_stable_offset: int = 0
    log_start_offset: int = 0
