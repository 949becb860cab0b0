"""Consumer-group offsets as the protocol passes them around."""

from __future__ import annotations

from dataclasses import dataclass

from app.domain.errors import InvalidRequest

# Most partitions one AddOffsets (TxnOffsetCommit) or AddPartitionsToTxn names, from every door:
# each is a row looked up and written in one database transaction that holds the transaction's
# row lock, so a request is bounded by more than its frame size.
MAX_PARTITIONS_PER_REQUEST = 10_000


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
    """One offset per partition per request: two would leave the winner to chance; and at most
    MAX_PARTITIONS_PER_REQUEST of them."""
    check_partition_count(len(offsets))
    seen: set[tuple[str, int]] = set()
    for o in offsets:
        if (o.topic, o.partition) in seen:
            raise InvalidRequest(f"two offsets for {o.topic}/{o.partition} in one request")
        seen.add((o.topic, o.partition))


def check_partition_count(count: int) -> None:
    if count > MAX_PARTITIONS_PER_REQUEST:
        raise InvalidRequest(f"a request names at most {MAX_PARTITIONS_PER_REQUEST} partitions; got {count}")
