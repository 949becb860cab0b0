"""Produce over the Kafka door (API key 0): each partition's record batch read and checked as
Kafka's LogValidator checks it, its decompressing taken from the request's bound
(app.kafka.decompressed), and appended through LogService.send as the HTTP door's Send is;
the value format of the topics produced to remembered (VALUE_FORMATS_REMEMBERED), and read
again once for a topic deleted and created again in the other format. app.kafka.apis holds
the dispatch table."""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from aiokafka.record.default_records import DefaultRecordBatch
from kio.schema.errors import ErrorCode

from app.domain import acl
from app.domain.acl import Operation
from app.domain.errors import ConcurrentTransactions, InvalidRecord, OutboxError
from app.domain.records import check_record_count
from app.domain.types import TransactionVersion, ValueFormat
from app.kafka import records
from app.kafka.api_keys import ApiKey, transaction_version
from app.kafka.auth import access, refusal_code
from app.kafka.decompressed import CODECS, BudgetSpent, DecompressedBudget
from app.kafka.errors import error_code, transactional_code
from app.kafka.protocol import NO_WAIT, CloseConnection, build, partitions_once, response_module

# The acks a producer may ask for: none (0), the leader's (1), every in-sync replica's (-1).
# Here each is the same durable append, but any other value is refused before anything is
# read, as Kafka's replica manager refuses it (INVALID_REQUIRED_ACKS for every partition):
# answered NONE, a client that misconfigured its acks would believe some guarantee held.
VALID_ACKS = frozenset({0, 1, -1})

# The topics whose value format Produce remembers, the most recently produced to: what a
# listener holds does not grow with the number of topics, nor with what its callers name.
VALUE_FORMATS_REMEMBERED = 1_024


@dataclass(frozen=True, slots=True)
class Produced:
    """What a Produce of one partition's records came to: its error code and message, the base
    offset written (-1 if none), and the records of the batch at fault by index, if any."""

    code: ErrorCode
    message: str | None
    base_offset: int
    record_indexes: tuple[int, ...] = ()


