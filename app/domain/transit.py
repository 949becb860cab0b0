"""How a transactional id's metadata moves: each change computed here, once, as a transit, and
then written in one place (app.storage.transactions.apply_transit). Kafka's coordinator does
the same with prepareTransitionTo and TxnTransitMetadata.

`prepare_transition(meta, event, now_ms)` checks the event against the transition table
(app.domain.transaction.VALID_PREVIOUS_STATES) and returns the metadata the row will hold.
Every epoch bump happens here, by one rule (`next_epoch`): the epoch rises by one, and from an
exhausted epoch (`is_epoch_exhausted`, Kafka's rule) the transit asks storage for a new producer
id instead, whose epoch starts at 0. The one epoch above the exhausted ones, MAX_PRODUCER_EPOCH,
is never handed to a producer: a fence takes it, and a version 2 decision's markers carry it. A
transit never changes the row's producer id itself: storage makes the new one (its holder is the
transit's `holder`) and puts it in.

The checks of the caller (is it the live producer, is its txn_id the current one) are the
request's, not the transition's: they stay with TransactionMetadata's check_* methods.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace

from app.domain.errors import InvalidTxnState, OutboxError
from app.domain.transaction import (
    IDLE_STATES,
    UNDECIDED_STATES,
    JoinAs,
    JoinCondition,
    TransactionMetadata,
    check_transition,
)
from app.domain.types import MAX_PRODUCER_EPOCH, Durability, ProducerEpoch, TransactionState, TransactionVersion, TxnId

S = TransactionState


class FenceReason(str, enum.Enum):
    """Why an open transaction is aborted with its epoch bumped (the label of
    outbox_transactions_fenced_total)."""

    INIT_PRODUCER_ID = "init_producer_id"  # a new instance took the transactional id over
    TIMEOUT = "timeout"  # open past its transaction_timeout_ms
    ADMIN = "admin"  # an operator's `outbox transactions abort`


@dataclass(frozen=True, slots=True)
class _InitProducerIdAsks:
    """What an InitProducerId asks for, which both of its bumps (InitProducerId, KeepPrepared)
    carry. Neither is the other: each is matched by its own class in prepare_transition."""

    transaction_timeout_ms: int
    holder: str | None
    recovering_epoch: int | None = None
    transaction_version: TransactionVersion = TransactionVersion.V1
    # The Sends' durability the instance chose; None: the stored one (a bump the service
    # makes itself, not an InitProducerId).
    durability: Durability | None = None


@dataclass(frozen=True, slots=True)
class InitProducerId(_InitProducerIdAsks):
    """An idle transactional id handed to a new instance, or (KIP-360) to the live one that
    recovers with its own epoch, `recovering_epoch`: the epoch bumped, the state Empty.
    Only a recovering instance's bump may be answered again (see AnswerAgain)."""


@dataclass(frozen=True, slots=True)
class KeepPrepared(_InitProducerIdAsks):
    """InitProducerId with keep_prepared_txn on a Prepared transaction (KIP-939): the epoch is
    bumped, so the instance that prepared it can no longer end it, and it stays Prepared for
    the new instance to commit or abort."""


@dataclass(frozen=True, slots=True)
class AnswerAgain:
    """A recovering instance's retry of a bump already made (its answer was lost): nothing
    moves but the timeout and the protocol version it asks for."""

    transaction_timeout_ms: int
    transaction_version: TransactionVersion = TransactionVersion.V1
    durability: Durability | None = None


@dataclass(frozen=True, slots=True)
class SpeakVersion:
    """A request that speaks the other transaction version than the one stored (a Kafka
    client's request versions tell which it speaks, as Kafka's coordinator reads them: EndTxn
    5, Produce 12, TxnOffsetCommit 5 are version 2's): the transactional id speaks it from now
    on. Only an idle id, or an open transaction its EndTxn ends, changes version; nothing else
    moves (an EndTxn's decision, a Send's Begin, is the next event, composed with this one)."""

    transaction_version: TransactionVersion


