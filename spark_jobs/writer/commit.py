"""The sink's driver side: its checks before any task, and the one commit point of a batch.

How one batch (a batch write, or one micro-batch) is written, with one commit point:

1. Each Spark task writes its rows itself (spark_jobs.writer.task), on its executor, with its own transactional
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

import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from app.client import Producer
from app.client.errors import ClientError, RetriableError
from spark_jobs.common.positions import (
    TopicPartition,
    group_offsets as fetch_group_offsets,
    positions_from_dict,
    positions_to_json,
)
from spark_jobs.common.service import list_topics, service_session
from spark_jobs.errors import OutboxSinkError
from spark_jobs.writer.options import SinkOptions
from spark_jobs.writer.task import SinkCommitMessage, is_task_transactional_id, task_producer

logger = logging.getLogger(__name__)

# The Ongoing/Prepared transactions listed per cleanup (the API's own maximum)
LIST_LIMIT = 10_000
# A Commit names at most this many prepared transactions: app.domain.transaction.MAX_JOINT_COMMIT,
# copied as spark_jobs may not import the domain (tests/unit/test_joint_commit_limit.py holds them equal)
MAX_JOINT_COMMIT = 1_000
# The states of a transaction not decided yet, which a cleanup takes over:
# app.domain.transaction.UNDECIDED_STATES, copied (tests/unit/test_joint_commit_limit.py holds them equal)
UNDECIDED_STATES = ("Ongoing", "Prepared")


def check_service(options: SinkOptions) -> None:
    """The service answers with these credentials, and the option topic exists: checked on the
    driver when Spark builds the writer, before any task runs."""
    list_topics(options.url, options.api_key, OutboxSinkError)
    if options.topic is not None:
        with service_session(options.url, options.api_key) as session:
            try:
                session.call("GET", f"/v1/topics/{options.topic}", deadline_s=30)
            except ClientError as e:
                if e.error_code == "UNKNOWN_TOPIC_OR_PARTITION":
                    raise OutboxSinkError(f"option topic: the topic {options.topic!r} does not exist "
                                          "(create it first: POST /v1/topics)") from None
                raise OutboxSinkError(f"cannot describe the topic {options.topic!r}: {e.error_code}: {e}") from None
    # The service bounds a transaction's timeout (OUTBOX_MAX_TRANSACTION_TIMEOUT_MS) and says so
    # only in an InitProducerId: the driver's own id takes it here, as commit_batch's does later
    # (fencing an earlier driver of the sink, which that one does anyway), so that an option out
    # of range is this line, not a traceback of every task inside Spark's error.
    # (With the tasks' timeout, which is what is checked; commit_batch's InitProducerId sets
    # the driver's own, shorter one. No transaction is begun here.)
    driver = task_producer(options, options.sink_id)
    try:
        driver.init_transactions()
    except ClientError as e:
        if e.error_code == "INVALID_TRANSACTION_TIMEOUT":
            raise OutboxSinkError(f"option transactionTimeoutMs: the service refused "
                                  f"{options.transaction_timeout_ms}: {e}") from None
        raise OutboxSinkError(f"sink {options.sink_id}: the service refused its producer: {e}") from None
    finally:
        driver.close()


def _driver_producer(options: SinkOptions) -> Producer:
    """The driver's producer `<sinkId>`, with the service's default timeout: its transaction
    lives only from AddOffsets to Commit, and if the driver dies in between, its staged offsets
    stay pending (and a reader asking for stable offsets waits) until the coordinator aborts it."""
    return Producer(options.url, options.sink_id, api_key=options.api_key)


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
    with service_session(options.url, options.api_key) as session:
        # The service lists only this sink's family of ids, so other applications' open
        # transactions take none of the list's LIST_LIMIT places.
        answer = session.call("GET", "/v1/transactions",
                              params={"state": list(UNDECIDED_STATES), "limit": LIST_LIMIT,
                                      "transactional_id_prefix": f"{options.sink_id}."}, deadline_s=60)
    # The prefix `a.` lists another sink's `a.b.1` too.
    return sorted(t["transactional_id"] for t in answer["transactions"]
                  if is_task_transactional_id(options.sink_id, t["transactional_id"]))


def take_over(options: SinkOptions, transactional_ids: Iterable[str]) -> list[str]:
    """Abort each one's open or prepared transaction by taking its id over: InitProducerId
    without keep_prepared_txn fences the producer that had it and aborts its transaction (the
    contract's fencing), needing WRITE on the id only."""
    done = []
    for transactional_id in transactional_ids:
        producer = task_producer(options, transactional_id)
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
    with service_session(options.url, options.api_key) as session:
        return {t["name"] for t in session.call("GET", "/v1/topics", deadline_s=60)["topics"]}


def group_offsets(options: SinkOptions, group: str) -> dict[TopicPartition, int]:
    """The group's committed offsets, pending ones waited out (positions.group_offsets)."""
    with service_session(options.url, options.api_key) as session:
        return fetch_group_offsets(session, group)


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
