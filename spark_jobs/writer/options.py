"""A write's options (df.write / df.writeStream .format("outbox")), checked on the driver
before any task: an unknown option or a malformed value is an OutboxSinkError of one line. The
table of options is spark_jobs.common.options."""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field

from spark_jobs.common.options import given_options, positive_option, service_url
from spark_jobs.common.positions import TopicPartition, positions_from_json
from spark_jobs.errors import OutboxSinkError

DEFAULT_BATCH_RECORDS = 5_000
# A task's transaction stays Ongoing while it sends all its rows (a few million at tens of
# thousands a second): the service's 60 s default would abort large partitions. Once prepared
# it has no timeout at all (KIP-939).
DEFAULT_TRANSACTION_TIMEOUT_MS = 900_000


@dataclass(frozen=True, slots=True)
class Pipeline:
    """A read-process-write pipeline's consumer group, whose offsets the sink moves in each
    batch's commit, so that what was read and what was written commit together (Kafka's
    sendOffsetsToTransaction). `consumed`: a batch write's positions read (a stream's come from
    its offset log, per micro-batch); `expected`: a batch write's group offsets at its start."""

    group: str
    consumed: Mapping[TopicPartition, int] | None = None
    expected: Mapping[TopicPartition, int] | None = None
    checkpoint: str | None = None


@dataclass(frozen=True, slots=True)
class SinkOptions:
    url: str
    sink_id: str
    api_key: str | None = field(default=None, repr=False)
    topic: str | None = None
    batch_records: int = DEFAULT_BATCH_RECORDS
    transaction_timeout_ms: int = DEFAULT_TRANSACTION_TIMEOUT_MS
    # False: a batch write without the option sinkId, under a name made up for it
    named: bool = True
    pipeline: Pipeline | None = None


def parse_sink_options(raw: Mapping[str, str], *, streaming: bool,
                       env: Mapping[str, str] | None = None) -> SinkOptions:
    """The options of one write, checked; OutboxSinkError (one line) for the first problem.
    Spark's own options of a streaming write (checkpointLocation, path) are let through."""
    env = os.environ if env is None else env
    given = given_options(raw, "write", OutboxSinkError, "the outbox sink", passthrough=("path", "queryname"))
    url = service_url(given, OutboxSinkError)
    if not streaming and "checkpointLocation" in given:
        # Nothing reads it in a batch write: Spark keeps no checkpoint for one.
        raise OutboxSinkError("option checkpointLocation is for streaming writes (writeStream): a batch write keeps "
                              "no checkpoint; its pipeline's positions are the option consumedPositions")
    sink_id = given.get("sinkId", "").strip()
    if not sink_id:
        if streaming:
            raise OutboxSinkError("option sinkId is required for a streaming write: it names the sink's "
                                  "transactional ids and the group that records its last batch")
        sink_id = f"spark-sink-{uuid.uuid4().hex[:12]}"
    # The ids the service accepts (app/api/schemas/common.py), with room for ".<partition>".
    if "/" in sink_id or re.search(r"[\x00-\x1f\x7f]", sink_id) or len(sink_id) > 240:
        raise OutboxSinkError(f"option sinkId: {sink_id!r} is not a transactional id "
                              "(at most 240 characters, no '/' or control characters)")
    topic = given.get("topic", "").strip() or None
    if given.get("consumerGroup", "").strip() == sink_id:
        raise OutboxSinkError(f"option consumerGroup must differ from sinkId: the group {sink_id!r} records the "
                              "sink's last batch id")
    return SinkOptions(
        url=url,
        sink_id=sink_id,
        api_key=given.get("apiKey") or env.get("OUTBOX_API_KEY") or None,
        topic=topic,
        batch_records=positive_option("batchRecords", given.get("batchRecords", str(DEFAULT_BATCH_RECORDS)),
                                      OutboxSinkError),
        transaction_timeout_ms=positive_option(
            "transactionTimeoutMs", given.get("transactionTimeoutMs", str(DEFAULT_TRANSACTION_TIMEOUT_MS)), OutboxSinkError),
        named="sinkId" in given,
        pipeline=parse_pipeline(given, streaming=streaming),
    )


def parse_pipeline(given: Mapping[str, str], *, streaming: bool) -> Pipeline | None:
    group = given.get("consumerGroup", "").strip()
    if not group:
        stray = [n for n in ("consumedPositions", "consumedFrom") if n in given]
        if stray:
            raise OutboxSinkError(f"option {stray[0]} needs the option consumerGroup: the group whose offsets move")
        return None
    if streaming:
        stray = [n for n in ("consumedPositions", "consumedFrom") if n in given]
        if stray:
            raise OutboxSinkError(f"option {stray[0]} is for batch writes: a streaming query's consumed positions "
                                  "are its micro-batches' offsets, which the sink reads from the checkpoint")
        checkpoint = given.get("checkpointLocation", "").strip()
        if not checkpoint:
            raise OutboxSinkError("option consumerGroup in a streaming write needs the option checkpointLocation "
                                  "on the writeStream: the sink reads each micro-batch's positions from its offset log")
        from urllib.parse import urlsplit

        parts = urlsplit(checkpoint)
        # A Windows drive letter aside, a scheme other than file: is a store Python cannot open.
        if parts.scheme and len(parts.scheme) > 1 and parts.scheme != "file":
            raise OutboxSinkError(f"option consumerGroup: the checkpointLocation {checkpoint!r} is not a local path; "
                                  "the sink reads the offset log with Python's file API (a local or mounted path)")
        return Pipeline(group, checkpoint=parts.path if parts.scheme == "file" else checkpoint)
    if "consumedPositions" not in given:
        raise OutboxSinkError("option consumerGroup in a batch write needs the option consumedPositions: "
                              'the positions the batch read, as JSON like {"orders": {"0": 120}}')
    consumed = _positions_option("consumedPositions", given["consumedPositions"])
    expected = _positions_option("consumedFrom", given["consumedFrom"]) if "consumedFrom" in given else None
    return Pipeline(group, consumed=consumed, expected=expected)


def _positions_option(name: str, value: str) -> dict[TopicPartition, int]:
    try:
        positions = positions_from_json(value)
    except ValueError as e:
        raise OutboxSinkError(f"option {name}: {e}") from None
    if any(p < 0 for p in positions.values()):
        raise OutboxSinkError(f"option {name}: offsets only (a group's offsets), not -2 (earliest) or -1 (latest)")
    return positions
