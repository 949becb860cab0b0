"""The transaction state machine of a transactional_id (Kafka's TransactionMetadata).

Every state change goes through `check_transition`, which consults the table of valid
previous states, as Kafka's coordinator does; app.domain.transit computes each change.

    Empty ──begin──▶ Ongoing ──commit──▶ PrepareCommit ──markers──▶ CompleteCommit
      ▲                │  └──abort/timeout/fence──▶ PrepareAbort ──markers──▶ CompleteAbort
      └────────────────┴──────────── (begin again from either Complete state) ◀────┘

    Ongoing ──prepare──▶ Prepared ──commit──▶ PrepareCommit …
                            └──abort/fence──▶ PrepareAbort …

A Commit may name other Prepared transactions (a joint commit): they move to PrepareCommit in
the same decision, and complete in the same database transaction as the caller's.

Prepared (KIP-939) is a transaction whose producer has finished it and asks the coordinator
to keep it undecided until its own database has recorded the outcome: no more Sends or
offsets, no timeout, and a new instance may take the transactional id over without aborting
it (InitProducerId with keep_prepared_txn), to commit or abort it after reading that outcome.

PrepareEpochFence (the timeout and fencing path) is Kafka's transient state between
"epoch bumped" and "PrepareAbort written"; this service bumps the epoch and writes
PrepareAbort in one database transaction, so it is never stored, but it is part of the
vocabulary and of the table below.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from app.domain.errors import (
    ConcurrentTransactions,
    InvalidProducerEpoch,
    InvalidProducerIdMapping,
    InvalidRequest,
    InvalidTxnState,
    ProducerFenced,
)
from app.domain.types import (
    MAX_PRODUCER_EPOCH,
    Durability,
    ProducerEpoch,
    ProducerId,
    TransactionState,
    TransactionVersion,
    TxnId,
)

S = TransactionState

VALID_PREVIOUS_STATES: dict[TransactionState, frozenset[TransactionState]] = {
    S.EMPTY: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.ONGOING: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    # Prepared again: a new instance takes a Prepared transaction over (keep_prepared_txn).
    S.PREPARED: frozenset({S.ONGOING, S.PREPARED}),
    S.PREPARE_COMMIT: frozenset({S.ONGOING, S.PREPARED}),
    S.PREPARE_ABORT: frozenset({S.ONGOING, S.PREPARED, S.PREPARE_EPOCH_FENCE}),
    S.COMPLETE_COMMIT: frozenset({S.PREPARE_COMMIT}),
    S.COMPLETE_ABORT: frozenset({S.PREPARE_ABORT}),
    S.PREPARE_EPOCH_FENCE: frozenset({S.ONGOING, S.PREPARED}),
    S.DEAD: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
}

# The most other Prepared transactions one Commit names (a joint commit): each is locked and
# decided in the caller's database transaction, so the bound keeps one Commit's locks and work
# finite. The service checks it for every caller (app.services.transaction_coordinator), the
# HTTP schema states it, and the Spark sink's driver (which may not import the domain:
# pyproject's spark-through-client contract) keeps a copy a unit test holds equal.
MAX_JOINT_COMMIT = 1_000

# States of a transaction not decided yet: a fence (timeout, a new instance, an operator's
# abort) aborts it.
UNDECIDED_STATES = frozenset({S.ONGOING, S.PREPARED})
# States in which a transaction has been decided but its control markers may still be missing.
COMPLETING_STATES = frozenset({S.PREPARE_COMMIT, S.PREPARE_ABORT, S.PREPARE_EPOCH_FENCE})
# Those a row can hold, what a query of the stored rows looks for: PrepareEpochFence is computed
# and never stored (this module's docstring).
STORED_COMPLETING_STATES = COMPLETING_STATES - {S.PREPARE_EPOCH_FENCE}
# States from which a new transaction may begin or a new producer epoch may be handed out.
IDLE_STATES = frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT})
# An open transaction: begun and not completed, undecided (Ongoing, Prepared) or decided and
# still completing. Its records hold back its partitions' last stable offset until its markers
# are written, so a transaction stuck completing is as open as one never decided. It is the
# one meaning of "open" for a list: its age_ms (`age_ms`) and its `min_age_ms` filter. The other
# states (idle, Dead) have no transaction in progress; an ended one keeps its start time, but
# has not been open since.
OPEN_TRANSACTION_STATES = UNDECIDED_STATES | COMPLETING_STATES
# Every state a transaction row can hold, in the enum's order: what the outbox_transactions gauge
# counts and `outbox transactions list --state` names. PrepareEpochFence, never stored, would
# only ever count 0 and match nothing (the HTTP filter still takes it, as Kafka's ListTransactions does).
STORED_STATES = tuple(s for s in S if s is not S.PREPARE_EPOCH_FENCE)
# The names of those a transaction is ever seen in (PrepareEpochFence is never stored), in the
# enum's order, as messages and the API's descriptions give them.
OPEN_STATE_NAMES = ", ".join(s.value for s in S if s in UNDECIDED_STATES | STORED_COMPLETING_STATES)


def check_transition(current: TransactionState, target: TransactionState) -> None:
    """Raise INVALID_TXN_STATE unless `target` may follow `current`."""
    if current not in VALID_PREVIOUS_STATES[target]:
        raise InvalidTxnState(
            f"transaction is {current.value}; it cannot move to {target.value}",
            state=current.value,
        )


@dataclass(frozen=True, slots=True)
class PreparedTxnRef:
    """A Prepared transaction named in another transaction's Commit: by its transactional id
    and its txn_id, so a delayed retry cannot commit a later transaction of the same id."""

    transactional_id: str
    txn_id: int


class JoinAs(enum.Enum):
    """What a request that joins does with its transactional id (TransactionMetadata.join_as)."""

    JOIN = "join"  # the open transaction
    BEGIN = "begin"  # version 2: the idle id's next transaction, begun by this request


@dataclass(frozen=True, slots=True)
class JoinCondition:
    """What a transactional id's row must hold, as it is when a Send takes its offsets, for the
    Send to join the open transaction without reading the row first
    (app.domain.transit.send_condition): its producer id and epoch, and the Ongoing state.
    Storage tests it in the statement that takes the offsets, under the row's shared lock
    (app.storage.transactions.JOINED)."""

    transactional_id: str
    producer_id: ProducerId
    producer_epoch: ProducerEpoch
    state: TransactionState = S.ONGOING

    @classmethod
    def of(cls, meta: TransactionMetadata, producer_id: int, producer_epoch: int) -> JoinCondition:
        """The condition for a Send of (producer_id, producer_epoch) that join_as has decided
        joins `meta`'s open transaction."""
        return cls(meta.transactional_id, ProducerId(producer_id), ProducerEpoch(producer_epoch))


