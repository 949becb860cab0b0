"""The transaction state machine of a transactional_id (app.domain.transaction), without I/O."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest

from app.domain.errors import (
    ConcurrentTransactions,
    OutboxError,
    InvalidProducerEpoch,
    InvalidProducerIdMapping,
    InvalidTxnState,
    ProducerFenced,
)
from app.domain.transaction import (
    COMPLETING_STATES,
    IDLE_STATES,
    STORED_COMPLETING_STATES,
    VALID_PREVIOUS_STATES,
    JoinAs,
    JoinCondition,
    TransactionMetadata,
    check_transition,
    classify_recovery,
)
from app.domain.transit import (
    TXN_ID_TAKEN_BY_THE_WRITE,
    Complete,
    Decide,
    InitProducerId,
    KeepPrepared,
    Prepare,
    begin,
    begin_condition,
    is_epoch_exhausted,
    next_epoch,
    prepare_transition,
    send_condition,
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

# The transitions the service allows, written out independently of the module's table: Kafka's
# TransactionState.validPreviousStates, except Ongoing → Ongoing (Kafka's AddPartitionsToTxn;
# here Begin on an open transaction is refused), plus KIP-939's Prepared: prepared from Ongoing,
# then committed, aborted or fenced like an Ongoing transaction, or kept Prepared by a takeover.
ALLOWED = {
    (S.EMPTY, S.EMPTY), (S.COMPLETE_COMMIT, S.EMPTY), (S.COMPLETE_ABORT, S.EMPTY),
    (S.EMPTY, S.ONGOING), (S.COMPLETE_COMMIT, S.ONGOING), (S.COMPLETE_ABORT, S.ONGOING),
    (S.ONGOING, S.PREPARE_COMMIT),
    (S.ONGOING, S.PREPARE_ABORT), (S.PREPARE_EPOCH_FENCE, S.PREPARE_ABORT),
    (S.PREPARE_COMMIT, S.COMPLETE_COMMIT),
    (S.PREPARE_ABORT, S.COMPLETE_ABORT),
    (S.ONGOING, S.PREPARE_EPOCH_FENCE),
    (S.EMPTY, S.DEAD), (S.COMPLETE_COMMIT, S.DEAD), (S.COMPLETE_ABORT, S.DEAD),
    (S.ONGOING, S.PREPARED),
    (S.PREPARED, S.PREPARE_COMMIT), (S.PREPARED, S.PREPARE_ABORT), (S.PREPARED, S.PREPARE_EPOCH_FENCE),
    (S.PREPARED, S.PREPARED),  # a new instance takes a Prepared transaction over (keep_prepared_txn)
}
ALL_PAIRS = list(itertools.product(S, S))
REFUSED = [pair for pair in ALL_PAIRS if pair not in ALLOWED]


def _pair_id(pair: tuple[TransactionState, TransactionState]) -> str:
    return f"{pair[0].value}->{pair[1].value}"


def meta(**overrides: object) -> TransactionMetadata:
    base = TransactionMetadata(
        transactional_id="tid",
        producer_id=ProducerId(10),
        producer_epoch=ProducerEpoch(5),
        state=S.ONGOING,
        txn_id=TxnId(7),
        transaction_timeout_ms=60_000,
        txn_started_ms=1_000,
        updated_ms=1_000,
    )
    return replace(base, **overrides)  # type: ignore[arg-type]


# --- check_transition ---------------------------------------------------------------------------


def test_table_of_valid_previous_states_is_the_documented_one() -> None:
    table = {(prev, target) for target, prevs in VALID_PREVIOUS_STATES.items() for prev in prevs}
    assert table == ALLOWED


def test_table_names_every_state_as_a_target() -> None:
    assert set(VALID_PREVIOUS_STATES) == set(S)


@pytest.mark.parametrize("pair", sorted(ALLOWED), ids=_pair_id)
def test_check_transition_allows_a_listed_previous_state(pair: tuple[TransactionState, TransactionState]) -> None:
    current, target = pair
    check_transition(current, target)


@pytest.mark.parametrize("pair", REFUSED, ids=_pair_id)
def test_check_transition_refuses_an_unlisted_previous_state_with_invalid_txn_state(
    pair: tuple[TransactionState, TransactionState],
) -> None:
    current, target = pair
    with pytest.raises(InvalidTxnState) as raised:
        check_transition(current, target)
    assert raised.value.error_code == "INVALID_TXN_STATE"
    assert raised.value.retriable is False
    assert raised.value.details == {"state": current.value}


def test_begin_on_an_open_transaction_is_refused() -> None:
    with pytest.raises(InvalidTxnState):
        check_transition(S.ONGOING, S.ONGOING)


def test_commit_after_abort_decision_is_refused() -> None:
    with pytest.raises(InvalidTxnState):
        check_transition(S.PREPARE_ABORT, S.PREPARE_COMMIT)


def test_dead_is_terminal() -> None:
    for target in S:
        with pytest.raises(InvalidTxnState):
            check_transition(S.DEAD, target)


def test_completing_and_idle_states_are_disjoint_and_exclude_ongoing() -> None:
    assert not COMPLETING_STATES & IDLE_STATES
    assert S.ONGOING not in COMPLETING_STATES | IDLE_STATES


# --- check_producer: fencing -----------------------------------------------------------------


def test_check_producer_accepts_the_live_producer_and_epoch() -> None:
    meta().check_producer(10, 5)


def test_check_producer_older_epoch_is_fenced() -> None:
    with pytest.raises(ProducerFenced) as raised:
        meta().check_producer(10, 4)
    assert raised.value.error_code == "PRODUCER_FENCED"
    assert raised.value.retriable is False


def test_check_producer_much_older_epoch_is_fenced() -> None:
    with pytest.raises(ProducerFenced):
        meta().check_producer(10, 0)


def test_check_producer_newer_epoch_is_invalid_producer_epoch() -> None:
    with pytest.raises(InvalidProducerEpoch) as raised:
        meta().check_producer(10, 6)
    assert raised.value.error_code == "INVALID_PRODUCER_EPOCH"
    assert raised.value.retriable is False


def test_check_producer_other_producer_id_is_invalid_mapping() -> None:
    with pytest.raises(InvalidProducerIdMapping) as raised:
        meta().check_producer(11, 5)
    assert raised.value.error_code == "INVALID_PRODUCER_ID_MAPPING"
    assert raised.value.retriable is False


def test_check_producer_other_producer_id_wins_over_an_older_epoch() -> None:
    with pytest.raises(InvalidProducerIdMapping):
        meta().check_producer(11, 4)


def test_check_producer_other_producer_id_wins_over_a_newer_epoch() -> None:
    with pytest.raises(InvalidProducerIdMapping):
        meta().check_producer(9, 6)


# --- check_txn_id --------------------------------------------------------------------------------


def test_check_txn_id_accepts_no_txn_id() -> None:
    meta().check_txn_id(None)


def test_check_txn_id_accepts_the_current_txn_id() -> None:
    meta().check_txn_id(7)


def test_check_txn_id_refuses_an_earlier_txn_id() -> None:
    with pytest.raises(InvalidTxnState) as raised:
        meta().check_txn_id(6)
    assert raised.value.details == {"state": "Ongoing"}


def test_check_txn_id_refuses_a_later_txn_id() -> None:
    with pytest.raises(InvalidTxnState):
        meta().check_txn_id(8)


def test_check_txn_id_refuses_any_txn_id_when_none_was_ever_begun() -> None:
    with pytest.raises(InvalidTxnState):
        meta(state=S.EMPTY, txn_id=None).check_txn_id(1)


# --- require_ongoing -----------------------------------------------------------------------------


def test_require_ongoing_accepts_ongoing() -> None:
    meta(state=S.ONGOING).require_ongoing()


@pytest.mark.parametrize("state", sorted(COMPLETING_STATES), ids=lambda s: s.value)
def test_require_ongoing_while_completing_is_concurrent_transactions_and_retriable(state: TransactionState) -> None:
    with pytest.raises(ConcurrentTransactions) as raised:
        meta(state=state).require_ongoing()
    assert raised.value.error_code == "CONCURRENT_TRANSACTIONS"
    assert raised.value.retriable is True
    assert raised.value.details == {"state": state.value}


@pytest.mark.parametrize("state", sorted([*IDLE_STATES, S.DEAD]), ids=lambda s: s.value)
def test_require_ongoing_when_not_begun_is_invalid_txn_state(state: TransactionState) -> None:
    with pytest.raises(InvalidTxnState) as raised:
        meta(state=state, txn_started_ms=None).require_ongoing()
    assert raised.value.retriable is False
    assert raised.value.details == {"state": state.value}


# --- is_timed_out --------------------------------------------------------------------------------


def test_is_timed_out_false_before_the_timeout() -> None:
    assert not meta().is_timed_out(1_000 + 59_999)


def test_is_timed_out_false_exactly_at_the_timeout() -> None:
    assert not meta().is_timed_out(1_000 + 60_000)


def test_is_timed_out_true_one_ms_past_the_timeout() -> None:
    assert meta().is_timed_out(1_000 + 60_001)


def test_is_timed_out_false_when_not_ongoing() -> None:
    for state in S:
        if state is not S.ONGOING:
            assert not meta(state=state).is_timed_out(10**12), state


def test_is_timed_out_false_without_a_start_time() -> None:
    assert not meta(txn_started_ms=None).is_timed_out(10**12)


def test_is_timed_out_false_when_the_clock_is_behind_the_start() -> None:
    assert not meta().is_timed_out(0)


# --- next_epoch ----------------------------------------------------------------------------------
# Kafka's coordinator hands a producer epochs up to Short.MaxValue - 1 = 32766 and keeps 32767
# back for itself: a bump from 32766 gives a new producer id at epoch 0, except a fence's.

@pytest.mark.parametrize(("epoch", "exhausted"), [(0, False), (32765, False), (32766, True), (32767, True),
                                                   (40000, True)])
def test_an_epoch_is_exhausted_from_one_below_the_maximum(epoch: int, exhausted: bool) -> None:
    assert MAX_PRODUCER_EPOCH == 32767
    assert is_epoch_exhausted(epoch) is exhausted


@pytest.mark.parametrize(("epoch", "after"), [(0, (False, 1)), (32764, (False, 32765)), (32765, (False, 32766)),
                                               (32766, (True, 0)), (32767, (True, 0)), (40000, (True, 0))])
def test_next_epoch_rises_by_one_and_restarts_at_zero_from_an_exhausted_epoch(epoch: int, after: tuple) -> None:
    assert next_epoch(ProducerEpoch(epoch)) == after


@pytest.mark.parametrize(("epoch", "after"), [(32765, (False, 32766)), (32766, (False, 32767)), (32767, (True, 0))])
def test_a_fence_takes_the_epoch_kept_back_and_only_past_it_needs_a_new_producer_id(epoch: int,
                                                                                   after: tuple) -> None:
    assert next_epoch(ProducerEpoch(epoch), fencing=True) == after


# --- classify_recovery (KIP-360) -----------------------------------------------------------------


def test_recovery_by_the_live_instance_bumps_now() -> None:
    assert classify_recovery(meta(), 10, 5) is False


def test_recovery_retry_with_the_epoch_just_bumped_from_is_answered_again() -> None:
    # A recovery's bump leaves the id Empty (a fence's, PrepareAbort then CompleteAbort).
    for state in (S.EMPTY, S.PREPARE_ABORT, S.COMPLETE_ABORT, S.COMPLETE_COMMIT):
        assert classify_recovery(meta(state=state, last_producer_epoch=ProducerEpoch(4)), 10, 4) is True
    # A KeepPrepared bump leaves the id Prepared: its retry asks to keep it too.
    assert classify_recovery(meta(state=S.PREPARED, last_producer_epoch=ProducerEpoch(4)), 10, 4,
                             keep_prepared_txn=True) is True


def test_recovery_with_the_epoch_bumped_from_not_keeping_a_transaction_prepared_since_is_fenced() -> None:
    # Its bump would have aborted a transaction Prepared then: this one
    # began since, with the new epoch, and the request is a stale copy.
    with pytest.raises(ProducerFenced):
        classify_recovery(meta(state=S.PREPARED, last_producer_epoch=ProducerEpoch(4)), 10, 4)


def test_recovery_with_the_epoch_bumped_from_once_a_transaction_began_since_is_fenced() -> None:
    # A Begin took the new epoch: a request with the old one is a stale copy.
    with pytest.raises(ProducerFenced):
        classify_recovery(meta(state=S.ONGOING, last_producer_epoch=ProducerEpoch(4)), 10, 4)


def test_recovery_retry_after_its_fence_took_the_epoch_kept_back_bumps_again_rather_than_hand_that_epoch_out() -> None:
    fenced = meta(state=S.COMPLETE_ABORT, producer_epoch=ProducerEpoch(32767), last_producer_epoch=ProducerEpoch(32766))
    assert classify_recovery(fenced, 10, 32766) is False


def _rotated(**overrides: object) -> TransactionMetadata:
    """A recovery from epoch 32766 of producer id 10 rotated the id to 11 at epoch 0."""
    return meta(**{"producer_id": ProducerId(11), "producer_epoch": ProducerEpoch(0), "state": S.EMPTY,
                   "previous_producer_id": ProducerId(10), "last_producer_epoch": ProducerEpoch(32766),
                   **overrides})


def test_recovery_retry_with_the_producer_id_its_bump_replaced_is_answered_again() -> None:
    assert classify_recovery(_rotated(), 10, 32766) is True
    # A KeepPrepared bump that rotated the id: its retry asks to keep the transaction too.
    assert classify_recovery(_rotated(state=S.PREPARED), 10, 32766, keep_prepared_txn=True) is True


@pytest.mark.parametrize(("producer_id", "producer_epoch"), [
    (10, 32765),  # the replaced id, but not the epoch bumped from
    (10, 0),  # the replaced id at the new id's epoch
    (9, 32766),  # neither the live id nor the replaced one
])
def test_recovery_with_the_replaced_producer_id_and_another_epoch_is_fenced(producer_id: int,
                                                                             producer_epoch: int) -> None:
    with pytest.raises(ProducerFenced):
        classify_recovery(_rotated(), producer_id, producer_epoch)


def test_recovery_with_the_replaced_producer_id_once_a_transaction_began_under_the_new_one_is_fenced() -> None:
    with pytest.raises(ProducerFenced):
        classify_recovery(_rotated(state=S.ONGOING), 10, 32766)


def test_recovery_with_the_replaced_producer_id_after_a_new_instance_took_over_is_fenced() -> None:
    # A new instance's bump forgets the replaced id (and the epoch bumped from).
    with pytest.raises(ProducerFenced):
        classify_recovery(_rotated(previous_producer_id=None, last_producer_epoch=None), 10, 32766)


# The epoch left behind by the last bump, and the transaction prepared since, in each version:
# a KIP-360 recovery's (version 1 or 2), or a version 2 Commit's.
def _left_behind(version: TransactionVersion, by_commit: bool) -> TransactionMetadata:
    idle = meta(state=S.COMPLETE_COMMIT, producer_epoch=ProducerEpoch(4), transaction_version=version)
    if by_commit:
        decided = prepare_transition(replace(idle, state=S.ONGOING), Decide(commit=True), 0).after
        bumped = prepare_transition(decided, Complete(), 0).after
    else:
        bumped = prepare_transition(idle, InitProducerId(30_000, "User:a", recovering_epoch=4,
                                                         transaction_version=version), 0).after
    assert (bumped.producer_epoch, bumped.last_producer_epoch) == (5, 4)
    ongoing = begin(bumped, 8, 0).after
    return prepare_transition(ongoing, Prepare(), 0).after


@pytest.mark.parametrize(("version", "by_commit"), [
    (TransactionVersion.V1, False), (TransactionVersion.V2, False), (TransactionVersion.V2, True)])
def test_recovery_keeping_a_transaction_prepared_since_the_bump_with_the_epoch_left_behind_is_fenced(
        version: TransactionVersion, by_commit: bool) -> None:
    # The transaction began with the new epoch: a request with the old one is a stale copy,
    # which would otherwise be handed the live producer's epoch.
    prepared = _left_behind(version, by_commit)
    for keep_prepared_txn in (False, True):
        with pytest.raises(ProducerFenced):
            classify_recovery(prepared, 10, 4, keep_prepared_txn=keep_prepared_txn)
    # The live producer itself may still recover, keeping it.
    assert classify_recovery(prepared, 10, 5, keep_prepared_txn=True) is False


@pytest.mark.parametrize("version", list(TransactionVersion))
def test_recovery_retry_of_a_keep_prepared_bump_of_a_transaction_prepared_before_it_is_answered_again(
        version: TransactionVersion) -> None:
    prepared = _left_behind(version, by_commit=False)
    kept = prepare_transition(prepared, KeepPrepared(30_000, "User:a", recovering_epoch=5,
                                                     transaction_version=version), 0).after
    assert (kept.state, kept.producer_epoch) == (S.PREPARED, 6)
    assert classify_recovery(kept, 10, 5, keep_prepared_txn=True) is True
    # Not without keep_prepared_txn (its bump would have aborted the transaction), nor with the
    # epoch left behind before the transaction began.
    with pytest.raises(ProducerFenced):
        classify_recovery(kept, 10, 5)
    with pytest.raises(ProducerFenced):
        classify_recovery(kept, 10, 4, keep_prepared_txn=True)


def test_recovery_with_an_older_epoch_that_is_not_the_last_is_fenced() -> None:
    with pytest.raises(ProducerFenced):
        classify_recovery(meta(last_producer_epoch=ProducerEpoch(4)), 10, 3)


def test_recovery_with_an_older_epoch_after_a_new_instance_took_over_is_fenced() -> None:
    with pytest.raises(ProducerFenced):
        classify_recovery(meta(last_producer_epoch=None), 10, 4)


def test_recovery_with_a_newer_epoch_is_fenced() -> None:
    with pytest.raises(ProducerFenced):
        classify_recovery(meta(), 10, 6)


def test_recovery_by_another_producer_id_is_fenced() -> None:
    with pytest.raises(ProducerFenced):
        classify_recovery(meta(), 11, 5)


def test_a_prepared_transaction_takes_no_more_records_or_offsets() -> None:
    with pytest.raises(InvalidTxnState, match="Prepared"):
        meta(state=S.PREPARED).require_ongoing()


def test_a_prepared_transaction_never_times_out() -> None:
    assert not meta(state=S.PREPARED, txn_started_ms=0, transaction_timeout_ms=1).is_timed_out(10**12)


def join_condition(row: TransactionMetadata, producer_id: int, producer_epoch: int,
                   version: TransactionVersion | None = None) -> JoinCondition | None:
    """send_condition where it is a JoinCondition."""
    condition = send_condition(row, producer_id, producer_epoch, version, 1_000)
    return condition if isinstance(condition, JoinCondition) else None


# --- join_condition: a Send that joins in the statement taking its offsets ----------------------


def test_join_condition_of_the_live_producer_of_an_ongoing_transaction_is_its_id_epoch_and_ongoing() -> None:
    assert join_condition(meta(), 10, 5) == JoinCondition("tid", ProducerId(10), ProducerEpoch(5), S.ONGOING)


@pytest.mark.parametrize("producer_id, producer_epoch", [(10, 4), (10, 6), (11, 5)])
def test_join_condition_is_none_for_a_producer_the_join_refuses(producer_id: int, producer_epoch: int) -> None:
    assert join_condition(meta(), producer_id, producer_epoch) is None


@pytest.mark.parametrize("state", [s for s in S if s is not S.ONGOING], ids=lambda s: s.value)
def test_join_condition_is_none_for_a_transaction_not_ongoing(state: TransactionState) -> None:
    assert join_condition(meta(state=state), 10, 5) is None


def test_join_condition_is_none_for_the_epoch_of_the_ended_version_2_transaction() -> None:
    ended = meta(transaction_version=TransactionVersion.V2, producer_epoch=ProducerEpoch(6),
                 last_producer_epoch=ProducerEpoch(5), state=S.COMPLETE_COMMIT)
    assert join_condition(ended, 10, 5) is None


# --- join_as: the one decision of a request that joins, from the row or from a copy of it ----


def test_the_live_producer_joins_its_ongoing_transaction() -> None:
    assert meta().join_as(10, 5) is JoinAs.JOIN


@pytest.mark.parametrize("state", sorted(IDLE_STATES, key=lambda s: s.value), ids=lambda s: s.value)
def test_the_live_producer_of_an_idle_version_2_id_begins_its_next_transaction(state: TransactionState) -> None:
    assert meta(state=state, transaction_version=TransactionVersion.V2).join_as(10, 5) is JoinAs.BEGIN


def test_a_version_1_id_spoken_to_in_version_2_begins_its_next_transaction() -> None:
    assert meta(state=S.COMPLETE_COMMIT).join_as(10, 5, TransactionVersion.V2) is JoinAs.BEGIN


def test_an_idle_version_1_id_refuses_a_join_until_begin() -> None:
    with pytest.raises(InvalidTxnState, match="call begin first"):
        meta(state=S.COMPLETE_COMMIT).join_as(10, 5)


@pytest.mark.parametrize("state", sorted(IDLE_STATES, key=lambda s: s.value), ids=lambda s: s.value)
def test_a_kafka_version_1_add_begins_an_idle_id_whatever_its_version(state: TransactionState) -> None:
    # AddPartitionsToTxn and AddOffsetsToTxn: Kafka's wire has no BeginTransaction.
    assert meta(state=state).join_as(10, 5, begins_when_idle=True) is JoinAs.BEGIN
    assert meta(state=state, transaction_version=TransactionVersion.V2).join_as(
        10, 5, begins_when_idle=True) is JoinAs.BEGIN


def test_a_kafka_version_1_add_joins_the_ongoing_transaction_and_is_refused_elsewhere() -> None:
    assert meta().join_as(10, 5, begins_when_idle=True) is JoinAs.JOIN
    with pytest.raises(ConcurrentTransactions):
        meta(state=S.PREPARE_COMMIT).join_as(10, 5, begins_when_idle=True)
    with pytest.raises(InvalidTxnState, match="Prepared"):
        meta(state=S.PREPARED).join_as(10, 5, begins_when_idle=True)
    with pytest.raises(ProducerFenced):
        meta(state=S.COMPLETE_COMMIT).join_as(10, 4, begins_when_idle=True)


@pytest.mark.parametrize("state", sorted(COMPLETING_STATES, key=lambda s: s.value), ids=lambda s: s.value)
def test_a_completing_transaction_refuses_a_join_as_concurrent(state: TransactionState) -> None:
    with pytest.raises(ConcurrentTransactions):
        meta(state=state, transaction_version=TransactionVersion.V2).join_as(10, 5)


def test_the_epoch_of_the_ended_version_2_transaction_neither_joins_nor_begins() -> None:
    ended = meta(transaction_version=TransactionVersion.V2, producer_epoch=ProducerEpoch(6),
                 last_producer_epoch=ProducerEpoch(5), state=S.COMPLETE_COMMIT)
    with pytest.raises(InvalidProducerEpoch, match="has ended"):
        ended.join_as(10, 5)


def _decided(row: TransactionMetadata, pid: int, epoch: int, version: TransactionVersion | None) -> JoinAs | None:
    try:
        return row.join_as(pid, epoch, version)
    except OutboxError:
        return None


def test_a_copy_gives_a_join_condition_exactly_where_join_as_joins() -> None:
    # Every row a stored metadata can be, as far as the decision reads it: the producer id,
    # epoch and state the condition tests, and the version and last epoch it also reads.
    for state, version, spoken, last_epoch, (pid, epoch) in itertools.product(
            S, TransactionVersion, (None, *TransactionVersion), (None, 4, 5, 6),
            [(10, 4), (10, 5), (10, 6), (11, 5)]):
        row = meta(state=state, transaction_version=version,
                   last_producer_epoch=None if last_epoch is None else ProducerEpoch(last_epoch))
        condition = join_condition(row, pid, epoch, spoken)
        assert (condition is not None) == (_decided(row, pid, epoch, spoken) is JoinAs.JOIN)
        if condition is not None:
            assert (row.transactional_id, row.producer_id, row.producer_epoch, row.state) == (
                condition.transactional_id, condition.producer_id, condition.producer_epoch, condition.state)


def test_a_copy_gives_a_begin_condition_exactly_where_join_as_begins_and_the_begin_is_valid() -> None:
    for state, version, spoken, durability, (pid, epoch) in itertools.product(
            S, TransactionVersion, (None, *TransactionVersion), Durability, [(10, 4), (10, 5), (11, 5)]):
        row = meta(state=state, transaction_version=version, durability=durability)
        condition = begin_condition(row, pid, epoch, spoken, 1_000)
        if _decided(row, pid, epoch, spoken) is not JoinAs.BEGIN:
            assert condition is None
            continue
        try:
            written = begin(row, TXN_ID_TAKEN_BY_THE_WRITE, 1_000, spoken).after
        except InvalidTxnState:  # the version cannot be spoken: the Send reads the row for the refusal
            assert condition is None
            continue
        assert condition is not None and condition.after == written


# --- begin_condition: a version 2 Send that begins in the statement taking its offsets ----------


def _idle_v2(**overrides: object) -> TransactionMetadata:
    return meta(**{"state": S.COMPLETE_COMMIT, "transaction_version": TransactionVersion.V2,
                   "last_producer_epoch": ProducerEpoch(4), **overrides})


def test_begin_condition_of_an_idle_version_2_row_is_the_begin_a_join_would_write() -> None:
    row = _idle_v2()
    condition = begin_condition(row, 10, 5, None, 1_000)
    assert condition is not None
    assert condition.before == row
    assert condition.after == begin(row, TXN_ID_TAKEN_BY_THE_WRITE, 1_000).after
    assert (condition.after.state, condition.after.txn_started_ms, condition.after.updated_ms) == (
        S.ONGOING, 1_000, 1_000)


def test_begin_condition_takes_the_version_the_request_speaks() -> None:
    row = meta(state=S.COMPLETE_COMMIT, transaction_version=TransactionVersion.V1)
    condition = begin_condition(row, 10, 5, TransactionVersion.V2, 1_000)
    assert condition is not None and condition.after.transaction_version is TransactionVersion.V2
    assert begin_condition(row, 10, 5, None, 1_000) is None  # version 1 begins with BeginTransaction


@pytest.mark.parametrize("producer_id, producer_epoch", [(10, 4), (10, 6), (11, 5)])
def test_begin_condition_is_none_for_a_producer_the_join_refuses(producer_id: int, producer_epoch: int) -> None:
    assert begin_condition(_idle_v2(), producer_id, producer_epoch, None, 1_000) is None


@pytest.mark.parametrize("state", [s for s in S if s not in IDLE_STATES], ids=lambda s: s.value)
def test_begin_condition_is_none_for_a_row_that_is_not_idle(state: TransactionState) -> None:
    assert begin_condition(_idle_v2(state=state), 10, 5, None, 1_000) is None


# --- what a query of the stored rows looks for -------------------------------------------------


def test_the_completing_states_a_row_holds_are_all_but_the_fence_computed_in_memory() -> None:
    assert STORED_COMPLETING_STATES == {S.PREPARE_COMMIT, S.PREPARE_ABORT}
    assert COMPLETING_STATES - STORED_COMPLETING_STATES == {S.PREPARE_EPOCH_FENCE}


@pytest.mark.parametrize("state", list(S), ids=lambda s: s.value)
def test_only_an_idle_id_expires(state: TransactionState) -> None:
    assert meta(state=state, updated_ms=0).is_expired(10**12, 1_000) is (state in IDLE_STATES)


def test_an_idle_id_expires_only_once_its_expiration_has_fully_passed() -> None:
    idle = meta(state=S.COMPLETE_COMMIT, updated_ms=1_000)
    assert not idle.is_expired(2_000, 1_000)
    assert idle.is_expired(2_001, 1_000)