class ProduceApi:
    def __init__(self, services: Any) -> None:
        self.services = services
        self.settings = services.settings
        # topic -> its value format, least recently produced to first (_value_format). Handlers
        # run in worker threads at once: the lock keeps each look-up and eviction whole.
        self._formats: OrderedDict[str, ValueFormat] = OrderedDict()
        self._formats_lock = threading.Lock()

    def produce(self, body: Any, version: int) -> Any:
        """The answer, or None for acks=0 (Kafka sends none: the client does not read one)."""
        m = response_module(ApiKey.PRODUCE, version)
        assert m is not None
        topics = []
        # As Kafka: without WRITE on the transactional id every partition is refused with it;
        # else each topic without WRITE. Nothing of a refused partition is read or written.
        refusal = (None if body.transactional_id is None
                   else refusal_code(Operation.WRITE, acl.transactional_id(body.transactional_id)))
        # The request's records, decompressed, within the request bound all together: a batch
        # past what the batches before it left is NOT_ENOUGH_REPLICAS, and so is every one
        # after it (app.kafka.decompressed).
        budget = DecompressedBudget(self.settings.kafka_socket_request_max_bytes)
        # As Kafka's handleProduceRequest: the partitions into a map, so a partition named more
        # than once is answered once and written with the records it was last named with; the
        # records of its earlier entries are not read. Each topic answered once, as Kafka's.
        written = partitions_once(((t.name, p.index, p) for t in body.topic_data for p in t.partition_data),
                                  each_topic_once=True)
        # Every topic named is checked before any partition is written, as Kafka's authorizer
        # is asked for all of them first: one named with no partition too, which is then not
        # answered (the answer is its partitions'). Checked topic by topic among the writes, it
        # was left unchecked, found so after the others were written, and the connection closed
        # unanswered: the client's retry wrote them again.
        # A partition the principal may write is then refused for acks outside VALID_ACKS.
        unacked = None if body.acks in VALID_ACKS else ErrorCode.invalid_required_acks
        denials = {name: refusal or refusal_code(Operation.WRITE, acl.topic(name)) or unacked
                   for name in dict.fromkeys(t.name for t in body.topic_data)}
        access().hold_to_rules(ApiKey.PRODUCE, body)
        for topic, named in written:
            answered = []
            denied = denials[topic]
            for p in named:
                if denied is not None:
                    answered.append(build(m.PartitionProduceResponse, index=p.index, error_code=denied,
                                          base_offset=-1, log_append_time=None, log_start_offset=-1,
                                          record_errors=(), error_message=None))
                    continue
                done = self._produce_partition(topic, p.index, p.records, body.transactional_id, version, budget)
                record_errors = tuple(build(m.BatchIndexAndErrorMessage, batch_index=i,
                                            batch_index_error_message=f"record {i} of the batch: {done.message}")
                                      for i in done.record_indexes) if version >= 8 else ()
                answered.append(build(m.PartitionProduceResponse, index=p.index, error_code=done.code,
                                      base_offset=done.base_offset, log_append_time=None, log_start_offset=-1,
                                      record_errors=record_errors, error_message=done.message))
            topics.append(build(m.TopicProduceResponse, name=topic, partition_responses=tuple(answered)))
        if body.acks == 0:
            failed = [(t.name, p.index, p.error_code.name) for t in topics for p in t.partition_responses
                      if p.error_code != ErrorCode.none]
            if failed:
                raise CloseConnection(f"a Produce with acks=0 failed: {failed}")
            return None
        return build(m.ProduceResponse, responses=tuple(topics), throttle_time=NO_WAIT)

    def _produce_partition(self, topic: str, partition: int, data: bytes | None,
                           transactional_id: str | None, version: int, budget: DecompressedBudget) -> Produced:
        """What one partition's records came to, its decompressing taken from the request's
        `budget`. A transactional Produce of version 12 or later (transaction version 2) begins
        the producer's next transaction if none is open, as Kafka's partition leader adds the
        partition to it."""
        spoken = None if transactional_id is None else transaction_version(ApiKey.PRODUCE, version)
        # Who sends, as the HTTP door's Send passes it: an idempotent producer id is usable by
        # the principal it was handed to only (LogService.send).
        principal = access().principal.name
        raw = bytes(data or b"")
        try:
            batches = records.read_batches(raw)
        except Exception as e:  # noqa: BLE001 - aiokafka's reader raises several kinds for bytes it cannot read
            return Produced(ErrorCode.corrupt_message, f"the record batches cannot be read: {e}", -1)
        if len(batches) != 1:
            return Produced(ErrorCode.invalid_record, "a partition's records must be one record batch", -1)
        (batch,) = batches
        if not isinstance(batch, DefaultRecordBatch) or batch.magic != 2:
            return Produced(ErrorCode.unsupported_for_message_format, "only record batches of magic 2 are taken", -1)
        if not batch.validate_crc():
            return Produced(ErrorCode.corrupt_message, "the record batch's CRC-32C does not match its bytes", -1)
        if batch.compression_type not in CODECS:
            # Its records cannot be read: answered for this partition, as a batch that does
            # not match its CRC is, before anything of it is read (aiokafka's reader raised
            # UnsupportedCodecError, which closed the connection unanswered with the Produce's
            # earlier partitions written, and a client's retry wrote them again).
            return Produced(ErrorCode.corrupt_message,
                            f"the record batch's compression codec {batch.compression_type} is none of Kafka's", -1)
        if batch.is_control_batch:
            return Produced(ErrorCode.invalid_record, "a producer cannot write control batches", -1)
        if (transactional_id is not None) != batch.is_transactional:
            return Produced(ErrorCode.invalid_request if transactional_id is None else ErrorCode.invalid_record,
                            "a transactional record batch goes with the request's transactional_id, and only it", -1)
        count = records.record_count(raw)
        if count < 1:
            return Produced(ErrorCode.invalid_record, "a record batch holds at least one record", -1)
        if count != batch.last_offset_delta + 1:
            # Kafka's LogValidator refuses it so too. The count is what is read, the offsets what
            # the limit below would otherwise be checked on: 10 records claiming one passed it.
            return Produced(ErrorCode.invalid_record, f"the record batch holds {count} records and its offset "
                            f"deltas run to {batch.last_offset_delta}", -1)
        try:
            check_record_count(count, self.settings.max_records_per_request)
            budget.take(raw, batch.compression_type)
            producer = batch.producer_id != records.NO_PRODUCER_ID

            def appended(batch: DefaultRecordBatch, value_format: ValueFormat) -> Any:
                (result,) = self.services.log.send(
                    [records.send_batch(topic, partition, batch, self.services.clock(), value_format)],
                    producer_id=batch.producer_id if producer else None,
                    producer_epoch=batch.producer_epoch if producer else None, transactional_id=transactional_id,
                    principal=principal, transaction_version=spoken)
                return result

            value_format = self._value_format(topic)
            try:
                result = appended(batch, value_format)
            except InvalidRecord:
                if self._value_format(topic, again=True) is value_format:
                    raise
                # The topic was deleted and created again in the other format since it was
                # remembered: build the batch for the format it has now, once, from the bytes
                # read afresh (aiokafka's batch reads its records once; a second pass found none
                # and raised, and the client's retry on a new connection had done the rest).
                (batch,) = records.read_batches(raw)
                result = appended(batch, self._value_format(topic))
        except InvalidRecord as e:  # INVALID_TIMESTAMP for a timestamp (InvalidTimestamp)
            return Produced(error_code(e), e.message, -1, e.record_indexes)
        except BudgetSpent as e:
            # The batches before it took the request's decompressed bound: this one is not at
            # fault, and NOT_ENOUGH_REPLICAS is what every producer retries as not written
            # (RECORD_LIST_TOO_LARGE, not retriable, lost its records).
            return Produced(ErrorCode.not_enough_replicas, str(e), -1)
        except ConcurrentTransactions as e:
            if spoken is not TransactionVersion.V2:
                return Produced(ErrorCode.concurrent_transactions, e.message, -1)
            # Version 2: the first Produce of the next transaction, sent as soon as EndTxn
            # answered, finds the previous one still completing (OUTBOX_COMPLETE_INLINE off).
            # Kafka's partition leader answers that NOT_ENOUGH_REPLICAS, which every producer
            # retries (it takes CONCURRENT_TRANSACTIONS from a Produce as an error of its own).
            return Produced(ErrorCode.not_enough_replicas, e.message, -1)
        except OutboxError as e:
            return Produced(transactional_code(e, ApiKey.PRODUCE, version), e.message, -1)
        return Produced(ErrorCode.none, None, result.base_offset)

    def _value_format(self, topic: str, *, again: bool = False) -> ValueFormat:
        """The topic's value format, remembered for the VALUE_FORMATS_REMEMBERED topics most
        recently produced to: a topic's format is chosen when it is created and never changed
        (docs/ARCHITECTURE.md, "Record formats"). `again`: read it anew (the topic may have
        been created again since). UNKNOWN_TOPIC_OR_PARTITION for a topic that does not exist,
        which is not remembered."""
        with self._formats_lock:
            known = None if again else self._formats.get(topic)
            if known is not None:
                self._formats.move_to_end(topic)
                return known
        known = self.services.topics.get(topic).config.value_format  # outside the lock: a database read
        with self._formats_lock:
            self._formats[topic] = known
            self._formats.move_to_end(topic)
            while len(self._formats) > VALUE_FORMATS_REMEMBERED:
                self._formats.popitem(last=False)
        return known
