"""The `outbox` sink: df.write.format("outbox") and df.writeStream.format("outbox"), exactly once.

    (df.write.format("outbox").mode("append")
       .option("url", "http://127.0.0.1:8000").option("topic", "income")
       .save())
    (df.writeStream.format("outbox")
       .option("url", "http://127.0.0.1:8000").option("topic", "income").option("sinkId", "income-job")
       .option("checkpointLocation", "/var/lib/jobs/income")
       .start())

Columns: `topic` (string; or the option topic, which wins over the column, as in Spark's Kafka
sink), `partition` (integer, optional: else the client's partitioner on the key, as a Producer
places records), `key` (string, nullable), `value` (a string column holds JSON text and is sent
as that JSON; any other type is converted to JSON as Spark's to_json would: see
`json_converter`), `headers` (map<string,string>, optional). Only `value` is required.

How one batch (a batch write, or one micro-batch) is written, with one commit point:

1. Each Spark task writes its rows itself, on its executor, with its own transactional
   producer `<sinkId>.<partitionId>`: InitProducerId (which fences an earlier attempt of the
   same partition and aborts its open or prepared transaction), Begin, Sends of `batchRecords`
   records, then Prepare (KIP-939). The task hands the driver its PreparedTxnState. A task
   without rows writes nothing and says so.
2. The driver (Spark's `commit(messages, batchId)`) runs one transaction of the sink's own
   producer `<sinkId>`: it stages the batch id as the offset of the group `<sinkId>` (streaming),
   then commits with every task's prepared transaction listed (the service's commit together
   with prepared transactions): the tasks' records, in every partition, and the batch id
   become visible in one database transaction, or none of it does.
3. A replayed micro-batch (the driver died after that commit, before Spark's checkpoint said
   so) finds its batch id committed already: its tasks' prepared transactions are aborted
   and nothing is written twice.
   With the option consumerGroup (a pipeline), the same commit also moves that group's
   offsets to the positions the batch consumed (a micro-batch's from the query's offset log,
   a batch write's from consumedPositions), so input and output commit together; a replay is
   then a batch id the sink committed whose positions the group already holds.
4. Transactions of this sink left Ongoing or Prepared by a run that never committed (a killed
   driver, a partition count that changed, a task that died without aborting) are taken over
   by the driver (InitProducerId aborts them: WRITE on the transactional id is all it needs,
   not the cluster ALTER of the admin abort), before each commit and on abort.

docs/SPARK.md, "The sink", says why each choice, and what a batch write without sinkId does.
"""

from __future__ import annotations

import base64
import logging
import os
import re
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    IntegralType,
    MapType,
    StringType,
    StructType,
)

from app.client import PreparedTxnState, Producer
from app.client.errors import ClientError, RetriableError
from app.client.http import Session, credentials
from spark_jobs.errors import OutboxSinkError
from spark_jobs.positions import (
    TopicPartition,
    group_offsets as fetch_group_offsets,
    positions_from_dict,
    positions_from_json,
    positions_to_json,
)
from spark_jobs.source_options import given_options, positive_option, service_url

logger = logging.getLogger(__name__)

# Option name (as Spark users write it) → what it means; matched without case, as Spark hands
# options over with their keys lower-cased or as typed (spark_jobs.source_options does the same).
OPTIONS: dict[str, str] = {
    "url": "the outbox service's URL",
    "apiKey": "the service's API key, when its authentication is on (default: $OUTBOX_API_KEY)",
    "topic": "the output topic of every row (wins over a topic column)",
    "sinkId": "names the sink's transactional ids (<sinkId> on the driver, <sinkId>.<partition> per task) "
              "and its progress group <sinkId>; required for streaming",
    "batchRecords": "records per Send of a task (default 5000)",
    "transactionTimeoutMs": "a task's transaction timeout while it sends, before it is prepared "
                            "(default 900000, the service's default maximum)",
    "consumerGroup": "a pipeline's consumer group: its offsets move to the positions the batch consumed in the "
                     "batch's commit (a streaming query's from its offset log; a batch write's: consumedPositions)",
    "consumedPositions": "batch writes with consumerGroup: the positions read, as JSON per partition "
                         '({"orders": {"0": 120}}): the group\'s offsets once the batch commits',
    "consumedFrom": "batch writes with consumerGroup, optional: the group's offsets the read started from, as "
                    "JSON ({} when it had none); the commit is refused if they moved meanwhile",
    "checkpointLocation": "Spark's own, for a streaming write; with consumerGroup the sink reads the query's "
                          "offset log there (a local or mounted path)",
}