@dataclass(frozen=True, slots=True)
class Fence:
    """Ongoing or Prepared → (PrepareEpochFence) → PrepareAbort, the epoch bumped so that the
    producer is fenced if it comes back. A fence made by InitProducerId of a recovering
    instance remembers its epoch, so that its retry is recognised."""

    reason: FenceReason
    recovering_epoch: int | None = None


@dataclass(frozen=True, slots=True)
class Begin:
    """Idle → Ongoing: a new transaction, numbered txn_id."""

    txn_id: int


@dataclass(frozen=True, slots=True)
class Prepare:
    """Ongoing → Prepared (KIP-939): the outcome waits for Commit or Abort."""


@dataclass(frozen=True, slots=True)
class Decide:
    """Ongoing or Prepared → PrepareCommit or PrepareAbort. Under transaction version 2 the
    epoch is bumped too, and the epoch it moved from is remembered (with the producer id, when
    the epoch was exhausted), so that a retry of this Commit or Abort is answered again while a
    Send delayed from the ended transaction is refused (TransactionMetadata.check_producer)."""

    commit: bool


@dataclass(frozen=True, slots=True)
class Complete:
    """PrepareCommit → CompleteCommit, PrepareAbort → CompleteAbort: the markers are written."""


@dataclass(frozen=True, slots=True)
class Expire:
    """Idle for transactional_id_expiration_ms → Dead: the row is removed."""


Event = (InitProducerId | KeepPrepared | AnswerAgain | SpeakVersion | Fence | Begin | Prepare | Decide | Complete
         | Expire)


@dataclass(frozen=True, slots=True)
class TxnTransit:
    """What a transactional id's row becomes. `new_producer_id`: the epoch was exhausted, and
    storage makes a producer id (held by `holder`) to replace after.producer_id."""

    after: TransactionMetadata
    new_producer_id: bool = False
    holder: str | None = None


def is_epoch_exhausted(producer_epoch: int) -> bool:
    """Whether a producer id has no epoch left to hand its producer after `producer_epoch`, as
    Kafka's coordinator decides it (MAX_PRODUCER_EPOCH - 1 and above). MAX_PRODUCER_EPOCH itself
    is kept back, so that a producer at the last epoch it was given can always be fenced under
    its own producer id, and so that a version 2 Commit or Abort from that epoch can write its
    markers at an epoch above every batch of its transaction."""
    return producer_epoch >= MAX_PRODUCER_EPOCH - 1


def next_epoch(producer_epoch: int, *, fencing: bool = False) -> tuple[bool, ProducerEpoch]:
    """The epoch after a bump, and whether the producer id is exhausted and must be replaced
    (its successor starts at epoch 0). `fencing`: a fence bumps an exhausted epoch to the one
    kept back, without a new producer id, so that the producer it fences is told PRODUCER_FENCED
    (a new producer id would tell it that its id is unknown); the next InitProducerId replaces
    the id. Only an epoch already at that maximum (none is handed out) needs a new id to fence."""
    if is_epoch_exhausted(producer_epoch) and not (fencing and producer_epoch < MAX_PRODUCER_EPOCH):
        return True, ProducerEpoch(0)
    return False, ProducerEpoch(producer_epoch + 1)


