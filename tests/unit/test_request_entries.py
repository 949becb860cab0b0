"""What the Kafka door counts of a request (app.kafka.protocol.entries, bounded by
OUTBOX_KAFKA_MAX_REQUEST_ENTRIES) and of an answer (error_codes): every list, nullable ones
included, at every depth."""

from __future__ import annotations

from kio.schema.errors import ErrorCode
from kio.schema.offset_fetch.v7.request import OffsetFetchRequest, OffsetFetchRequestTopic
from kio.schema.offset_fetch.v7.response import (OffsetFetchResponse, OffsetFetchResponsePartition,
                                                 OffsetFetchResponseTopic)

from app.kafka.protocol import entries, error_codes


def test_a_nullable_list_of_topics_counts_each_topic_and_its_partitions() -> None:
    request = OffsetFetchRequest(group_id="billing", require_stable=True, topics=(
        OffsetFetchRequestTopic(name="orders", partition_indexes=(0, 1, 2)),
        OffsetFetchRequestTopic(name="clicks", partition_indexes=(0,))))
    assert entries(request) == 2 + 3 + 1


def test_a_null_list_counts_nothing() -> None:
    assert entries(OffsetFetchRequest(group_id="billing", require_stable=True, topics=None)) == 0


def test_error_codes_under_a_nullable_list_are_counted() -> None:
    from datetime import timedelta

    answer = OffsetFetchResponse(throttle_time=timedelta(0), error_code=ErrorCode.none, topics=(
        OffsetFetchResponseTopic(name="orders", partitions=tuple(
            OffsetFetchResponsePartition(partition_index=p, committed_offset=-1, committed_leader_epoch=-1,
                                         metadata=None, error_code=ErrorCode.unstable_offset_commit)
            for p in range(2))),))
    assert error_codes(answer) == {ErrorCode.unstable_offset_commit: 2}