DEFAULT_BATCH_RECORDS = 5_000
# A task's transaction stays Ongoing while it sends all its rows (a few million at tens of
# thousands a second): the service's 60 s default would abort large partitions. Once prepared
# it has no timeout at all (KIP-939).
DEFAULT_TRANSACTION_TIMEOUT_MS = 900_000
# The Ongoing/Prepared transactions listed per cleanup (the API's own maximum)
LIST_LIMIT = 10_000
# A Commit names at most this many prepared transactions (the service's CommitTransactionRequest)
MAX_JOINT_COMMIT = 1_000
COLUMNS = ("topic", "partition", "key", "value", "headers")


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
    given = given_options(raw, OPTIONS, OutboxSinkError, "the outbox sink", passthrough=("path", "queryname"))
    url = service_url(given, OPTIONS, OutboxSinkError)
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


def task_transactional_id(sink_id: str, partition_id: int) -> str:
    return f"{sink_id}.{partition_id}"


def is_task_transactional_id(sink_id: str, transactional_id: str) -> bool:
    return re.fullmatch(re.escape(sink_id) + r"\.\d+", transactional_id) is not None


# --- Columns ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Columns:
    """Which of the sink's columns the DataFrame has (value always), and how value is sent."""

    topic: bool
    partition: bool
    key: bool
    headers: bool
    value_is_json_text: bool


def check_columns(schema: StructType, options: SinkOptions) -> Columns:
    """The DataFrame's columns against the sink's; OutboxSinkError (one line) for the first
    column of an unknown name or the wrong type."""
    types = {f.name.lower(): f.dataType for f in schema.fields}
    unknown = [f.name for f in schema.fields if f.name.lower() not in COLUMNS]
    if unknown:
        raise OutboxSinkError(f"column {unknown[0]!r} is not one the outbox sink writes; "
                              f"select {', '.join(COLUMNS)} (value required)")
    if "value" not in types:
        raise OutboxSinkError("the outbox sink needs a column value (JSON text, or any type, sent as its JSON)")
    if "topic" not in types and options.topic is None:
        raise OutboxSinkError("no output topic: give the option topic, or a column topic")

    def need(name: str, ok: bool, what: str) -> None:
        if name in types and not ok:
            raise OutboxSinkError(f"column {name} is {types[name].simpleString()}; the outbox sink needs {what}")

    need("topic", isinstance(types.get("topic"), StringType), "a string (cast it)")
    need("partition", isinstance(types.get("partition"), IntegralType), "an integer (cast it)")
    need("key", isinstance(types.get("key"), StringType), "a string or null (cast it)")
    headers = types.get("headers")
    need("headers", isinstance(headers, MapType) and isinstance(headers.keyType, StringType)
         and isinstance(headers.valueType, StringType), "map<string,string>")
    return Columns(topic="topic" in types, partition="partition" in types, key="key" in types,
                   headers="headers" in types, value_is_json_text=isinstance(types["value"], StringType))


def check_service(options: SinkOptions) -> None:
    """The service answers with these credentials, and the option topic exists: checked on the
    driver when Spark builds the writer, before any task runs."""
    from spark_jobs.source_options import check_service as check_answers

    try:
        check_answers(options)  # type: ignore[arg-type]  # it reads .url and .api_key
    except Exception as e:  # OutboxSourceError: the same line, as the sink's error
        raise OutboxSinkError(str(e)) from None
    if options.topic is not None:
        session = _session(options)
        try:
            session.call("GET", f"/v1/topics/{options.topic}", deadline_s=30)
        except ClientError as e:
            if e.error_code == "UNKNOWN_TOPIC_OR_PARTITION":
                raise OutboxSinkError(f"option topic: the topic {options.topic!r} does not exist "
                                      "(create it first: POST /v1/topics)") from None
            raise OutboxSinkError(f"cannot describe the topic {options.topic!r}: {e.error_code}: {e}") from None
        finally:
            session.close()
    # The service bounds a transaction's timeout (OUTBOX_MAX_TRANSACTION_TIMEOUT_MS) and says so
    # only in an InitProducerId: the driver's own id takes it here, as commit_batch's does later
    # (fencing an earlier driver of the sink, which that one does anyway), so that an option out
    # of range is this line, not a traceback of every task inside Spark's error.
    # (With the tasks' timeout, which is what is checked; commit_batch's InitProducerId sets
    # the driver's own, shorter one. No transaction is begun here.)
    driver = _producer(options, options.sink_id)
    try:
        driver.init_transactions()
    except ClientError as e:
        if e.error_code == "INVALID_TRANSACTION_TIMEOUT":
            raise OutboxSinkError(f"option transactionTimeoutMs: the service refused "
                                  f"{options.transaction_timeout_ms}: {e}") from None
        raise OutboxSinkError(f"sink {options.sink_id}: the service refused its producer: {e}") from None
    finally:
        driver.close()