def prepare_transition(meta: TransactionMetadata, event: Event, now_ms: int) -> TxnTransit:
    """The transit `event` makes of `meta`, or INVALID_TXN_STATE if the transition table
    does not allow it."""
    match event:
        case InitProducerId():
            check_transition(meta.state, S.EMPTY)
            return _bumped(replace(meta, state=S.EMPTY, txn_started_ms=None,
                                   transaction_timeout_ms=event.transaction_timeout_ms,
                                   transaction_version=event.transaction_version,
                                   durability=event.durability or meta.durability),
                           now_ms, event.recovering_epoch, event.holder, remember_producer_id=True)
        case KeepPrepared():
            if meta.state is not S.PREPARED:  # the table lets Ongoing become Prepared: not this event
                raise InvalidTxnState(f"transaction is {meta.state.value}; only a Prepared one is kept",
                                      state=meta.state.value)
            check_transition(meta.state, S.PREPARED)
            return _bumped(replace(meta, transaction_timeout_ms=event.transaction_timeout_ms,
                                   transaction_version=event.transaction_version,
                                   durability=event.durability or meta.durability),
                           now_ms, event.recovering_epoch, event.holder, remember_producer_id=True)
        case AnswerAgain():
            return TxnTransit(replace(meta, transaction_timeout_ms=event.transaction_timeout_ms,
                                      transaction_version=event.transaction_version,
                                      durability=event.durability or meta.durability, updated_ms=now_ms))
        case SpeakVersion():
            if event.transaction_version is TransactionVersion.V1 and meta.durability is Durability.COMMIT:
                # Version 1 would answer the Commit of a transaction a crash lost as a retry of
                # the last one (TransactionCoordinator.init_producer_id).
                raise InvalidTxnState('a producer of durability "commit" speaks transaction version 2 only',
                                      state=meta.state.value)
            if meta.state not in _SPEAKING_STATES:
                raise InvalidTxnState(f"transaction is {meta.state.value}; its transaction version cannot change now",
                                      state=meta.state.value)
            if event.transaction_version is TransactionVersion.V2:
                # Version 2 reads last_producer_epoch as the epoch of a transaction that has
                # ended (is_previous_transaction). Under version 1 it was the epoch a KIP-360
                # recovery bumped from, which no Commit or Abort ended: kept, a stale EndTxn 5
                # abort carrying it would be answered as a retry instead of fenced.
                return TxnTransit(replace(meta, transaction_version=event.transaction_version, updated_ms=now_ms,
                                          last_producer_epoch=None, previous_producer_id=None))
            return TxnTransit(replace(meta, transaction_version=event.transaction_version, updated_ms=now_ms))
        case Fence():
            # PrepareEpochFence is never stored: the bump and PrepareAbort are one write.
            check_transition(meta.state, S.PREPARE_EPOCH_FENCE)
            check_transition(S.PREPARE_EPOCH_FENCE, S.PREPARE_ABORT)
            # Made by the service, so the new producer id (if any) is held by no principal: a
            # producer id with a transactional id is used through that id, whose ACL guards it.
            return _bumped(replace(meta, state=S.PREPARE_ABORT), now_ms, event.recovering_epoch, None, fencing=True)
        case Begin():
            check_transition(meta.state, S.ONGOING)
            return TxnTransit(replace(meta, state=S.ONGOING, txn_id=TxnId(event.txn_id), txn_started_ms=now_ms,
                                      updated_ms=now_ms))
        case Prepare():
            check_transition(meta.state, S.PREPARED)
            if meta.state is S.PREPARED:
                return TxnTransit(replace(meta, updated_ms=now_ms))
            # The transaction began with the current epoch, so the epoch (and id) a bump left
            # behind is forgotten: while Prepared, last_producer_epoch is only ever a KeepPrepared
            # bump's, the epoch the transaction was held with before it, which that bump's
            # retry carries (classify_recovery). Kept, a delayed copy of the recovery that handed
            # out the current epoch would pass for that retry, and be handed the live epoch too.
            # Nothing else reads it while Prepared: no Send joins, and the Commit or Abort that
            # ended the transaction before this one (version 2) is no longer answered again.
            return TxnTransit(replace(meta, state=S.PREPARED, updated_ms=now_ms, last_producer_epoch=None,
                                      previous_producer_id=None))
        case Decide():
            target = S.PREPARE_COMMIT if event.commit else S.PREPARE_ABORT
            check_transition(meta.state, target)
            decided = replace(meta, state=target, updated_ms=now_ms)
            if meta.transaction_version is TransactionVersion.V2:
                return _bumped(decided, now_ms, meta.producer_epoch, None, remember_producer_id=True)
            return TxnTransit(decided)
        case Complete():
            target = S.COMPLETE_COMMIT if meta.state is S.PREPARE_COMMIT else S.COMPLETE_ABORT
            check_transition(meta.state, target)
            return TxnTransit(replace(meta, state=target, updated_ms=now_ms))
        case Expire():
            check_transition(meta.state, S.DEAD)
            return TxnTransit(replace(meta, state=S.DEAD, updated_ms=now_ms))
    raise TypeError(f"not a transaction event: {event!r}")


