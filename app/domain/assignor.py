"""Kafka's range assignor: per topic, partitions split into contiguous ranges over the members
subscribed to it, in member_id order; the first members take one more when it does not
divide evenly. Deterministic, so every process computes the same assignment."""

from __future__ import annotations

from collections.abc import Mapping


def range_assign(
    subscriptions: Mapping[str, list[str]], partition_counts: Mapping[str, int]
) -> dict[str, list[tuple[str, int]]]:
    """member_id → sorted [(topic, partition)] for every member in `subscriptions`."""
    assignment: dict[str, list[tuple[str, int]]] = {m: [] for m in subscriptions}
    topics = sorted({t for ts in subscriptions.values() for t in ts if t in partition_counts})
    for topic in topics:
        members = sorted(m for m, ts in subscriptions.items() if topic in ts)
        count = partition_counts[topic]
        per, extra = divmod(count, len(members))
        start = 0
        for i, member in enumerate(members):
            n = per + (1 if i < extra else 0)
            assignment[member].extend((topic, p) for p in range(start, start + n))
            start += n
    return {m: sorted(parts) for m, parts in assignment.items()}