# --- Values as JSON -----------------------------------------------------------------------------


def json_converter(data_type: DataType) -> Callable[[Any], Any] | None:
    """How a value of `data_type`, as Arrow hands it to Python, becomes a JSON value, as Spark's
    to_json writes it: structs and maps as objects, arrays as arrays, numbers as numbers
    (decimals through float, as the service stores any JSON number), dates and timestamps as
    ISO 8601 text, binary as base64. None: the value is JSON already (numbers, booleans, text).
    A string column is not converted here: it holds JSON text (see write_partition)."""
    from pyspark.sql.types import DateType, DecimalType, TimestampNTZType, TimestampType

    if isinstance(data_type, StructType):
        fields = [(f.name, json_converter(f.dataType)) for f in data_type.fields]
        return lambda v: None if v is None else {n: (v[n] if c is None else c(v[n])) for n, c in fields}
    if isinstance(data_type, MapType):
        kc, vc = json_converter(data_type.keyType), json_converter(data_type.valueType)
        # Arrow hands a map over as a list of (key, value) pairs; JSON keys are text.
        return lambda v: None if v is None else {
            str(k if kc is None else kc(k)): (x if vc is None else vc(x)) for k, x in v}
    if isinstance(data_type, ArrayType):
        ec = json_converter(data_type.elementType)
        return None if ec is None else (lambda v: None if v is None else [ec(x) for x in v])
    if isinstance(data_type, DecimalType):
        return lambda v: None if v is None else (int(v) if data_type.scale == 0 else float(v))
    if isinstance(data_type, (DateType, TimestampType, TimestampNTZType)):
        return lambda v: None if v is None else v.isoformat()
    if isinstance(data_type, BinaryType):
        return lambda v: None if v is None else base64.b64encode(v).decode()
    return None


# --- A task: write, prepare ---------------------------------------------------------------------


@dataclass(frozen=True)
class SinkCommitMessage(WriterCommitMessage):
    """What a task hands the driver: its prepared transaction (None: it had no rows), how many
    records it holds, and their topics (the driver records progress in the first one)."""

    partition_id: int
    prepared: PreparedTxnState | None
    records: int = 0
    topics: tuple[str, ...] = ()


def _producer(options: SinkOptions, transactional_id: str) -> Producer:
    """A task's producer: transactionTimeoutMs, long enough to send all its rows."""
    return Producer(options.url, transactional_id, transaction_timeout_ms=options.transaction_timeout_ms,
                    batch_records=options.batch_records, api_key=options.api_key)


def _driver_producer(options: SinkOptions) -> Producer:
    """The driver's producer `<sinkId>`, with the service's default timeout: its transaction
    lives only from AddOffsets to Commit, and if the driver dies in between, its staged offsets
    stay pending (and a reader asking for stable offsets waits) until the coordinator aborts it."""
    return Producer(options.url, options.sink_id, api_key=options.api_key)


def _session(options: SinkOptions) -> Session:
    return Session(options.url, auth=credentials(options.api_key, None))


