"""Producer: idempotent always, transactional when given a transactional_id."""

from __future__ import annotations

import itertools
import ssl
import zlib
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from app.client.backoff import DEFAULT_RETRY_BACKOFF_MAX_MS, DEFAULT_RETRY_BACKOFF_MS, ExponentialBackoff
from app.client.consumer import GroupMetadata
from app.client.errors import (
    EPOCH_BUMP_CODES,
    AbortableError,
    ClientError,
    FatalError,
    ProducerFencedError,
    RetriableError,
    UnknownTopicOrPartitionError,
)
from app.client.http import Session, credentials

TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class RecordMetadata:
    topic: str
    partition: int
    offset: int


@dataclass(frozen=True, slots=True)
class PreparedTxnState:
    """KIP-939: what names a prepared transaction, for the application to record in its own
    database's transaction (the txn_id) and compare after a restart (complete_transaction)."""

    transactional_id: str
    txn_id: int


class Producer:
    """Buffers records per partition and sends them in batches with sequence numbers.

    `send()` only buffers, up to `batch_records` records across partitions: a record that finds
    the buffer full writes it first. `flush()` (and `commit_transaction()`) writes the buffer in
    one request per `batch_records` records; under transaction version 2 the Commit carries
    the last `batch_records` or fewer itself. Retriable failures are retried
    with the same sequences, so a retry that reaches a batch already written is answered
    with its first offsets and writes nothing.

    Retries pause as Kafka's `retry.backoff.ms` / `retry.backoff.max.ms` say (KIP-580:
    doubling from `retry_backoff_ms`, capped at `retry_backoff_max_ms`, ±20 % jitter) and
    stop at the call's deadline (`delivery_timeout_s` for a Send). A topic that does not
    exist is UnknownTopicOrPartitionError at once, never retried.
    """

    def __init__(
        self,
        base_url: str,
        transactional_id: str | None = None,
        *,
        transaction_timeout_ms: int | None = None,
        batch_records: int = 5_000,
        delivery_timeout_s: float = 60.0,
        request_timeout_s: float = 30.0,
        retry_backoff_ms: int = DEFAULT_RETRY_BACKOFF_MS,
        retry_backoff_max_ms: int = DEFAULT_RETRY_BACKOFF_MAX_MS,
        client: httpx.Client | None = None,
        api_key: str | None = None,
        token: str | Callable[[], str] | None = None,
        tls: ssl.SSLContext | bool = True,
        transaction_version: int = 2,
        durability: str = "send",
    ) -> None:
        if transaction_version not in (1, 2):
            raise ValueError(f"transaction_version must be 1 or 2, not {transaction_version!r}")
        if durability not in ("send", "commit"):
            raise ValueError(f'durability must be "send" or "commit", not {durability!r}')
        if transaction_timeout_ms is not None and transactional_id is None:
            # Only a transactional producer's InitProducerId carries it.
            raise ValueError("transaction_timeout_ms needs a transactional_id: an idempotent producer has no "
                             "transaction to time out")
        if durability == "commit" and (transactional_id is None or transaction_version != 2):
            raise ValueError('durability "commit" needs a transactional_id and transaction_version 2')
        self.transactional_id = transactional_id
        self.transaction_version = transaction_version
        # "commit" (asked for explicitly: it trades each Send's durability for a count the
        # Commit must carry): the service answers a transactional Send before it is durable
        # and makes it durable with the Commit, which carries the records acknowledged
        # (`_acknowledged`) so that a Send a database crash lost is never committed around.
        # The service's answer says what it took.
        self.durability = durability
        self.transaction_timeout_ms = transaction_timeout_ms
        self.batch_records = batch_records
        self.delivery_timeout_s = delivery_timeout_s
        self._session = Session(
            base_url, request_timeout_s=request_timeout_s, client=client,
            backoff=ExponentialBackoff(retry_backoff_ms, retry_backoff_max_ms),
            auth=credentials(api_key, token), tls=tls,
        )
        self.producer_id: int | None = None
        self.producer_epoch: int | None = None
        self._txn_id: int | None = None
        self._in_transaction = False
        # Whether the service may hold the open transaction: under version 2 it begins with
        # the first Send or AddOffsets, so an empty transaction is never sent to the service.
        self._txn_started = False
        # A Commit went unanswered: it may have committed. Only commit_transaction() again
        # (the same request, answered again if it did) may follow, as in Kafka.
        self._commit_unknown = False
        self._prepared: PreparedTxnState | None = None
        # The records the service acknowledged in the open transaction (each Send answer's
        # record_count), which a Commit under durability "commit" carries.
        self._acknowledged = 0
        self._next_sequence: dict[TopicPartition, int] = defaultdict(int)
        self._buffer: dict[TopicPartition, list[dict]] = defaultdict(list)
        self._buffered = 0
        self._partition_counts: dict[str, int] = {}
        self._round_robin = itertools.count()
        self._abortable: ClientError | None = None
        self._needs_epoch_bump = False
        self._fatal: FatalError | None = None

    # --- lifecycle --------------------------------------------------------------------------

    def init_transactions(self, keep_prepared_txn: bool = False) -> PreparedTxnState | None:
        """InitProducerId: fences any earlier instance with this transactional_id and aborts
        its open transaction. Call once, before the first transaction.

        With `keep_prepared_txn` (KIP-939) a transaction the earlier instance prepared is kept
        and returned: read your own database for the decision, then complete_transaction()."""
        return self._init(recover=False, keep_prepared_txn=keep_prepared_txn)

    def _init(self, *, recover: bool, keep_prepared_txn: bool = False) -> PreparedTxnState | None:
        body: dict[str, Any] = {}
        if self.transactional_id is not None:
            body["transactional_id"] = self.transactional_id
            if self.transaction_timeout_ms is not None:
                body["transaction_timeout_ms"] = self.transaction_timeout_ms
            body["transaction_version"] = self.transaction_version
            if self.durability != "send":
                body["durability"] = self.durability
        if keep_prepared_txn:
            body["keep_prepared_txn"] = True
        if recover:
            body.update(producer_id=self.producer_id, producer_epoch=self.producer_epoch)
        answer = self._call("POST", "/v1/producers", json=body)
        self.producer_id, self.producer_epoch = answer["producer_id"], answer["producer_epoch"]
        if self.transactional_id is not None:
            # The version this producer speaks is the one the service answers, as Kafka's
            # clients take the version the brokers finalized: a service that predates version
            # 2 ignores the field it does not know and answers none, and speaking version 2 to
            # it (no BeginTransaction) would have every transaction's first Send refused.
            self.transaction_version = answer.get("transaction_version") or 1
            # A service that predates durability answers none: its Sends are all durable.
            self.durability = answer.get("durability") or "send"
        self._next_sequence.clear()
        self._needs_epoch_bump = False
        self._txn_started = False
        prepared_txn_id = answer.get("prepared_txn_id")
        if prepared_txn_id is None:
            self._prepared = None
            return None
        assert self.transactional_id is not None
        self._prepared = PreparedTxnState(self.transactional_id, prepared_txn_id)
        self._txn_id, self._in_transaction, self._txn_started = prepared_txn_id, True, True
        return self._prepared

    def close(self, timeout_s: float | None = None) -> None:
        """Writes what a plain or idempotent producer still buffers (flush()), then closes the
        connections, as Kafka's close() sends what it holds before it returns: a record given
        to send() is not lost by closing. `timeout_s` (Kafka's close(Duration)) bounds that
        write, `delivery_timeout_s` at most; 0 writes nothing and drops the buffer, what an
        error path wants (a service that does not answer would otherwise hold close() for the
        delivery timeout, and its error would replace the one being handled). A transactional
        producer's buffered records belong to its open transaction, which close() neither
        commits nor writes into: they are dropped, and the transaction is aborted by its
        timeout or the id's next init_transactions(). A producer already failed (a fatal or
        abortable error) writes nothing. If the write fails, the connections close all the
        same and its error is raised."""
        try:
            if (self.transactional_id is None and self._buffered and self._fatal is None and self._abortable is None
                    and (timeout_s is None or timeout_s > 0)):
                self._flush(self.delivery_timeout_s if timeout_s is None else min(self.delivery_timeout_s, timeout_s))
        finally:
            self._session.close()

    # --- transactions -----------------------------------------------------------------------

    def begin_transaction(self) -> None:
        """Open a transaction. Under transaction version 2 (the default) nothing is asked of the
        service: the transaction begins there with its first Send or offsets."""
        self._require_transactional()
        self._check_usable()
        self._check_commit_answered()
        if self._in_transaction:
            raise FatalError("INVALID_TXN_STATE", "a transaction is already open")
        self._ident()  # init_transactions() first
        self._txn_id = None
        self._acknowledged = 0
        if self.transaction_version == 1:
            self._begin_on_service()
        self._in_transaction = True
        self._abortable = None

    def _begin_on_service(self) -> None:
        try:
            answer = self._call("POST", f"/v1/transactions/{self.transactional_id}/begin", json=self._ident())
        except FatalError as e:
            # A retry of a Begin whose answer was lost finds its own empty transaction open.
            answer = self._adopt_empty_transaction(e)
        self._txn_id = answer["txn_id"]
        self._txn_started = True

    def send(
        self,
        topic: str,
        value: Any,
        key: str | None = None,
        partition: int | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        """Buffer a record. `value`: any value json.dumps encodes, or a JsonText, sent as that
        JSON text as it is (stored as a Send of the same text stores it). `headers`: None sends
        none (stored as null); a dict is sent as it is, {} included (stored as {})."""
        self._check_usable()
        self._check_commit_answered()
        if self.transactional_id is not None and not self._in_transaction:
            raise FatalError("INVALID_TXN_STATE", "send() outside a transaction: call begin_transaction()")
        if self.producer_id is None:
            self._init(recover=False)  # an idempotent producer initialises on first use
        # The topic is looked up before anything is buffered, so a topic that does not exist
        # is refused here and leaves the transaction as it was.
        count = self._partition_count(topic, at_least=None if partition is None else partition + 1)
        if partition is None:
            partition = self._partition_for(key, count)
        elif not 0 <= partition < count:
            raise UnknownTopicOrPartitionError(
                "UNKNOWN_TOPIC_OR_PARTITION", f"topic {topic!r} has partitions 0..{count - 1}; got {partition}",
                topic=topic,
            )
        record: dict[str, Any] = {"value": value}
        if key is not None:
            record["key"] = key
        if headers is not None:  # {} is sent, and stored, as {}: a Send's empty headers
            record["headers"] = headers
        if self._buffered >= self.batch_records:
            # Written when a record no longer fits, not as soon as the buffer fills: a version 2
            # transaction of exactly `batch_records` records then goes whole with its Commit, one
            # request and one durable write where a Send and a Commit are two.
            self.flush()
        self._buffer[(topic, partition)].append(record)
        self._buffered += 1

    def flush(self) -> list[RecordMetadata]:
        """Write everything buffered. Returns the first offset of each batch written."""
        return self._flush(self.delivery_timeout_s)

    def _flush(self, deadline_s: float) -> list[RecordMetadata]:
        """flush(), each request retried until `deadline_s` has passed."""
        self._check_usable()
        written: list[RecordMetadata] = []
        while self._buffer:
            taken, batches = 0, []
            for tp in list(self._buffer):
                records = self._buffer[tp]
                chunk = records[: max(1, self.batch_records - taken)]
                batches.append((tp, chunk))
                taken += len(chunk)
                if taken >= self.batch_records:
                    break
            written.extend(self._send_batches(batches, deadline_s))
            for tp, chunk in batches:
                rest = self._buffer[tp][len(chunk):]
                if rest:
                    self._buffer[tp] = rest
                else:
                    del self._buffer[tp]
                self._buffered -= len(chunk)
        return written

    def _send_batches(self, batches: list[tuple[TopicPartition, list[dict]]], deadline_s: float) -> list[RecordMetadata]:
        body: dict[str, Any] = {
            **self._ident(),
            "batches": [
                {"topic": t, "partition": p, "base_sequence": self._next_sequence[(t, p)], "records": recs}
                for (t, p), recs in batches
            ],
        }
        if self.transactional_id is not None:
            body["transactional_id"] = self.transactional_id
            self._txn_started = True  # whatever the answer: the request may have begun it
        try:
            answer = self._call("POST", "/v1/records", json=body, deadline_s=deadline_s)
        except UnknownTopicOrPartitionError as e:
            # Deleted since send() looked it up. Nothing of the request was written (a Send is
            # all or nothing), so the sequences hold; but the transaction lacks these records
            # and must not commit, as in Kafka after a failed send.
            topics = {t for (t, _), _ in batches}
            for t in topics:
                self._partition_counts.pop(t, None)
            if e.topic is None and len(topics) == 1:
                e.topic = next(iter(topics))
            self._abortable = e
            raise
        except ClientError as e:
            # Whether the request was written is unknown (or the sequences are refused): the
            # transaction must abort, and the sequences restart under a bumped epoch.
            if not isinstance(e, FatalError):
                self._needs_epoch_bump = e.error_code in EPOCH_BUMP_CODES or isinstance(e, RetriableError)
                self._abortable = e if isinstance(e, AbortableError) else AbortableError(e.error_code, e.message, e.status)
                raise self._abortable from e
            raise
        for (tp, recs) in batches:
            self._next_sequence[tp] += len(recs)
        if self.durability == "commit":
            self._acknowledged += sum(r["record_count"] for r in answer["results"])
        if answer.get("txn_id") is not None:
            self._txn_id = answer["txn_id"]
        return [RecordMetadata(r["topic"], r["partition"], r["base_offset"]) for r in answer["results"]]

    def send_offsets_to_transaction(
        self, offsets: dict[TopicPartition, int], group_metadata: GroupMetadata | str
    ) -> None:
        """Stage the consumer's positions in the transaction (KIP-447 fencing when given the
        consumer's group_metadata())."""
        self._require_transactional()
        self._check_usable()
        self._check_commit_answered()
        if not offsets:
            return
        body: dict[str, Any] = {
            **self._ident(),
            "offsets": [{"topic": t, "partition": p, "offset": o} for (t, p), o in sorted(offsets.items())],
        }
        if isinstance(group_metadata, GroupMetadata):
            body["group_id"] = group_metadata.group_id
            body["read_order"] = group_metadata.read_order
            if group_metadata.member_id is not None:
                body.update(generation_id=group_metadata.generation_id, member_id=group_metadata.member_id)
        else:
            body["group_id"] = group_metadata
        self._txn_started = True
        try:
            answer = self._call("POST", f"/v1/transactions/{self.transactional_id}/offsets", json=body)
        except (AbortableError, UnknownTopicOrPartitionError) as e:
            # Committing without the offsets would make the output be produced again.
            self._abortable = e
            raise
        self._txn_id = answer["txn_id"]

    def prepare_transaction(self) -> PreparedTxnState:
        """KIP-939: send what is buffered, then make the transaction Prepared: it takes nothing
        more, never times out, and waits for commit_transaction() or abort_transaction(), from
        this producer or from the next instance (init_transactions(keep_prepared_txn=True)).
        Record the answer in your own database's transaction before committing here."""
        self._require_transactional()
        self._check_commit_answered()
        self.flush()
        self._check_usable()
        if not self._txn_started:
            self._begin_on_service()  # an empty transaction, prepared all the same
        self._call(
            "POST",
            f"/v1/transactions/{self.transactional_id}/prepare",
            json={**self._ident(), "txn_id": self._txn_id, **self._count(0)},
        )
        assert self.transactional_id is not None and self._txn_id is not None
        self._prepared = PreparedTxnState(self.transactional_id, self._txn_id)
        return self._prepared

    def complete_transaction(self, recorded: PreparedTxnState | None) -> bool:
        """KIP-939's completeTransaction: commit the prepared transaction if `recorded` (what
        your database holds, None if nothing) names it, abort it otherwise. Returns whether
        it committed."""
        if self._prepared is None:
            raise FatalError("INVALID_TXN_STATE", "no prepared transaction to complete")
        commit = recorded == self._prepared
        if commit:
            self.commit_transaction()
        else:
            self.abort_transaction()
        return commit

    def commit_transaction(self, prepared: Sequence[PreparedTxnState] = ()) -> None:
        """Commit the open (or prepared) transaction. `prepared` names transactions other
        producers prepared (prepare_transaction() returned them): they commit in the same
        decision as this one, all or none (a joint commit)."""
        self._require_transactional()
        if self.transaction_version == 2 and not prepared and 0 < self._buffered <= self.batch_records:
            self._commit_with_buffer()
            return
        self.flush()
        self._check_usable()
        if not self._txn_started:
            if not prepared:
                self._ended()  # version 2: nothing was sent, so the service holds nothing to commit
                return
            self._begin_on_service()  # the transaction the others are committed with
        # A Prepared transaction was counted by its Prepare (and may be an earlier instance's).
        body: dict[str, Any] = {**self._ident(), "txn_id": self._txn_id,
                                **(self._count(0) if self._prepared is None else {})}
        if prepared:
            body["prepared"] = [{"transactional_id": p.transactional_id, "txn_id": p.txn_id} for p in prepared]
        self._ended(self._commit(body))

    def _count(self, carried: int) -> dict[str, int]:
        """The Commit's count under durability "commit": the records acknowledged in this
        transaction and the `carried` ones the Commit appends."""
        return {"acknowledged_records": self._acknowledged + carried} if self.durability == "commit" else {}

    def _commit(self, body: dict[str, Any], **kwargs: Any) -> Any:
        try:
            answer = self._call("POST", f"/v1/transactions/{self.transactional_id}/commit", json=body, **kwargs)
        except RetriableError:
            self._commit_unknown = True
            raise
        except AbortableError as e:
            # The transaction cannot commit (TRANSACTION_INCOMPLETE: the service has aborted it
            # and bumped the epoch): only abort_transaction() may follow, or a second commit
            # would carry the old epoch and be taken for a fenced producer.
            self._abortable = e
            raise
        self._commit_unknown = False
        return answer

    def _check_commit_answered(self) -> None:
        if self._commit_unknown:
            raise FatalError("INVALID_TXN_STATE", "the last commit_transaction() was not answered and may have "
                             "committed: call commit_transaction() again, which the service answers as it did")

    def _commit_with_buffer(self) -> None:
        """Version 2: what is buffered (one request's worth) goes with the Commit, appended and
        committed in one request. The buffer is kept until the answer: if the Commit fails
        retriably, calling commit_transaction() again sends the same request, which the service
        answers again without appending should the first have committed."""
        self._check_usable()
        body: dict[str, Any] = {
            **self._ident(),
            "batches": [
                {"topic": t, "partition": p, "base_sequence": self._next_sequence[(t, p)], "records": recs}
                for (t, p), recs in self._buffer.items()
            ],
            **self._count(self._buffered),
        }
        if self._txn_id is not None:
            body["txn_id"] = self._txn_id
        self._txn_started = True  # whatever the answer: the request may have begun it
        try:
            answer = self._commit(body, deadline_s=self.delivery_timeout_s)
        except ClientError as e:
            if isinstance(e, (FatalError, RetriableError)):
                raise
            # Refused (a sequence, a deleted topic): nothing of it was written or committed, and
            # the transaction must abort, as after a refused Send.
            self._needs_epoch_bump = e.error_code in EPOCH_BUMP_CODES
            self._abortable = e if isinstance(e, (AbortableError, UnknownTopicOrPartitionError)) else \
                AbortableError(e.error_code, e.message, e.status)
            raise self._abortable from e
        self._buffer.clear()
        self._buffered = 0
        self._ended(answer)

    def _ended(self, answer: dict | None = None) -> None:
        """The transaction is over. Under version 2 the service's answer carries the producer's
        next epoch (a new producer id once the epoch is exhausted), whose sequences start at 0."""
        self._in_transaction = self._txn_started = False
        self._prepared = None
        self._txn_id = None
        self._acknowledged = 0
        if answer is not None and answer.get("producer_epoch") is not None and (
                answer["producer_id"], answer["producer_epoch"]) != (self.producer_id, self.producer_epoch):
            self.producer_id, self.producer_epoch = answer["producer_id"], answer["producer_epoch"]
            self._next_sequence.clear()

    def abort_transaction(self) -> None:
        """Abort the open transaction and drop what is still buffered. After an error that
        left the sequences unknown, also bump the epoch (KIP-360) to go on under the same
        producer id; if another instance took over meanwhile, this raises ProducerFencedError."""
        self._require_transactional()
        if self._fatal is not None:
            raise self._fatal
        self._check_commit_answered()
        self._buffer.clear()
        self._buffered = 0
        answer = None
        try:
            if self._in_transaction and self._txn_started:
                answer = self._call(
                    "POST",
                    f"/v1/transactions/{self.transactional_id}/abort",
                    json={**self._ident(), "txn_id": self._txn_id},
                )
        except AbortableError:
            pass  # nothing of it can commit; the epoch bump below resolves it
        except FatalError as e:
            # Version 2: a Send whose answer was lost may never have begun the transaction.
            if e.error_code != "INVALID_TXN_STATE" or self.transaction_version == 1:
                raise
        self._ended(answer)
        self._abortable = None
        # Under version 2 the Abort itself bumped the epoch, which restarts the sequences.
        if self._needs_epoch_bump and (answer is None or self.transaction_version == 1):
            self._init(recover=True)
        self._needs_epoch_bump = False

    def describe_transaction(self) -> dict[str, Any]:
        """The transactional id's transaction as the service holds it (GET
        /v1/transactions/{transactional_id}: its state, txn_id, producer id and epoch,
        partitions and staged offsets): what tells an application whose Commit went unanswered
        (interrupted, say) whether it committed. A read: it changes nothing here or there."""
        self._require_transactional()
        return self._session.call("GET", f"/v1/transactions/{self.transactional_id}")

    # --- helpers ----------------------------------------------------------------------------

    def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            return self._session.call(method, path, **kwargs)
        except FatalError as e:
            if isinstance(e, ProducerFencedError) or e.error_code != "INVALID_TXN_STATE":
                self._fatal = e
            raise

    def _ident(self) -> dict[str, Any]:
        if self.producer_id is None:
            raise FatalError("INVALID_TXN_STATE", "call init_transactions() first")
        return {"producer_id": self.producer_id, "producer_epoch": self.producer_epoch}

    def _require_transactional(self) -> None:
        if self.transactional_id is None:
            raise FatalError("INVALID_TXN_STATE", "this producer has no transactional_id")

    def _check_usable(self) -> None:
        if self._fatal is not None:
            raise self._fatal
        if self._abortable is not None:
            raise self._abortable

    def _adopt_empty_transaction(self, error: FatalError) -> dict:
        if error.error_code != "INVALID_TXN_STATE":
            raise error
        txn = self._call("GET", f"/v1/transactions/{self.transactional_id}")
        if (
            txn["state"] == "Ongoing"
            and (txn["producer_id"], txn["producer_epoch"]) == (self.producer_id, self.producer_epoch)
            and not txn["partitions"]
            and not txn["pending_offsets"]
        ):
            return txn
        raise error

    def partitions_for(self, topic: str) -> list[int]:
        """The topic's partitions (Kafka's partitionsFor); UnknownTopicOrPartitionError if the
        topic does not exist. Asks the service the first time, then answers from memory."""
        return list(range(self._partition_count(topic)))

    def _partition_count(self, topic: str, at_least: int | None = None) -> int:
        count = self._partition_counts.get(topic)
        if count is None or (at_least is not None and count < at_least):  # partitions may have been added
            try:
                count = self._call("GET", f"/v1/topics/{topic}")["partition_count"]
            except UnknownTopicOrPartitionError as e:
                e.topic = topic
                raise
            self._partition_counts[topic] = count
        return count

    def _partition_for(self, key: str | None, count: int) -> int:
        if key is None:
            return next(self._round_robin) % count
        # A stable hash, so one key always lands in one partition.
        return zlib.crc32(key.encode()) % count
