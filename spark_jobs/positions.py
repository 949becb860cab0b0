"""Start and end positions of a batch, asked of the service over HTTP.

Positions are read_committed positions: offsets in the log at which commit points sit
(contract guarantee 3). A batch reads the records whose commit_position is in [start, end):

- end: the partitions' log end offsets (`GET /v1/topics/{topic}`, `log_end_offset`), read once,
  on the driver, at job start. Every offset below the log end is committed (guarantee 6), and
  a COMMIT marker below it was written before the snapshot, so a transaction that commits
  after the snapshot has its marker at or beyond `end` and is left out whole, however many of
  its records sit below `end`. Every JDBC partition query carries these ends, so the parallel
  queries (each its own connection and snapshot) read one consistent batch.
- start: the group's committed offsets (`GET /v1/groups/{group}/offsets`), asked with
  require_stable so that offsets pending in an unfinished transaction are waited for, never
  read stale; 0 for a partition the group never committed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from app.client.errors import ClientError
from app.client.http import Session

OFFSET_WAIT_MS = 10_000
OFFSET_DEADLINE_S = 120.0


@dataclass(frozen=True, slots=True)
class PositionRange:
    """The positions [start, end) of one partition."""

    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return max(0, self.end - self.start)


def log_end_offsets(session: Session, topic: str) -> dict[int, int]:
    """partition → log end offset, read now: the batch's end positions."""
    described = session.call("GET", f"/v1/topics/{topic}")
    return {p["partition"]: p["log_end_offset"] for p in described["partitions"]}


def committed_offsets(session: Session, group_id: str, topic: str) -> dict[int, int]:
    """partition → the group's committed offset in `topic` (missing: never committed)."""
    try:
        answer = session.call(
            "GET", f"/v1/groups/{group_id}/offsets",
            params={"topic": topic, "require_stable": "true", "wait_ms": OFFSET_WAIT_MS},
            deadline_s=OFFSET_DEADLINE_S,
        )
    except ClientError as e:
        if e.error_code == "GROUP_ID_NOT_FOUND":
            return {}
        raise
    return {o["partition"]: o["offset"] for o in answer["offsets"] if o["topic"] == topic}


def batch_ranges(
    starts: Mapping[int, int], ends: Mapping[int, int], *, max_positions: int | None = None
) -> list[PositionRange]:
    """One range per partition of `ends`, from its start (0 if absent) to its end, or to
    start + max_positions when that is smaller. Any position is a valid end: the records of a
    transaction share one commit_position, so a range never splits a transaction."""
    out = []
    for partition in sorted(ends):
        start = starts.get(partition, 0)
        end = ends[partition]
        if start > end:
            raise ValueError(f"partition {partition}: start {start} is past the log end {end}")
        if max_positions is not None:
            end = min(end, start + max_positions)
        out.append(PositionRange(partition, start, end))
    return out