def _rows(batch: Any, columns: Columns, schema: StructType, options: SinkOptions) -> Iterator[tuple]:
    """(topic, value, key, partition, headers) of each row of an Arrow record batch."""
    import orjson

    n = batch.num_rows
    by_name = {name.lower(): i for i, name in enumerate(batch.schema.names)}

    def column(name: str) -> list | None:
        return batch.column(by_name[name]).to_pylist() if name in by_name else None

    value_type = next(f.dataType for f in schema.fields if f.name.lower() == "value")
    raw = column("value")
    assert raw is not None
    if columns.value_is_json_text:
        values = [None if v is None else orjson.loads(v) for v in raw]
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
    import orjson

    transactional_id = task_transactional_id(options.sink_id, partition_id)
    producer: Producer | None = None
    count = 0
    topics: set[str] = {options.topic} if options.topic is not None else set()
    try:
        for batch in batches:
            if batch.num_rows == 0:
                continue
            if producer is None:
                producer = _producer(options, transactional_id)
                producer.init_transactions()
                producer.begin_transaction()
            try:
                rows = _rows(batch, columns, schema, options)
            except orjson.JSONDecodeError as e:
                raise OutboxSinkError(f"column value holds text that is not JSON ({e}); a string column is "
                                      "sent as the JSON it holds: to send text, to_json() it first") from None
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


# --- The driver: one commit point ---------------------------------------------------------------


def last_committed_batch(options: SinkOptions) -> int | None:
    """The last batch id the sink committed: its group `<sinkId>` holds batchId + 1 (the next
    batch to write, as a consumer's committed offset is the next record to read) on partition 0
    of an output topic. The highest over the group's partitions, so a sink whose batches wrote
    to different topics reads its last one. Stable offsets only (group_offsets): one pending in
    an unfinished transaction of the sink is waited out, never read stale."""
    offsets = group_offsets(options, options.sink_id).values()
    return max(offsets) - 1 if offsets else None


def open_transactions(options: SinkOptions) -> list[str]:
    """The sink's task transactional ids (`<sinkId>.<n>`) whose transaction is Ongoing or Prepared."""
    session = _session(options)
    try:
        # The service lists only this sink's family of ids, so other applications' open
        # transactions take none of the list's LIST_LIMIT places.
        answer = session.call("GET", "/v1/transactions",
                              params={"state": ["Ongoing", "Prepared"], "limit": LIST_LIMIT,
                                      "transactional_id_prefix": f"{options.sink_id}."}, deadline_s=60)
    finally:
        session.close()
    # The prefix `a.` lists another sink's `a.b.1` too.
    return sorted(t["transactional_id"] for t in answer["transactions"]
                  if is_task_transactional_id(options.sink_id, t["transactional_id"]))


def take_over(options: SinkOptions, transactional_ids: Iterable[str]) -> list[str]:
    """Abort each one's open or prepared transaction by taking its id over: InitProducerId
    without keep_prepared_txn fences the producer that had it and aborts its transaction (the
    contract's fencing), needing WRITE on the id only."""
    done = []
    for transactional_id in transactional_ids:
        producer = _producer(options, transactional_id)
        try:
            producer.init_transactions()
            done.append(transactional_id)
        finally:
            producer.close()
    return done


def clean_leftovers(options: SinkOptions, keep: set[str]) -> list[str]:
    """Abort the sink's open and prepared transactions that are not in `keep` (the batch being
    committed). Only called when no task of this sink runs (Spark runs a micro-batch's commit
    after all its tasks, and the next one's tasks after that): anything open then was left by a
    run that never committed, or is a zombie attempt, which this fences."""
    leftovers = [t for t in open_transactions(options) if t not in keep]
    if leftovers:
        logger.warning("sink %s: aborting %d transactions left open by a run that did not commit: %s",
                       options.sink_id, len(leftovers), ", ".join(leftovers))
    return take_over(options, leftovers)


def micro_batch_positions(checkpoint: str, batch_id: int) -> dict[TopicPartition, int]:
    """The positions a streaming query's micro-batch `batch_id` read up to: its offset log
    entry (`<checkpoint>/offsets/<batchId>`), which Spark writes before the micro-batch runs and
    the sink's commit comes after. The entry is `v1`, the batch's metadata, then one line per
    source with its end offset (the outbox source's is its positions JSON)."""
    import json
    from pathlib import Path

    path = Path(checkpoint) / "offsets" / str(batch_id)
    try:
        lines = path.read_text().splitlines()
    except OSError as e:
        raise OutboxSinkError(f"option consumerGroup: cannot read the query's offset log {path} "
                              f"({e.strerror or e}); the sink needs the checkpointLocation on a path this "
                              "driver can read") from None
    if not lines or lines[0] != "v1":
        # Spark's offsetLog.formatVersion 2 writes each source's line in another form.
        raise OutboxSinkError(f"option consumerGroup: the offset log {path} is in format "
                              f"{lines[0] if lines else '(empty)'!r}; the sink reads format v1 "
                              "(spark.sql.streaming.offsetLog.formatVersion=1, Spark's default)")
    found = []
    for line in lines[2:]:
        try:
            found.append(positions_from_dict(json.loads(line)))
        except ValueError:
            continue  # another kind of source's offset, or "-" for none
    if len(found) != 1:
        raise OutboxSinkError(f"option consumerGroup: micro-batch {batch_id}'s offset log {path} holds "
                              f"{len(found)} offsets of the outbox source's form; a pipeline's query reads one outbox source")
    return found[0]


