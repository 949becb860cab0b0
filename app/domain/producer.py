"""Idempotent-producer rules: per (producer, partition) sequence numbers (docs/GUARANTEES.md#no-duplicates).

A batch carries `base_sequence`; its records take base_sequence .. base_sequence+n-1.
The service remembers, per producer and partition, the epoch, the last sequence written,
and the last batch (its base sequence, size and first offset); the batches before it are read
back from their rows only for a batch that overlaps what was written. A retry of any of the
producer's last RETAINED_BATCHES batches in its epoch is answered with the offsets that batch
was first given, and writes nothing.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import islice

from app.domain.errors import (
    DuplicateSequenceNumber,
    InvalidProducerEpoch,
    InvalidRequest,
    OutOfOrderSequenceNumber,
    UnknownProducerId,
)
from app.domain.types import MAX_PRODUCER_EPOCH

MAX_SEQUENCE = 2**31 - 1

# How many of a producer's latest batches in a partition, in its epoch, a retry is recognised
# for: Kafka's brokers keep as many, so that a producer with up to 5 requests in flight may
# retry any of them after a lost answer.
RETAINED_BATCHES = 5


@dataclass(frozen=True, slots=True)
class StoredProducer:
    """A producer id as stored: its epoch, its transactional id if it has one, and the
    principal InitProducerId handed it to (None for ids the service made itself, and for ids
    handed out before producers were bound to their holders)."""

    producer_id: int
    producer_epoch: int
    transactional_id: str | None
    principal: str | None
    # Taken back by an idempotent Send after producer expiry forgot it (its epoch not bumped
    # since): its sequences did not start where it has no state (check_sequence's taken_back).
    taken_back: bool = False

    def check_idempotent_use(self, principal: str, producer_epoch: int) -> None:
        """What an idempotent producer's request (a Send, or InitProducerId bumping its own
        epoch) needs of its producer id: held by the caller, without a transactional id, at
        this epoch. Storage tests the same for a Send in the statement that writes each batch's
        sequence state (app.storage.sequence_state, `holder`), and asks this only when that
        statement wrote nothing, for the refusal to give."""
        self.require_holder(principal)
        if self.transactional_id is not None:
            # Which transactional id is not said: the caller may not be allowed to know it.
            raise InvalidRequest(
                f"producer {self.producer_id} belongs to a transactional_id: use it with that "
                "transactional_id (transactional_id in the request)"
            )
        if producer_epoch != self.producer_epoch:
            raise InvalidProducerEpoch(
                f"producer epoch {producer_epoch} is not the current epoch {self.producer_epoch}"
            )

    def require_holder(self, principal: str) -> None:
        """Only the principal the id was handed to may send or bump its epoch with it without
        a transactional id (a transactional producer is its transactional id's, which its ACL
        guards). Anyone else is answered as if the id did not exist: producer ids are small
        sequential numbers, so a stranger could otherwise fence another principal's producer,
        break its sequences on a topic both may write, or learn which ids are transactional."""
        require_holder(self.producer_id, self.principal, principal)

    def epoch_raise(self, principal: str, producer_epoch: int) -> EpochRaise:
        """What a Send at `producer_epoch`, refused at this row's epoch, does to a row taken back
        (storage.producers.raise_taken_back_epoch): raises it where it is taken back, its
        sender's, without a transactional id, and at a lower epoch than the Send's, which a
        producer can have (check_producer_epoch); judged again where it is already at that epoch
        (a concurrent Send of the same sender raised it); refused otherwise (a lower epoch
        stays refused, and a row made by InitProducerId or bumped since is judged as any)."""
        if not self.taken_back or self.transactional_id is not None or self.principal != principal:
            return EpochRaise.REFUSED
        if producer_epoch == self.producer_epoch:
            return EpochRaise.ALREADY_RAISED
        if self.producer_epoch < producer_epoch and is_producer_epoch(producer_epoch):
            return EpochRaise.RAISE
        return EpochRaise.REFUSED


class EpochRaise(enum.Enum):
    """StoredProducer.epoch_raise's verdict."""

    RAISE = "raise"
    ALREADY_RAISED = "already raised"
    REFUSED = "refused"