# Where SpeakVersion may change the version: an idle id (its next transaction begins in it) or
# an undecided transaction (the EndTxn that ends it decides with its own version's rules). A
# decided one has taken its version's rules already.
_SPEAKING_STATES = IDLE_STATES | UNDECIDED_STATES


def speaking(meta: TransactionMetadata, transaction_version: TransactionVersion | None,
             now_ms: int) -> TxnTransit | None:
    """The SpeakVersion transit of a request that speaks `transaction_version`, or None where
    there is nothing to change: the request asks for none (the HTTP door's requests: their
    producer chose at InitProducerId), the row speaks it already, or the transaction is decided
    (a retry or a refusal then follows the version it was decided under)."""
    if transaction_version is None or transaction_version is meta.transaction_version \
            or meta.state not in _SPEAKING_STATES:
        return None
    return prepare_transition(meta, SpeakVersion(transaction_version), now_ms)


def begin(meta: TransactionMetadata, txn_id: int, now_ms: int,
          transaction_version: TransactionVersion | None = None) -> TxnTransit:
    """Idle → Ongoing as transaction `txn_id`, in the version the request that begins it speaks
    (None: the stored one), which the transaction takes in the same write (SpeakVersion then
    Begin, composed): the one computation of every Begin, whichever request makes it."""
    check_transition(meta.state, S.ONGOING)
    spoken = speaking(meta, transaction_version, now_ms)
    if spoken is None:
        return prepare_transition(meta, Begin(txn_id), now_ms)
    return then(spoken, prepare_transition(spoken.after, Begin(txn_id), now_ms))


# The txn_id a BeginCondition's `after` holds, a placeholder: the statement that writes the Begin
# takes the transaction's id from the sequence itself (storage.transactions.BEGUN), and the
# caller keeps `after` with the id that statement answered.
TXN_ID_TAKEN_BY_THE_WRITE = TxnId(0)


@dataclass(frozen=True, slots=True)
class BeginCondition:
    """A version 2 Send that begins the next transaction in the statement that takes its first
    offsets, without reading the transactional id's row first: the row must be `before` in every
    column (a process's copy of it, which may be out of date), and becomes `after`, the Begin
    computed from `before` (begin_condition), its txn_id taken by that statement. Storage writes
    it only where the row is `before` (app.storage.transactions.BEGUN); elsewhere the Send reads
    the row and begins or joins from what it finds."""

    before: TransactionMetadata
    after: TransactionMetadata

    @property
    def transactional_id(self) -> str:
        return self.before.transactional_id


def begin_condition(meta: TransactionMetadata, producer_id: int, producer_epoch: int,
                    transaction_version: TransactionVersion | None, now_ms: int) -> BeginCondition | None:
    """send_condition where it is a BeginCondition: the Begin a Send of (producer_id,
    producer_epoch), speaking `transaction_version`, writes without reading the row; None where
    `meta` would refuse the Send or not begin a transaction for it. The decision is join_as's,
    the one a Send makes after reading the row, and the Begin is `begin`'s, so the Begin written
    without the read is the one the read would have written."""
    condition = send_condition(meta, producer_id, producer_epoch, transaction_version, now_ms)
    return condition if isinstance(condition, BeginCondition) else None


def send_condition(meta: TransactionMetadata, producer_id: int, producer_epoch: int,
                   transaction_version: TransactionVersion | None, now_ms: int,
                   ) -> JoinCondition | BeginCondition | None:
    """What a Send of (producer_id, producer_epoch), speaking `transaction_version`, may write
    without reading the row, from `meta` (a process's copy of it, which may be an earlier read):
    the JoinCondition where join_as joins, the BeginCondition where it begins (begin_condition),
    join_as asked once; None where it refuses, or where the Begin would be refused: the Send then
    reads the row, for the refusal or the Begin.

    A row that holds a JoinCondition decides JOIN as it is: the producer id and epoch are the
    live ones (is_previous_transaction cannot hold at the current epoch, since the last epoch
    is one that a bump left behind), and Ongoing neither begins on join nor is refused by
    require_ongoing. A transaction's timeout is not checked at a Send: the coordinator aborts
    a timed-out transaction (a Fence), which bumps the epoch and so fails the condition, as
    does every Commit or Abort of version 2 (the epoch) and of version 1 (the state)."""
    try:
        joins = meta.join_as(producer_id, producer_epoch, transaction_version) is JoinAs.JOIN
    except OutboxError:
        return None
    if joins:
        return JoinCondition.of(meta, producer_id, producer_epoch)
    return _begin_condition(meta, transaction_version, now_ms)


