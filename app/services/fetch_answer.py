"""A Fetch's request and answer: its byte limits, each partition asked for and what it got, and
the read transaction a large answer keeps open while it is sent (LogService.fetch_partitions
plans it; the Fetch routes, the long poll and the Kafka door send it)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field

from app.domain.errors import InvalidRequest, OutboxError
from app.domain.read import FetchResult, StoredRecord
from app.domain.topic import Topic
from app.settings import Limit, Settings
from app.storage import read
from app.storage.engine import Database


def check_fetch_bytes(settings: Settings, max_bytes: int | None,
                      max_partition_bytes: int | None = None) -> tuple[int, int]:
    """A Fetch's byte limits (Kafka's fetch.max.bytes and max.partition.fetch.bytes): the
    service's defaults when not given, INVALID_REQUEST when over the service's maximum."""
    for name, value, limit in (("max_bytes", max_bytes, settings.fetch_bytes_limit),
                               ("max_partition_bytes", max_partition_bytes, settings.fetch_partition_bytes_limit)):
        if value is not None and value not in limit:
            raise InvalidRequest(f"{name} must be in {limit}; got {value}")
    return (settings.fetch_max_bytes_default if max_bytes is None else max_bytes,
            settings.fetch_max_partition_bytes_default if max_partition_bytes is None else max_partition_bytes)


def check_partition_fetch_bytes(settings: Settings, max_bytes: int | None) -> int:
    """The byte limit of a one-partition Fetch (the records' Fetch, the stream): both Kafka's
    limits at once, the request's and the partition's, so their smaller default and maximum."""
    limit = Limit(1, min(settings.fetch_max_bytes_limit, settings.fetch_max_partition_bytes_limit),
                  "OUTBOX_FETCH_MAX_BYTES_LIMIT, OUTBOX_FETCH_MAX_PARTITION_BYTES_LIMIT")
    if max_bytes is None:
        return min(settings.fetch_max_bytes_default, settings.fetch_max_partition_bytes_default)
    if max_bytes not in limit:
        raise InvalidRequest(f"max_bytes must be in {limit}; got {max_bytes}")
    return max_bytes


# A Fetch answer larger than this (records' bytes, and RECORD_JSON_BYTES a record for the rest of
# its JSON) is sent as it is read, CHUNK_BYTES of records at a time, rather than built whole: the
# process then holds a chunk of it, not all of it, whatever max_bytes allows (or the one commit
# point above it that a Fetch always returns).
STREAM_ABOVE_BYTES = 1 << 20
CHUNK_BYTES = 256 << 10
RECORD_JSON_BYTES = 200


class HeldRead:
    """A read transaction (one snapshot) kept open after a Fetch's plan, so that its records are
    read in that snapshot, a chunk at a time, while the answer is sent. It holds a pooled
    connection until close(), which is idempotent; the caller closes it whatever happens."""

    def __init__(self, db: Database) -> None:
        self._stack = ExitStack()
        self.conn = self._stack.enter_context(db.read())

    def close(self) -> None:
        self._stack.close()


@dataclass(slots=True)
class PartitionFetch:
    """One partition of a Fetch: where to read from, and what came back (its plans: two when
    it had a second share of the record limit)."""

    topic: str
    partition: int
    offset: int
    topic_id: int | None = None
    result: FetchResult | None = None
    error: OutboxError | None = None
    found: Topic | None = None
    plans: list[read.FetchPlan] = field(default_factory=list)

    @property
    def planned_records(self) -> int:
        return sum(p.record_count for p in self.plans)

    @property
    def planned_bytes(self) -> int:
        return sum(p.size_bytes for p in self.plans)


@dataclass(slots=True)
class FetchAnswer:
    """A Fetch's partitions. Their records are in each result already when `held` is None;
    otherwise `chunks` reads them from the held snapshot, and close() must end it."""

    partitions: list[PartitionFetch]
    held: HeldRead | None = None

    def chunks(self, w: PartitionFetch) -> Iterator[list[StoredRecord]]:
        if self.held is None:
            if w.result is not None and w.result.records:
                yield w.result.records
            return
        for plan in w.plans:
            yield from read.read_planned(self.held.conn, plan, chunk_bytes=CHUNK_BYTES)

    def close(self) -> None:
        if self.held is not None:
            self.held.close()