def is_producer_epoch(producer_epoch: int) -> bool:
    """An epoch a producer can have: 0 to MAX_PRODUCER_EPOCH (Kafka's int16 epochs, less the
    negative ones, which mean none)."""
    return 0 <= producer_epoch <= MAX_PRODUCER_EPOCH


def check_producer_epoch(producer_epoch: int) -> None:
    """An epoch a producer can have, 0 to MAX_PRODUCER_EPOCH, for a row made from a Send's
    (storage.producers.take_back_producer): the Kafka door passes a batch's int16 epoch through
    as it is, and a row at epoch -1 would be a producer no bump can follow. InvalidProducerEpoch
    otherwise, what a live row's Send at such an epoch is answered (no row holds one)."""
    if not is_producer_epoch(producer_epoch):
        raise InvalidProducerEpoch(f"producer epoch {producer_epoch} is outside 0..{MAX_PRODUCER_EPOCH}")


def require_holder(producer_id: int, holder: str | None, principal: str) -> None:
    """The holder rule of StoredProducer.require_holder, which a take-back of a forgotten id
    keeps too while its row of forgotten_producers lives (storage.producers.take_back_producer): anyone
    but `holder` is answered as if the id did not exist."""
    if holder != principal:
        raise UnknownProducerId(f"unknown producer id {producer_id}; call InitProducerId")


@dataclass(frozen=True, slots=True)
class ActiveProducer:
    """A producer's state in one partition as an operator sees it (Kafka's DescribeProducers):
    its epoch and last sequence there, when it last wrote, and the first offset of its open
    transaction in the partition (None: none open there)."""

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp_ms: int
    current_txn_start_offset: int | None


@dataclass(frozen=True, slots=True)
class WrittenBatch:
    """One of a producer's batches as it was written in a partition: its sequences and the
    base offset its first write answered. check_sequence answers a retry of it with this."""

    base_sequence: int
    record_count: int
    base_offset: int


@dataclass(frozen=True, slots=True)
class ProducerPartitionState:
    producer_epoch: int
    last_sequence: int
    last_batch_base_sequence: int
    last_batch_record_count: int
    last_batch_base_offset: int

    @property
    def last_batch(self) -> WrittenBatch:
        return WrittenBatch(self.last_batch_base_sequence, self.last_batch_record_count, self.last_batch_base_offset)


class BatchVerdict(enum.Enum):
    """check_sequence's verdict on a batch to write (a retry is answered with the WrittenBatch it
    repeats instead)."""

    APPEND = "append"


# A producer's earlier batches in a partition, as check_sequence asks for them with
# (producer_epoch, before_offset, count): its batches of that epoch written below that offset,
# the latest first, at most `count` (fewer where there are fewer, or where they can no longer be
# found: app.storage.sequence_state.earlier_batches).
EarlierBatches = Callable[[int, int, int], Sequence[WrittenBatch]]


def _none_earlier(producer_epoch: int, before_offset: int, count: int) -> Sequence[WrittenBatch]:
    return ()


@dataclass(frozen=True, slots=True)
class NextBatchCondition:
    """What the stored state must hold for a batch to be the producer's next one here."""

    producer_epoch: int
    last_sequence: int


def next_batch_condition(
    producer_epoch: int, base_sequence: int, record_count: int
) -> NextBatchCondition | None:
    """check_sequence's common case as a condition on the stored state, which storage can test
    in the statement that writes the new state: a batch is appended when the state has the
    batch's epoch and ends just before base_sequence. Nearly every batch of a running
    producer is such a batch; any state that fails the condition goes to check_sequence.

    None when no stored state can make the batch the next one in its epoch: a batch at
    sequence 0 (a new producer or epoch, which needs no state or an older one) or one that
    would pass 2^31-1 (refused). Those go straight to check_sequence.
    """
    if base_sequence == 0 or base_sequence + record_count - 1 > MAX_SEQUENCE:
        return None
    return NextBatchCondition(producer_epoch, base_sequence - 1)


