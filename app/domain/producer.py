"""Idempotent-producer rules: per (producer, partition) sequence numbers (docs/GUARANTEES.md#no-duplicates).

A batch carries `base_sequence`; its records take base_sequence .. base_sequence+n-1.
The service remembers, per producer and partition, the epoch, the last sequence written,
and the last batch (its base sequence, size and first offset), so that a retry of that
batch is answered with the offsets it was first given, and writes nothing.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from app.domain.errors import (
    DuplicateSequenceNumber,
    InvalidProducerEpoch,
    InvalidRequest,
    OutOfOrderSequenceNumber,
    UnknownProducerId,
)
from app.domain.types import MAX_PRODUCER_EPOCH

MAX_SEQUENCE = 2**31 - 1


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
class ProducerPartitionState:
    producer_epoch: int
    last_sequence: int
    last_batch_base_sequence: int
    last_batch_record_count: int
    last_batch_base_offset: int


class BatchVerdict(enum.Enum):
    APPEND = "append"
    DUPLICATE = "duplicate"


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
) -> BatchVerdict:
    """Decide whether a batch is the next one, a retry of the last one, or refused.

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
        return BatchVerdict.DUPLICATE
    if base_sequence <= state.last_sequence:
        raise DuplicateSequenceNumber(
            f"sequences {base_sequence}..{base_sequence + record_count - 1} overlap those already "
            f"written (last {state.last_sequence}) and are not a retry of the last batch"
        )
    raise OutOfOrderSequenceNumber(
        f"expected base_sequence {state.last_sequence + 1}, got {base_sequence}"
    )