@dataclass(frozen=True, slots=True)
class TransactionMetadata:
    """What the coordinator knows of one transactional_id."""

    transactional_id: str
    producer_id: ProducerId
    producer_epoch: ProducerEpoch
    state: TransactionState
    txn_id: TxnId | None
    transaction_timeout_ms: int
    txn_started_ms: int | None
    updated_ms: int
    last_producer_epoch: ProducerEpoch | None = None
    transaction_version: TransactionVersion = TransactionVersion.V1
    # The producer id the last bump replaced (its epoch was exhausted), where that bump's retry
    # is answered again: a version 2 Commit's or Abort's, or a KIP-360 recovery's. With
    # last_producer_epoch it is what the retry carries.
    previous_producer_id: ProducerId | None = None
    durability: Durability = Durability.SEND

    def check_producer(self, producer_id: int, producer_epoch: int) -> None:
        """Fence callers that are not the live producer of this transactional_id."""
        if self.is_previous_transaction(producer_id, producer_epoch):
            # Version 2: the epoch of a transaction this producer has since committed or
            # aborted. A Send delayed from it must not join the next transaction.
            raise InvalidProducerEpoch(
                f"producer epoch {producer_epoch} belongs to a transaction that has ended; the current "
                f"epoch is {self.producer_epoch}"
            )
        if producer_id != self.producer_id:
            raise InvalidProducerIdMapping(
                f"producer id {producer_id} is not the producer of transactional_id "
                f"{self.transactional_id!r}"
            )
        if producer_epoch < self.producer_epoch:
            raise ProducerFenced(
                f"producer epoch {producer_epoch} is older than the current epoch "
                f"{self.producer_epoch}: a newer instance took over or the transaction timed out"
            )
        if producer_epoch > self.producer_epoch:
            raise InvalidProducerEpoch(
                f"producer epoch {producer_epoch} is newer than the current epoch {self.producer_epoch}"
            )

    def is_previous_transaction(self, producer_id: int, producer_epoch: int) -> bool:
        """Version 2: (producer_id, producer_epoch) is what the live producer carried in the
        transaction that its last Commit or Abort ended (that request bumped the epoch)."""
        return (
            self.transaction_version is TransactionVersion.V2
            and self.last_producer_epoch is not None
            and producer_epoch == self.last_producer_epoch
            and producer_id == (self.producer_id if self.previous_producer_id is None else self.previous_producer_id)
        )

    def begins_on_join(self, transaction_version: TransactionVersion | None = None) -> bool:
        """Version 2: a Send or AddOffsets to this idle transactional id begins its next
        transaction (version 1 refuses it: BeginTransaction first). `transaction_version`: the
        version the request speaks (a Kafka client's request versions), None: the stored one."""
        spoken = self.transaction_version if transaction_version is None else transaction_version
        return spoken is TransactionVersion.V2 and self.state in IDLE_STATES

    def is_end_retry(self, producer_id: int, producer_epoch: int, *, commit: bool) -> bool:
        """Version 2: a retry of the Commit (or Abort) that ended the last transaction and
        bumped the epoch: its answer was lost. It is answered again, with the new epoch, as
        long as no transaction has begun since."""
        # An Abort that found nothing open left the state Empty (its bump is InitProducerId's).
        ended = (S.PREPARE_COMMIT, S.COMPLETE_COMMIT) if commit else (S.PREPARE_ABORT, S.COMPLETE_ABORT, S.EMPTY)
        return self.state in ended and self.is_previous_transaction(producer_id, producer_epoch)

    def is_whole(self, acknowledged_records: int | None, held_records: int) -> bool:
        """Whether the transaction about to commit holds every record its producer was
        acknowledged: `acknowledged_records` is the producer's count (the Commit's), and
        `held_records` the records the transaction's batches hold, those the Commit carries
        included. Under durability COMMIT the count is required for an Ongoing transaction: a
        Send lost in a database crash must never be committed around. Under SEND a count, when
        given, is checked all the same. A Prepared transaction's is never checked, nor required:
        its Prepare checked it and was durable, and the instance that commits it may be a new
        one (keep_prepared_txn), which knows only what its own database recorded (KIP-939)."""
        if acknowledged_records is not None and acknowledged_records < 0:
            raise InvalidRequest("acknowledged_records must be 0 or more")
        if self.state is TransactionState.PREPARED:
            return True
        if acknowledged_records is None:
            if self.durability is Durability.COMMIT:
                raise InvalidRequest(
                    "acknowledged_records is required: this producer's Sends are made durable by its "
                    "Commit (durability \"commit\"), which must say how many records it was acknowledged")
            return True
        return acknowledged_records == held_records

    def check_txn_id(self, txn_id: int | None) -> None:
        """Refuse an end request that names an earlier transaction (a delayed retry must not end a later one)."""
        if txn_id is not None and txn_id != self.txn_id:
            raise InvalidTxnState(
                f"txn_id {txn_id} is not the current transaction ({self.txn_id}) of "
                f"{self.transactional_id!r}",
                state=self.state.value,
            )

    def check_joins_commit(self, txn_id: int, *, decided: bool) -> None:
        """A transaction named in another transaction's Commit (a joint commit: the sink whose
        tasks each prepared their own transaction, committed by the driver in one decision).
        Before that Commit is decided it must be Prepared, with this txn_id; on a retry of the
        decided Commit it must have been committed with it. Anything else (an Ongoing one,
        another transaction of the same id, one committed or aborted on its own) is refused,
        so that a joint commit never commits part of a batch or a transaction nobody prepared."""
        expected = (S.PREPARE_COMMIT, S.COMPLETE_COMMIT) if decided else (S.PREPARED,)
        if txn_id != self.txn_id or self.state not in expected:
            raise InvalidTxnState(
                f"transaction {self.transactional_id!r} (txn_id {self.txn_id}) is {self.state.value}: a commit "
                f"takes other transactions only when they are Prepared, named by their txn_id ({txn_id} given)",
                state=self.state.value,
            )

    def join_as(self, producer_id: int, producer_epoch: int,
                transaction_version: TransactionVersion | None = None, *, begins_when_idle: bool = False) -> JoinAs:
        """What a transactional Send or AddOffsets of (producer_id, producer_epoch), speaking
        `transaction_version` (None: the stored one), does with this transactional id: joins its
        open transaction, or (version 2, an idle id) begins the next one; raises the refusal
        otherwise. The one decision of every request that joins, whether from the row as read
        (app.services.transaction_join.join_transaction) or from a process's copy of it, which
        the statement taking the offsets then confirms (transit.send_condition).
        `begins_when_idle`: an idle id begins whatever the version (Kafka's version 1
        AddPartitionsToTxn and AddOffsetsToTxn: there is no BeginTransaction on Kafka's wire)."""
        self.check_producer(producer_id, producer_epoch)
        if self.begins_on_join(transaction_version) or (begins_when_idle and self.state in IDLE_STATES):
            return JoinAs.BEGIN
        self.require_ongoing()
        return JoinAs.JOIN

    def require_ongoing(self) -> None:
        if self.state in COMPLETING_STATES:
            raise ConcurrentTransactions(
                f"transaction is {self.state.value}; wait for it to complete", state=self.state.value
            )
        if self.state is S.PREPARED:
            raise InvalidTxnState(
                "transaction is Prepared: it takes no more records or offsets; commit or abort it",
                state=self.state.value,
            )
        if self.state is not S.ONGOING:
            raise InvalidTxnState(
                f"transaction is {self.state.value}; call begin first", state=self.state.value
            )

    def age_ms(self, now_ms: int) -> int | None:
        """How long its transaction has been open, from its start (kept through the decision
        and completion, until the next InitProducerId); None when none is open."""
        if self.state not in OPEN_TRANSACTION_STATES or self.txn_started_ms is None:
            return None
        # Not below 0: a transaction begun by a process whose clock is ahead of this one's.
        return max(0, now_ms - self.txn_started_ms)

    def is_expired(self, now_ms: int, expiration_ms: int) -> bool:
        """Idle for longer than `expiration_ms` (transactional_id_expiration_ms): the id is
        forgotten, as Kafka forgets a transactional id. The coordinator's query for candidates
        (storage.transactions.coordinator_work) asks the same of the stored rows."""
        return self.state in IDLE_STATES and self.updated_ms + expiration_ms < now_ms

    def is_timed_out(self, now_ms: int) -> bool:
        return (
            self.state is S.ONGOING
            and self.txn_started_ms is not None
            and now_ms > self.txn_started_ms + self.transaction_timeout_ms
        )


