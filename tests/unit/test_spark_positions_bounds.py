"""The Spark jobs' end positions are the service's high watermarks (docs/GUARANTEES.md#durability-commit):
a batch or micro-batch that ended at the log end past an open transaction whose Sends are not
durable yet would start the next one past offsets a database crash could hand out again."""

from __future__ import annotations

from typing import Any

from spark_jobs.common.positions import LogBounds, log_bounds


class _Described:
    def __init__(self, partition: dict[str, Any]) -> None:
        self.partition = partition

    def call(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        assert (method, path) == ("GET", "/v1/topics/out")
        return {"config": {"value_format": "json"}, "partitions": [self.partition]}


def test_a_partition_ends_at_its_high_watermark() -> None:
    described = _Described({"partition": 0, "log_start_offset": 2, "log_end_offset": 9, "high_watermark": 5})
    assert log_bounds(described, "out") == {0: LogBounds(2, 5)}  # type: ignore[arg-type]


def test_a_service_that_predates_the_high_watermark_ends_at_the_log_end() -> None:
    described = _Described({"partition": 0, "log_start_offset": 2, "log_end_offset": 9})
    assert log_bounds(described, "out") == {0: LogBounds(2, 9)}  # type: ignore[arg-type]
