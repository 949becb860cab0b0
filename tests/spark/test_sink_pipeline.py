"""The sink as a pipeline's end (option consumerGroup): the positions a batch consumed move
the group's offsets in the batch's one commit, so that reading and writing commit together;
a replay is known by its batch id and its positions; a batch write that read from offsets
another run has moved since is refused. The driver's side, called as Spark calls it (no Spark
session: the tasks' prepared transactions are made by write_partition directly). On SQLite and
PostgreSQL, against a real `serve`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from spark_jobs.errors import OutboxSinkError
from spark_jobs.common.positions import TopicPartition
from spark_jobs.writer.columns import check_columns
from spark_jobs.writer.commit import commit_batch, micro_batch_positions
from spark_jobs.writer.options import parse_sink_options
from spark_jobs.writer.task import write_partition
from tests.e2e.api import ok, read_all, unfinished_transactions

SOURCE, OUT, GROUP = "in", "out", "pipeline"


@pytest.fixture
def url(url):  # type: ignore[no-untyped-def]
    for name in (SOURCE, OUT):
        ok(httpx.post(f"{url}/v1/topics", json={"name": name, "partitions": 2}), 201)
    return url


def _prepared(url: str, sink_id: str, tag: str) -> list[Any]:
    """One micro-batch's tasks: two prepared transactions, one record each."""
    import pyarrow as pa
    from pyspark.sql.types import StringType, StructField, StructType

    schema = StructType([StructField("value", StringType())])
    options = parse_sink_options({"url": url, "topic": OUT, "sinkId": sink_id}, streaming=True)
    return [write_partition(options, check_columns(schema, options), schema, p,
                            [pa.record_batch([pa.array([json.dumps({"tag": tag, "task": p})])], names=["value"])])
            for p in (0, 1)]


def _offset_log(checkpoint: Path, batch_id: int, positions: dict[str, dict[str, int]]) -> None:
    """The entry Spark writes before micro-batch `batch_id`: version, metadata, one source's end."""
    (checkpoint / "offsets").mkdir(parents=True, exist_ok=True)
    (checkpoint / "offsets" / str(batch_id)).write_text(
        'v1\n{"batchWatermarkMs":0,"batchTimestampMs":1,"conf":{}}\n' + json.dumps(positions))


def _stream_options(url: str, checkpoint: Path) -> Any:
    return parse_sink_options({"url": url, "topic": OUT, "sinkId": "sink", "consumerGroup": GROUP,
                               "checkpointLocation": str(checkpoint)}, streaming=True)


def _tags(url: str) -> list[str]:
    with httpx.Client(base_url=url, timeout=30) as c:
        return sorted(r["value"]["tag"] for p in (0, 1) for r in read_all(c, OUT, p))


def _group(url: str) -> dict[tuple[str, int], int]:
    r = httpx.get(f"{url}/v1/groups/{GROUP}/offsets")
    return {} if r.status_code == 404 else {(o["topic"], o["partition"]): o["offset"] for o in ok(r)["offsets"]}


def test_a_micro_batch_moves_the_pipeline_group_to_its_offset_log_positions_in_its_commit(backend, url, tmp_path) -> None:  # type: ignore[no-untyped-def]
    _offset_log(tmp_path, 0, {SOURCE: {"0": 5, "1": 3}})
    assert commit_batch(_stream_options(url, tmp_path), _prepared(url, "sink", "b0"), 0).committed
    assert _group(url) == {(SOURCE, 0): 5, (SOURCE, 1): 3}
    assert _tags(url) == ["b0", "b0"]
    assert unfinished_transactions(url) == {}


def test_a_replayed_micro_batch_whose_positions_the_group_holds_writes_nothing(backend, url, tmp_path) -> None:  # type: ignore[no-untyped-def]
    options = _stream_options(url, tmp_path)
    _offset_log(tmp_path, 0, {SOURCE: {"0": 5, "1": 3}})
    assert commit_batch(options, _prepared(url, "sink", "b0"), 0).committed
    outcome = commit_batch(options, _prepared(url, "sink", "b0 again"), 0)
    assert (outcome.committed, outcome.replayed) == (False, True)
    assert _tags(url) == ["b0", "b0"]
    assert _group(url) == {(SOURCE, 0): 5, (SOURCE, 1): 3}
    assert unfinished_transactions(url) == {}


