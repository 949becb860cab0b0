"""A task of the sink, on an executor: its Spark partition's rows, sent in one transaction of
its own producer `<sinkId>.<partitionId>`, then prepared (KIP-939); the driver commits them all
together (spark_jobs.writer.commit)."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import WriterCommitMessage
from pyspark.sql.types import StructType

from app.client import JsonText, PreparedTxnState, Producer
from app.client.errors import ClientError
from spark_jobs.errors import OutboxSinkError
from spark_jobs.writer.columns import Columns, json_converter
from spark_jobs.writer.options import SinkOptions

logger = logging.getLogger(__name__)


def task_transactional_id(sink_id: str, partition_id: int) -> str:
    return f"{sink_id}.{partition_id}"


def is_task_transactional_id(sink_id: str, transactional_id: str) -> bool:
    return re.fullmatch(re.escape(sink_id) + r"\.\d+", transactional_id) is not None


@dataclass(frozen=True)
class SinkCommitMessage(WriterCommitMessage):
    """What a task hands the driver: its prepared transaction (None: it had no rows), how many
    records it holds, and their topics (the driver records progress in the first one)."""

    partition_id: int
    prepared: PreparedTxnState | None
    records: int = 0
    topics: tuple[str, ...] = ()


def task_producer(options: SinkOptions, transactional_id: str) -> Producer:
    """A task's producer: transactionTimeoutMs, long enough to send all its rows."""
    return Producer(options.url, transactional_id, transaction_timeout_ms=options.transaction_timeout_ms,
                    batch_records=options.batch_records, api_key=options.api_key)


def _rows(batch: Any, columns: Columns, schema: StructType, options: SinkOptions) -> Iterator[tuple]:
    """(topic, value, key, partition, headers) of each row of an Arrow record batch. A string
    value is JSON text, sent as it is (JsonText: never parsed and encoded again, so a value
    the data source read is stored back as the same text); a null one is JSON null. A map of
    headers is sent as it is, an empty one too ({}, as a Send stores it); a null map sends none."""
    n = batch.num_rows
    by_name = {name.lower(): i for i, name in enumerate(batch.schema.names)}

    def column(name: str) -> list | None:
        return batch.column(by_name[name]).to_pylist() if name in by_name else None

    value_type = next(f.dataType for f in schema.fields if f.name.lower() == "value")
    raw = column("value")
    assert raw is not None
    if columns.value_is_json_text:
        try:
            values = [None if v is None else JsonText(v) for v in raw]
        except ValueError as e:
            raise OutboxSinkError(f"column value holds text that is not JSON ({e}); a string column is "
                                  "sent as the JSON it holds: to send text, to_json() it first") from None
    else:
        convert = json_converter(value_type)
        values = raw if convert is None else [convert(v) for v in raw]
    topics = [options.topic] * n if options.topic is not None else column("topic")
    keys = column("key") or [None] * n
    partitions = column("partition") or [None] * n
    headers = [None if h is None else dict(h) for h in column("headers")] if columns.headers else [None] * n
    assert topics is not None
    return zip(topics, values, keys, partitions, headers, strict=True)


def write_partition(options: SinkOptions, columns: Columns, schema: StructType, partition_id: int,
                    batches: Iterable[Any]) -> SinkCommitMessage:
    """One task's rows (Arrow record batches) in one prepared transaction of the producer
    `<sinkId>.<partitionId>`. Its InitProducerId fences an earlier attempt of this partition
    (a retried or speculative task) and aborts that attempt's transaction, so only one attempt's
    records can ever commit. On failure the transaction is aborted (best effort: the driver's
    cleanup takes over what a killed task leaves)."""
    transactional_id = task_transactional_id(options.sink_id, partition_id)
    producer: Producer | None = None
    count = 0
    topics: set[str] = {options.topic} if options.topic is not None else set()
    try:
        for batch in batches:
            if batch.num_rows == 0:
                continue
            if producer is None:
                producer = task_producer(options, transactional_id)
                producer.init_transactions()
                producer.begin_transaction()
            rows = _rows(batch, columns, schema, options)
            for topic, value, key, partition, headers in rows:
                if topic is None:
                    raise OutboxSinkError("a row's topic is null: give every row a topic, or the option topic")
                if columns.topic and options.topic is None:
                    topics.add(topic)
                producer.send(topic, value, key=key, partition=partition, headers=headers)
                count += 1
        if producer is None:
            return SinkCommitMessage(partition_id, None)
        prepared = producer.prepare_transaction()
        return SinkCommitMessage(partition_id, prepared, count, tuple(sorted(topics)))
    except BaseException:
        if producer is not None and producer.producer_id is not None:
            try:
                producer.abort_transaction()
            except ClientError as e:  # fenced by a newer attempt, or the service is gone
                logger.warning("%s: could not abort after a failure: %s", transactional_id, e)
        raise
    finally:
        if producer is not None:
            producer.close()