def classify_recovery(
    meta: TransactionMetadata, producer_id: int, producer_epoch: int, *, keep_prepared_txn: bool = False
) -> bool:
    """KIP-360: may the caller (producer_id, producer_epoch) re-initialise this transactional_id?

    Returns True for a retry of a bump this same instance already asked for (answer it again),
    False for the live instance itself (bump now), and raises PRODUCER_FENCED for anyone else:
    in particular an instance that another InitProducerId has replaced in between. A retry may
    carry the producer id its bump replaced (previous_producer_id, the epoch exhausted): it is
    answered the new one.
    """
    if producer_id != meta.producer_id:
        # The one other producer id recognised: the one the last bump replaced, its epoch
        # exhausted, whose holder retries with it when the answer naming the new id was lost.
        if producer_id != meta.previous_producer_id or producer_epoch != meta.last_producer_epoch:
            raise ProducerFenced(
                f"producer id {producer_id} is not the producer of {meta.transactional_id!r}"
            )
    elif producer_epoch == meta.producer_epoch:
        return False
    if (meta.last_producer_epoch is not None and producer_epoch == meta.last_producer_epoch
            and meta.state is not TransactionState.ONGOING
            and not (meta.state is TransactionState.PREPARED and not keep_prepared_txn)):
        # Not once a transaction has begun since the bump (Ongoing): a Begin takes the new epoch,
        # so a request with the one left behind is a stale copy, and answered as a retry it fenced
        # the live producer. Nor, for the same reason, once Prepared unless keep_prepared_txn: the
        # bump that request asked for would have aborted a transaction Prepared then, so this one
        # began since. With keep_prepared_txn it is the retry of a KeepPrepared bump, which left
        # the id Prepared: a transaction prepared since the bump would have made the Prepare
        # forget the epoch left behind (transit.prepare_transition), so while Prepared that
        # epoch is a KeepPrepared bump's alone. Not where the bump it asked for was a fence's,
        # to the epoch kept back from every producer: it is bumped past that, to a new producer id.
        return meta.producer_epoch < MAX_PRODUCER_EPOCH
    raise ProducerFenced(
        f"producer epoch {producer_epoch} was replaced (current epoch {meta.producer_epoch})"
    )

