"""Consumer-group offsets as the protocol passes them around."""

from __future__ import annotations

from dataclasses import dataclass

from app.domain.errors import InvalidRequest


@dataclass(frozen=True, slots=True)
class OffsetToStage:
    topic: str
    partition: int
    committed_offset: int
    metadata: str | None


@dataclass(frozen=True, slots=True)
class GroupMetadata:
    """What a consumer passes along with offsets (Kafka's ConsumerGroupMetadata, KIP-447)."""

    generation_id: int
    member_id: str


def check_distinct_partitions(offsets: list[OffsetToStage]) -> None:
    """One offset per partition per request: two would leave the winner to chance."""
    seen: set[tuple[str, int]] = set()
    for o in offsets:
        if (o.topic, o.partition) in seen:
            raise InvalidRequest(f"two offsets for {o.topic}/{o.partition} in one request")
        seen.add((o.topic, o.partition))