def starts_epoch(base_sequence: int, record_count: int) -> bool:
    """check_sequence's other common case as a condition on the stored state: a batch at
    sequence 0 (within the sequence range) is appended when there is no stored state or the
    stored epoch is older than the batch's, which storage can test in the statement that writes
    the new state (an upsert that overwrites an older epoch only). The first batch of every
    version 2 transaction in each of its partitions is such a batch, its epoch new. Any state
    that fails the condition goes to check_sequence."""
    return base_sequence == 0 and record_count - 1 <= MAX_SEQUENCE


def check_sequence(
    state: ProducerPartitionState | None,
    producer_epoch: int,
    base_sequence: int,
    record_count: int,
    *,
    taken_back: bool = False,
    earlier_batches: EarlierBatches = _none_earlier,
) -> BatchVerdict | WrittenBatch:
    """Decide whether a batch is the next one (APPEND), a retry of one of the producer's last
    RETAINED_BATCHES batches here in its epoch (that batch as first written: nothing is written,
    its offsets are answered again), or refused.

    A retry is recognised by its base sequence and record count, as Kafka's brokers recognise
    one: a batch that overlaps what was written otherwise is DUPLICATE_SEQUENCE_NUMBER. The
    last batch is in the state; `earlier_batches` is asked for the ones before it only for a
    batch that overlaps the sequences written and is not the last one (a rare retry), so that
    the next batch, nearly every one, costs no look-up.

    `taken_back`: the producer's id was taken back after producer expiry forgot it
    (StoredProducer.taken_back), so its sequences did not start where it has no state: a
    partition without its state takes the batch at whatever sequence it carries, as its first
    one, as Kafka's brokers take a batch of a producer whose state they no longer hold. A
    producer made by InitProducerId starts at 0 there."""
    if base_sequence + record_count - 1 > MAX_SEQUENCE:
        raise OutOfOrderSequenceNumber("sequence numbers would pass 2^31-1; bump the epoch")
    if state is None and taken_back:
        return BatchVerdict.APPEND
    if state is None or producer_epoch > state.producer_epoch:
        # A new producer, or a new epoch, starts its sequences at zero.
        if base_sequence != 0:
            if state is None:
                raise UnknownProducerId(
                    f"no sequence state for this producer on this partition and base_sequence "
                    f"is {base_sequence}, not 0"
                )
            raise OutOfOrderSequenceNumber(
                f"a new producer epoch starts at sequence 0, got {base_sequence}"
            )
        return BatchVerdict.APPEND
    if producer_epoch < state.producer_epoch:
        raise InvalidProducerEpoch(
            f"producer epoch {producer_epoch} is older than {state.producer_epoch} on this partition"
        )
    if base_sequence == state.last_sequence + 1:
        return BatchVerdict.APPEND
    if (
        base_sequence == state.last_batch_base_sequence
        and record_count == state.last_batch_record_count
    ):
        return state.last_batch
    if base_sequence <= state.last_sequence:
        if base_sequence < state.last_batch_base_sequence:
            # The last batch is one of the RETAINED_BATCHES; the others are the ones before it.
            # Each batch of a producer in one epoch is the next one after the one before, so its
            # retained batches are the chain of sequences back from the last batch: a row that
            # does not end where the later one began is no batch of this run (written before a
            # take-back after producer expiry, which takes a batch at any sequence, or by an
            # earlier holder of the id), and nothing below it is either.
            retained = RETAINED_BATCHES - 1
            found = earlier_batches(state.producer_epoch, state.last_batch_base_offset, retained)
            follows = state.last_batch_base_sequence
            for earlier in islice(found, retained):
                if earlier.base_sequence + earlier.record_count != follows:
                    break
                if (earlier.base_sequence, earlier.record_count) == (base_sequence, record_count):
                    return earlier
                follows = earlier.base_sequence
        raise DuplicateSequenceNumber(
            f"sequences {base_sequence}..{base_sequence + record_count - 1} overlap those already "
            f"written (last {state.last_sequence}) and are not a retry of one of the producer's last "
            f"{RETAINED_BATCHES} batches here"
        )
    raise OutOfOrderSequenceNumber(
        f"expected base_sequence {state.last_sequence + 1}, got {base_sequence}"
    )