def existing_topics(options: SinkOptions) -> set[str]:
    session = _session(options)
    try:
        return {t["name"] for t in session.call("GET", "/v1/topics", deadline_s=60)["topics"]}
    finally:
        session.close()


def group_offsets(options: SinkOptions, group: str) -> dict[TopicPartition, int]:
    """The group's committed offsets, pending ones waited out (positions.group_offsets)."""
    session = _session(options)
    try:
        return fetch_group_offsets(session, group)
    finally:
        session.close()


@dataclass
class CommitOutcome:
    """What commit did, for logs and tests."""

    committed: bool
    records: int = 0
    transactions: int = 0
    replayed: bool = False
    aborted_leftovers: list[str] = field(default_factory=list)


def commit_batch(options: SinkOptions, messages: Sequence[SinkCommitMessage | None],
                 batch_id: int | None) -> CommitOutcome:
    """The one commit point of a batch, on the driver: see the module docstring, steps 2-4."""
    started = time.monotonic()
    done = [m for m in messages if m is not None]
    prepared = [m.prepared for m in done if m.prepared is not None]
    records = sum(m.records for m in done)
    if len(prepared) > MAX_JOINT_COMMIT:
        raise OutboxSinkError(f"sink {options.sink_id}: {len(prepared)} tasks wrote; the service commits at most "
                              f"{MAX_JOINT_COMMIT} prepared transactions together: coalesce() the DataFrame "
                              f"to {MAX_JOINT_COMMIT} partitions or fewer")
    pipeline = options.pipeline
    consumed: Mapping[TopicPartition, int] = {}
    if pipeline is not None and pipeline.consumed is not None:
        consumed = pipeline.consumed
    elif pipeline is not None:
        assert pipeline.checkpoint is not None and batch_id is not None  # parse_pipeline: streaming
        consumed = micro_batch_positions(pipeline.checkpoint, batch_id)
    if consumed:
        # A topic deleted since (a topicPattern's stream keeps its last positions) has no
        # offsets to move: the service would refuse the AddOffsets, and every commit after.
        gone = {tp.topic for tp in consumed} - existing_topics(options)
        if gone:
            logger.warning("sink %s: the consumed topics %s no longer exist; their positions are not committed",
                           options.sink_id, ", ".join(sorted(gone)))
            consumed = {tp: o for tp, o in consumed.items() if tp.topic not in gone}
    driver = _driver_producer(options)
    try:
        # Fences an earlier driver of this sink and aborts its unfinished transaction, with the
        # progress and positions it staged: what follows reads what really committed, and no
        # driver that started before this point can commit any more.
        driver.init_transactions()
        if batch_id is not None:
            last = last_committed_batch(options)
            # A batch id the sink committed already is a replay, unless the pipeline's offsets
            # say this batch's input was never committed: the query lost its checkpoint and
            # started again at batch 0 from the group's offsets (startingPositions=group).
            if last is not None and batch_id <= last and (
                    pipeline is None or _covers(group_offsets(options, pipeline.group), consumed)):
                logger.warning("sink %s: batch %d was committed already (last: %d); its %d records are "
                               "aborted, not written twice", options.sink_id, batch_id, last, records)
                take_over(options, [p.transactional_id for p in prepared])
                return CommitOutcome(False, replayed=True)
        if pipeline is not None and pipeline.expected is not None:
            now = group_offsets(options, pipeline.group)
            moved = {tp: now.get(tp) for tp in consumed if now.get(tp) != pipeline.expected.get(tp)}
            shown = lambda offset: "none" if offset is None else offset  # noqa: E731
            if moved:
                # Another run of this pipeline committed a batch since this one's read started:
                # its input is (partly) that batch's, and committing would write it twice.
                # Checked after the InitProducerId above, so no earlier run can commit after it.
                take_over(options, [p.transactional_id for p in prepared])
                raise OutboxSinkError(
                    f"sink {options.sink_id}: the group {pipeline.group}'s offsets moved since the read started "
                    f"({', '.join(f'{tp}: {shown(pipeline.expected.get(tp))} → {shown(o)}' for tp, o in sorted(moved.items()))}): "
                    "another run committed meanwhile; nothing of this batch is visible, run it again")
        leftovers = clean_leftovers(options, {p.transactional_id for p in prepared})
        progress_topic = options.topic or min((t for m in done for t in m.topics), default=None)
        record_progress = batch_id is not None and progress_topic is not None
        # A pipeline's batch moves its group's offsets even when it wrote nothing (all its
        # input filtered out): else the next run would read that input again.
        if not prepared and not record_progress and not consumed:
            return CommitOutcome(False, aborted_leftovers=leftovers)
        driver.begin_transaction()
        try:
            if record_progress:
                assert batch_id is not None and progress_topic is not None
                driver.send_offsets_to_transaction({(progress_topic, 0): batch_id + 1}, options.sink_id)
            if pipeline is not None and consumed:
                driver.send_offsets_to_transaction({(tp.topic, tp.partition): o for tp, o in consumed.items()},
                                                   pipeline.group)
            driver.commit_transaction(prepared=prepared)
        except BaseException as e:
            # Refused (a listed transaction is no longer Prepared: a newer attempt or an
            # operator aborted it) or unreachable: nothing of the batch committed. The driver's
            # own transaction is aborted so that its staged progress does not wait for a timeout.
            try:
                driver.abort_transaction()
            except ClientError:
                pass  # the next driver's InitProducerId aborts it
            if isinstance(e, RetriableError):
                # Unanswered within the deadline: the service may have committed. A replayed
                # micro-batch finds out (step 3); a batch write cannot.
                raise OutboxSinkError(f"sink {options.sink_id}: the commit of {len(prepared)} prepared transactions "
                                      f"was not answered ({e.error_code}: {e}); whether the batch committed is "
                                      "unknown: read the output before rerunning a batch write") from None
            if isinstance(e, ClientError):
                raise OutboxSinkError(f"sink {options.sink_id}: the commit of {len(prepared)} prepared transactions "
                                      f"was refused, nothing of the batch is visible: {e.error_code}: {e}") from None
            raise
        logger.info("sink %s: batch %s committed: %d records in %d transactions, commit %.2f s%s",
                    options.sink_id, batch_id, records, len(prepared), time.monotonic() - started,
                    f"; group {pipeline.group} at {positions_to_json(consumed)}" if pipeline is not None else "")
        return CommitOutcome(True, records, len(prepared), aborted_leftovers=leftovers)
    finally:
        driver.close()


