"""Spark's writer classes of the `outbox` sink (df.write and df.writeStream .format("outbox")):
built on the driver, where they check the options, the columns and the service before any
task; each task runs spark_jobs.writer.task, and Spark's commit and abort on the driver run
spark_jobs.writer.commit."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from spark_jobs.errors import OutboxSinkError
from spark_jobs.writer.columns import Columns, check_columns
from spark_jobs.writer.commit import abort_batch, check_service, clean_leftovers, commit_batch
from spark_jobs.writer.options import SinkOptions, parse_sink_options
from spark_jobs.writer.task import SinkCommitMessage, write_partition


class _Tasks:
    """What a task of either writer runs: its partition's rows, in one prepared transaction."""

    options: SinkOptions
    columns: Columns
    schema: StructType

    def __init__(self, raw_options: Mapping[str, str], schema: StructType, overwrite: bool, *, streaming: bool) -> None:
        """Built on the driver when the write is planned: the options, the columns and the
        service are checked there, before any task."""
        if overwrite:
            raise OutboxSinkError("the outbox sink only appends: use "
                                  + ('outputMode("append")' if streaming else 'mode("append")'))
        self.options = parse_sink_options(raw_options, streaming=streaming)
        self.schema = schema
        self.columns = check_columns(schema, self.options)
        check_service(self.options)

    def write(self, iterator: Iterator[Any]) -> SinkCommitMessage:
        from pyspark import TaskContext

        context = TaskContext.get()
        assert context is not None
        return write_partition(self.options, self.columns, self.schema, context.partitionId(), iterator)


class OutboxBatchWriter(_Tasks, DataSourceArrowWriter):
    """df.write.format("outbox").mode("append")."""

    def __init__(self, raw_options: Mapping[str, str], schema: StructType, overwrite: bool) -> None:
        super().__init__(raw_options, schema, overwrite, streaming=False)
        if self.options.named:
            # No task of this write runs yet: whatever this sink left open is a leftover.
            clean_leftovers(self.options, set())

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:  # type: ignore[override]
        commit_batch(self.options, messages, None)  # type: ignore[arg-type]

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:  # type: ignore[override]
        abort_batch(self.options, messages)  # type: ignore[arg-type]


class OutboxStreamWriter(_Tasks, DataSourceStreamArrowWriter):
    """df.writeStream.format("outbox") in append mode. Spark builds one when it plans the query
    and one more on the driver for each micro-batch's commit: nothing is cleaned up here (at a
    commit, the batch's own prepared transactions exist already), only checked."""

    def __init__(self, raw_options: Mapping[str, str], schema: StructType, overwrite: bool) -> None:
        super().__init__(raw_options, schema, overwrite, streaming=True)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # type: ignore[override]  # noqa: N803
        commit_batch(self.options, messages, batchId)  # type: ignore[arg-type]

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # type: ignore[override]  # noqa: N803
        abort_batch(self.options, messages)  # type: ignore[arg-type]
