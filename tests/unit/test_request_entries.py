"""What the Kafka door counts of an answer (error_codes): every list, nullable ones included,
at every depth. What it counts of a request (OUTBOX_KAFKA_MAX_REQUEST_ENTRIES) is counted as
the request is read: tests/unit/test_kafka_request_reading.py."""

from __future__ import annotations

from kio.schema.errors import ErrorCode
from kio.schema.offset_fetch.v7.response import (OffsetFetchResponse, OffsetFetchResponsePartition,
                                                 OffsetFetchResponseTopic)

from app.kafka.protocol import error_codes


def test_error_codes_under_a_nullable_list_are_counted() -> None:
    from datetime import timedelta

    answer = OffsetFetchResponse(throttle_time=timedelta(0), error_code=ErrorCode.none, topics=(
        OffsetFetchResponseTopic(name="orders", partitions=tuple(
            OffsetFetchResponsePartition(partition_index=p, committed_offset=-1, committed_leader_epoch=-1,
                                         metadata=None, error_code=ErrorCode.unstable_offset_commit)
            for p in range(2))),))
    assert error_codes(answer) == {ErrorCode.unstable_offset_commit: 2}