def _covers(group: Mapping[TopicPartition, int], consumed: Mapping[TopicPartition, int]) -> bool:
    """The group's offsets are at or past every consumed position: the input was committed."""
    return all(group.get(tp, -1) >= position for tp, position in consumed.items())


def abort_batch(options: SinkOptions, messages: Sequence[SinkCommitMessage | None]) -> list[str]:
    """A failed batch: abort the prepared transactions of the tasks that finished, and any open
    one a failed task left (its message is None, so the list of open ones finds it)."""
    named = {m.prepared.transactional_id for m in messages if m is not None and m.prepared is not None}
    return take_over(options, sorted(named | set(open_transactions(options))))


# --- Spark's classes ----------------------------------------------------------------------------


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


# --- For the driver program ---------------------------------------------------------------------


def write_outbox(df: Any, **options: str) -> None:
    """df.write.format("outbox").mode("append").options(**options).save(), with the options, the
    columns, the service and the topic checked here first, so that a mistake is an
    OutboxSinkError of one line rather than a Python traceback inside Spark's exception."""
    from spark_jobs.datasource import register

    parsed = parse_sink_options(options, streaming=False)
    check_columns(df.schema, parsed)
    check_service(parsed)
    register(df.sparkSession)
    df.write.format("outbox").mode("append").options(**options).save()
