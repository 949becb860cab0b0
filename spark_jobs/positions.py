"""The name users' code imports the positions types by (docs/SPARK.md, "Positions types"): a
re-export of spark_jobs.common.positions, where they are defined."""

from __future__ import annotations

from spark_jobs.common.positions import (
    EARLIEST,
    LATEST,
    LogBounds,
    TopicPartition,
    TopicRange,
    positions_from_json,
    positions_to_json,
)

__all__ = ["EARLIEST", "LATEST", "LogBounds", "TopicPartition", "TopicRange", "positions_from_json",
           "positions_to_json"]
