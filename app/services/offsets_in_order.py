"""A group's committed offsets as a reader of one read order reads them: each of that order as
it is, each of the other order translated or refused (in_read_order), and a door's one refusal
for all of those refused (raise_refused). What GroupService's fetches and a reset into another
order share."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from sqlalchemy import Connection

from app.domain.errors import OutboxError
from app.domain.offsets import ReadOrder, offset_in_order
from app.storage import offsets


@dataclass(frozen=True, slots=True)
class FetchedOffsets:
    """A group's committed offsets as a reader of one order reads them (GroupOffsetService.fetch_with_pending)."""

    committed: list[offsets.CommittedOffset]  # those it may read, in its order
    pending: set[tuple[str, int]]  # (topic, partition) with offsets staged in an unfinished transaction
    refused: dict[tuple[str, int], OutboxError]  # those of the other order it may not read, and why


def in_read_order(conn: Connection, group_id: str, rows: list[offsets.CommittedOffset],
                  wanted: ReadOrder) -> tuple[list[offsets.CommittedOffset], dict[tuple[str, int], OutboxError]]:
    """The committed offsets `rows` as a reader in `wanted` order reads them: each of that order
    as it is, each of the other order as the same number where it means the same there, and
    refused where it does not (app.domain.offsets.offset_in_order, on what lies across the
    offset: offsets.straddle_at). Only an offset of the other order costs a look at the log."""
    kept: list[offsets.CommittedOffset] = []
    refused: dict[tuple[str, int], OutboxError] = {}
    for o in rows:
        if o.read_order is wanted:
            kept.append(o)
            continue
        at = o.committed_offset
        if o.read_order is ReadOrder.OFFSET:
            at = offsets.past_markers(conn, o.topic_id, o.partition, at)  # the same Kafka offset
        straddle = offsets.straddle_at(conn, o.topic_id, o.partition, at)
        refusal = offset_in_order(o.read_order, wanted, straddle, group_id=group_id, topic=o.topic,
                                  partition=o.partition, offset=o.committed_offset)
        if refusal is None:
            kept.append(dataclasses.replace(o, committed_offset=at, read_order=wanted))
        else:
            refused[o.topic, o.partition] = refusal
    return kept, refused


def raise_refused(refused: dict[tuple[str, int], OutboxError]) -> None:
    """One refusal for all of `refused` (in_read_order), for a door that answers a fetch of
    offsets all or nothing: a skip or repeat (INCONSISTENT_GROUP_PROTOCOL) before a wait for a
    transaction's outcome (UNSTABLE_OFFSET_COMMIT, retriable), naming every partition of its
    kind."""
    if not refused:
        return
    worst = sorted(refused.items(), key=lambda kv: (kv[1].retriable, kv[0]))
    first = worst[0][1]
    alike = [key for key, e in worst if type(e) is type(first)]
    more = f" (and {len(alike) - 1} more partition(s) alike)" if len(alike) > 1 else ""
    raise type(first)(first.message + more, partitions=[{"topic": t, "partition": p} for t, p in alike])