def test_batch_zero_of_a_new_checkpoint_is_no_replay_when_its_positions_were_never_committed(backend, url, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The query lost its checkpoint and starts again from the group's offsets: its batch ids
    start at 0, which the sink committed already, but its input is new."""
    _offset_log(tmp_path / "old", 0, {SOURCE: {"0": 5, "1": 3}})
    _offset_log(tmp_path / "old", 1, {SOURCE: {"0": 9, "1": 3}})
    assert commit_batch(_stream_options(url, tmp_path / "old"), _prepared(url, "sink", "old 0"), 0).committed
    assert commit_batch(_stream_options(url, tmp_path / "old"), _prepared(url, "sink", "old 1"), 1).committed

    _offset_log(tmp_path / "new", 0, {SOURCE: {"0": 12, "1": 4}})
    outcome = commit_batch(_stream_options(url, tmp_path / "new"), _prepared(url, "sink", "new 0"), 0)
    assert outcome.committed and not outcome.replayed
    assert _tags(url) == ["new 0", "new 0", "old 0", "old 0", "old 1", "old 1"]
    assert _group(url) == {(SOURCE, 0): 12, (SOURCE, 1): 4}


def test_positions_of_a_topic_deleted_since_are_left_out_and_the_rest_commit(backend, url, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A topicPattern's stream keeps the last positions of a topic that was deleted: moving the
    group's offsets there would be refused, at this commit and every one after."""
    _offset_log(tmp_path, 0, {SOURCE: {"0": 5}, "deleted-since": {"0": 4}})
    assert commit_batch(_stream_options(url, tmp_path), _prepared(url, "sink", "b0"), 0).committed
    assert _group(url) == {(SOURCE, 0): 5}
    assert _tags(url) == ["b0", "b0"]


def test_a_batch_write_moves_the_group_to_consumed_positions_even_with_no_output(backend, url) -> None:  # type: ignore[no-untyped-def]
    """All of a batch's input filtered out: nothing to write, and still its input is consumed."""
    options = parse_sink_options({"url": url, "topic": OUT, "sinkId": "job", "consumerGroup": GROUP,
                                  "consumedPositions": json.dumps({SOURCE: {"0": 7}})}, streaming=False)
    assert commit_batch(options, [], None).committed
    assert _group(url) == {(SOURCE, 0): 7}
    assert _tags(url) == []


def test_a_driver_that_died_with_the_groups_offsets_staged_leaves_them_to_the_next_commit(backend, url) -> None:  # type: ignore[no-untyped-def]
    """The sink's driver died between its AddOffsets and its Commit: its open transaction holds
    the group's offsets pending. The next run's commit fences it (InitProducerId), which aborts
    it, reads the group as the last commit left it (none), and commits its own."""
    from app.client import Producer

    dead = Producer(url, "job")
    dead.init_transactions()
    dead.begin_transaction()
    dead.send_offsets_to_transaction({(SOURCE, 0): 3}, GROUP)  # and then nothing: killed
    options = parse_sink_options({"url": url, "topic": OUT, "sinkId": "job", "consumerGroup": GROUP,
                                  "consumedPositions": json.dumps({SOURCE: {"0": 7}}),
                                  "consumedFrom": "{}"}, streaming=False)
    assert commit_batch(options, _prepared(url, "job", "next run"), None).committed
    assert _group(url) == {(SOURCE, 0): 7}
    assert _tags(url) == ["next run", "next run"]
    assert unfinished_transactions(url) == {}
    dead.close()


def test_a_batch_write_is_refused_when_the_group_moved_since_its_read_started(backend, url) -> None:  # type: ignore[no-untyped-def]
    """Two runs read from the group's offsets {} (none); the first commits to 7; the second's
    commit finds the group at 7, not where it started: refused, its records aborted, the
    group where the first left it."""
    def options(until: int) -> Any:
        return parse_sink_options({"url": url, "topic": OUT, "sinkId": "job", "consumerGroup": GROUP,
                                   "consumedPositions": json.dumps({SOURCE: {"0": until}}),
                                   "consumedFrom": "{}"}, streaming=False)

    assert commit_batch(options(7), _prepared(url, "job", "first"), None).committed
    with pytest.raises(OutboxSinkError, match=r"group pipeline's offsets moved since the read started \(in/0: none → 7\)"):
        commit_batch(options(9), _prepared(url, "job", "second"), None)
    assert _tags(url) == ["first", "first"]
    assert _group(url) == {(SOURCE, 0): 7}
    assert unfinished_transactions(url) == {}


@pytest.mark.parametrize(("given", "streaming", "message"), [
    ({"consumedPositions": '{"in": {"0": 1}}'}, False, "option consumedPositions needs the option consumerGroup"),
    ({"consumerGroup": "g"}, False, "needs the option consumedPositions"),
    ({"consumerGroup": "g", "consumedPositions": '{"in": {"0": -1}}'}, False, "offsets only"),
    ({"consumerGroup": "g", "consumedPositions": "[1]"}, False, "option consumedPositions: expected an object"),
    ({"consumerGroup": "g", "sinkId": "s"}, True, "needs the option checkpointLocation"),
    ({"consumerGroup": "g", "sinkId": "s", "checkpointLocation": "hdfs://nn/cp"}, True, "is not a local path"),
    ({"consumerGroup": "g", "sinkId": "s", "checkpointLocation": "/cp", "consumedFrom": "{}"}, True,
     "option consumedFrom is for batch writes"),
    ({"consumerGroup": "s", "sinkId": "s", "checkpointLocation": "/cp"}, True, "must differ from sinkId"),
    ({"consumerGroup": "g", "sinkId": "s", "checkpointLocation": "s3a://bucket/cp"}, True, "is not a local path"),
    ({"checkpointLocation": "/cp"}, False, "option checkpointLocation is for streaming writes"),
    ({"consumerGroup": "g", "consumedPositions": '{"in": {"0": 1}}', "checkpointLocation": "/cp"}, False,
     "option checkpointLocation is for streaming writes"),
])
def test_pipeline_options_in_the_wrong_form_are_one_line_errors(given, streaming, message) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(OutboxSinkError, match=message):
        parse_sink_options({"url": "http://127.0.0.1:1", "topic": OUT, **given}, streaming=streaming)


def test_the_offset_log_entry_must_hold_exactly_one_outbox_source(tmp_path) -> None:
    _offset_log(tmp_path, 3, {SOURCE: {"0": 5}})
    assert micro_batch_positions(str(tmp_path), 3) == {TopicPartition(SOURCE, 0): 5}
    (tmp_path / "offsets" / "4").write_text('v1\n{}\n{"in": {"0": 5}}\n{"other": {"1": 2}}')
    with pytest.raises(OutboxSinkError, match="holds 2 offsets"):
        micro_batch_positions(str(tmp_path), 4)
    with pytest.raises(OutboxSinkError, match="cannot read the query's offset log"):
        micro_batch_positions(str(tmp_path), 5)
    (tmp_path / "offsets" / "6").write_text('v2\n{}\nsource-0:{"in": {"0": 5}}')
    with pytest.raises(OutboxSinkError, match="is in format 'v2'; the sink reads format v1"):
        micro_batch_positions(str(tmp_path), 6)


@pytest.mark.parametrize(("location", "read_at"), [
    ("/var/lib/cp", "/var/lib/cp"), ("file:///var/lib/cp", "/var/lib/cp"), ("file:/var/lib/cp", "/var/lib/cp"),
    ("relative/cp", "relative/cp"),
])
def test_a_local_checkpoint_location_is_read_as_its_path(location, read_at) -> None:  # type: ignore[no-untyped-def]
    options = parse_sink_options({"url": "http://127.0.0.1:1", "topic": OUT, "sinkId": "s", "consumerGroup": "g",
                                  "checkpointLocation": location}, streaming=True)
    assert options.pipeline is not None and options.pipeline.checkpoint == read_at