def _begin_condition(meta: TransactionMetadata, transaction_version: TransactionVersion | None,
                     now_ms: int) -> BeginCondition | None:
    """The BeginCondition of a Send that join_as has decided begins (JoinAs.BEGIN)."""
    try:
        transit = begin(meta, TXN_ID_TAKEN_BY_THE_WRITE, now_ms, transaction_version)
    except OutboxError:  # e.g. a version 1 row spoken to in version 2 by a producer of durability "commit"
        return None
    assert not transit.new_producer_id  # neither a Begin nor a SpeakVersion bumps the epoch
    return BeginCondition(meta, transit.after)


def marker_producer(decision: TxnTransit) -> tuple[int, int]:
    """The producer id and epoch that a decided transaction's control markers carry: the
    decision's (under version 2 the epoch its Commit or Abort bumped to, at or above every batch
    of the transaction, as a partition's last word must be). Where that bump exhausted the
    producer id, the markers stay with the id the batches were written under, at the epoch kept
    back for them, MAX_PRODUCER_EPOCH (its successor starts at 0 and wrote none of them): the
    transit's own id before storage replaces it, the id the decision remembered once it is
    stored (completed later)."""
    meta = decision.after
    if decision.new_producer_id:
        return meta.producer_id, MAX_PRODUCER_EPOCH
    # A version 2 decision's bump sets previous_producer_id (or clears it): there it names the
    # id the batches were written under. A version 1 decision bumps nothing, and may find the
    # one a KIP-360 recovery's bump (or a version 2 decision's, before the id spoke version 1)
    # left for that request's retry: its transaction's batches carry the current id.
    if (meta.previous_producer_id is not None and meta.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT)
            and meta.transaction_version is TransactionVersion.V2):
        return meta.previous_producer_id, MAX_PRODUCER_EPOCH
    return meta.producer_id, meta.producer_epoch


def then(first: TxnTransit, second: TxnTransit) -> TxnTransit:
    """Two transits written as one (a decision and its completion in one database
    transaction; a Begin and the decision of a transaction that a Commit carried whole):
    `second` was computed from `first.after`. At most one of them may ask for a new producer
    id: storage makes it before it writes the row, so the one written row carries it."""
    assert not (first.new_producer_id and second.new_producer_id)
    asking = second if second.new_producer_id else first
    return TxnTransit(second.after, asking.new_producer_id, asking.holder)


def _bumped(meta: TransactionMetadata, now_ms: int, recovering_epoch: int | None,
            holder: str | None, *, remember_producer_id: bool = False, fencing: bool = False) -> TxnTransit:
    """The epoch bumped (`fencing`: by a fence, see next_epoch). `recovering_epoch`: the epoch
    whose holder's retry is answered again (None: no retry is). A retry across a new producer id
    is recognised only where `remember_producer_id` keeps the old one (a version 2 Commit or
    Abort, a KIP-360 recovery): its holder knows only the old id, whose epoch alone would mean
    nothing under the new one. A fence never keeps it: the next InitProducerId makes the bump
    that replaces the id (next_epoch)."""
    exhausted, epoch = next_epoch(meta.producer_epoch, fencing=fencing)
    if recovering_epoch is None or (exhausted and not remember_producer_id):
        last, previous = None, None
    else:
        last, previous = ProducerEpoch(recovering_epoch), (meta.producer_id if exhausted else None)
    return TxnTransit(replace(meta, producer_epoch=epoch, last_producer_epoch=last, previous_producer_id=previous,
                              updated_ms=now_ms),
                      new_producer_id=exhausted, holder=holder)
