"""How a transactional id's metadata moves (app.domain.transit): each event, from each state,
gives one transit or INVALID_TXN_STATE; epoch bumps, exhaustion and last_producer_epoch."""

from __future__ import annotations

import ast
import pathlib
from dataclasses import replace

import pytest

from app.domain.errors import InvalidTxnState
from app.domain.transaction import TransactionMetadata
from app.domain.transit import (
    AnswerAgain,
    Begin,
    Complete,
    Decide,
    Event,
    Expire,
    Fence,
    FenceReason,
    InitProducerId,
    KeepPrepared,
    Prepare,
    SpeakVersion,
    TxnTransit,
    marker_producer,
    prepare_transition,
    speaking,
    then,
)
from app.domain.types import MAX_PRODUCER_EPOCH, ProducerEpoch, ProducerId, TransactionState, TransactionVersion, TxnId

S = TransactionState
NOW = 9_000
IDLE = (S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT)


def meta(state: TransactionState, **overrides: object) -> TransactionMetadata:
    base = TransactionMetadata(
        transactional_id="tid", producer_id=ProducerId(10), producer_epoch=ProducerEpoch(5), state=state,
        txn_id=TxnId(7), transaction_timeout_ms=60_000, txn_started_ms=1_000, updated_ms=1_000,
    )
    return replace(base, **overrides)  # type: ignore[arg-type]


# Each event and the states it may start from; from every other state it is INVALID_TXN_STATE.
EVENTS: list[tuple[Event, tuple[TransactionState, ...]]] = [
    (InitProducerId(30_000, "User:a"), IDLE),
    (KeepPrepared(30_000, "User:a"), (S.PREPARED,)),
    (Fence(FenceReason.TIMEOUT), (S.ONGOING, S.PREPARED)),
    (Begin(8), IDLE),
    (Prepare(), (S.ONGOING, S.PREPARED)),
    (Decide(commit=True), (S.ONGOING, S.PREPARED)),
    (Decide(commit=False), (S.ONGOING, S.PREPARED)),
    (Complete(), (S.PREPARE_COMMIT, S.PREPARE_ABORT)),
    (Expire(), IDLE),
    (SpeakVersion(TransactionVersion.V2), (*IDLE, S.ONGOING, S.PREPARED)),
]
REFUSED = [(event, state) for event, allowed in EVENTS for state in S
           if state not in allowed and state is not S.PREPARE_EPOCH_FENCE]


@pytest.mark.parametrize(("event", "state"), REFUSED, ids=lambda v: getattr(v, "value", type(v).__name__))
def test_an_event_from_a_state_the_table_does_not_allow_is_invalid_txn_state(event: Event,
                                                                              state: TransactionState) -> None:
    with pytest.raises(InvalidTxnState):
        prepare_transition(meta(state), event, NOW)


@pytest.mark.parametrize("state", IDLE)
def test_init_producer_id_bumps_the_epoch_and_empties_the_transaction(state: TransactionState) -> None:
    transit = prepare_transition(meta(state), InitProducerId(30_000, "User:a"), NOW)
    assert transit == TxnTransit(meta(S.EMPTY, producer_epoch=6, txn_started_ms=None, transaction_timeout_ms=30_000,
                                      updated_ms=NOW), new_producer_id=False, holder="User:a")


def test_a_recovering_instance_s_bump_remembers_its_epoch_for_its_retry() -> None:
    transit = prepare_transition(meta(S.COMPLETE_ABORT), InitProducerId(30_000, "User:a", recovering_epoch=5), NOW)
    assert (transit.after.producer_epoch, transit.after.last_producer_epoch) == (6, 5)


def test_a_new_instance_s_bump_forgets_any_earlier_recovering_epoch() -> None:
    transit = prepare_transition(meta(S.EMPTY, last_producer_epoch=4), InitProducerId(30_000, "User:a"), NOW)
    assert transit.after.last_producer_epoch is None


def test_a_bump_below_the_exhausted_epoch_hands_out_the_last_epoch_under_the_same_producer_id() -> None:
    transit = prepare_transition(meta(S.EMPTY, producer_epoch=ProducerEpoch(32765)),
                                 InitProducerId(30_000, "User:a", recovering_epoch=32765), NOW)
    assert not transit.new_producer_id
    assert (transit.after.producer_id, transit.after.producer_epoch, transit.after.last_producer_epoch) == (
        10, 32766, 32765)


@pytest.mark.parametrize("epoch", [32766, 32767])
def test_a_new_instance_s_bump_from_an_exhausted_epoch_asks_for_a_new_producer_id_at_epoch_0_and_forgets_the_old_one(
        epoch: int) -> None:
    transit = prepare_transition(meta(S.EMPTY, producer_epoch=ProducerEpoch(epoch)), InitProducerId(30_000, "User:a"),
                                 NOW)
    assert (transit.new_producer_id, transit.holder) == (True, "User:a")
    assert (transit.after.producer_id, transit.after.producer_epoch, transit.after.last_producer_epoch,
            transit.after.previous_producer_id) == (10, 0, None, None)


# 32767: a fence of the recovering instance at 32766 took the epoch kept back.
@pytest.mark.parametrize("epoch", [32766, 32767])
def test_a_recovery_s_bump_from_an_exhausted_epoch_remembers_the_old_producer_id_and_epoch_for_its_retry(
        epoch: int) -> None:
    transit = prepare_transition(meta(S.COMPLETE_ABORT, producer_epoch=ProducerEpoch(epoch)),
                                 InitProducerId(30_000, "User:a", recovering_epoch=32766), NOW)
    assert (transit.new_producer_id, transit.holder) == (True, "User:a")
    # The transit keeps the old id; storage puts the new one in (apply_transit).
    assert (transit.after.producer_id, transit.after.producer_epoch, transit.after.last_producer_epoch,
            transit.after.previous_producer_id) == (10, 0, 32766, 10)


def test_keep_prepared_of_a_recovery_from_an_exhausted_epoch_remembers_the_old_producer_id_and_epoch() -> None:
    transit = prepare_transition(meta(S.PREPARED, producer_epoch=ProducerEpoch(32766)),
                                 KeepPrepared(30_000, "User:b", recovering_epoch=32766), NOW)
    assert transit.new_producer_id
    assert (transit.after.state, transit.after.producer_epoch, transit.after.last_producer_epoch,
            transit.after.previous_producer_id) == (S.PREPARED, 0, 32766, 10)


@pytest.mark.parametrize("commit", [True, False])
def test_a_version_1_decision_s_markers_never_take_the_producer_id_a_recovery_replaced(commit: bool) -> None:
    # The recovery's rotation left the old id for its retry; the transaction begun since wrote
    # its batches under the new one, at the current epoch, which a version 1 decision keeps.
    before = meta(S.ONGOING, producer_id=ProducerId(11), producer_epoch=ProducerEpoch(0),
                  previous_producer_id=ProducerId(10), last_producer_epoch=ProducerEpoch(32766))
    decided = prepare_transition(before, Decide(commit), NOW)
    assert marker_producer(decided) == (11, 0)
    # Stored, and completed later: the same.
    assert marker_producer(TxnTransit(decided.after)) == (11, 0)


def test_a_version_1_decision_s_markers_never_take_the_producer_id_a_version_2_decision_replaced() -> None:
    # A version 2 Commit rotated the id, then the id spoke version 1 (which keeps the last
    # epoch and id: speaking_version_1 below) and began a transaction under the new id.
    before = meta(S.COMPLETE_COMMIT, producer_id=ProducerId(11), producer_epoch=ProducerEpoch(0),
                  transaction_version=TransactionVersion.V2, previous_producer_id=ProducerId(10),
                  last_producer_epoch=ProducerEpoch(32766))
    spoken = speaking(before, TransactionVersion.V1, NOW)
    assert spoken is not None
    begun = prepare_transition(spoken.after, Begin(8), NOW)
    assert marker_producer(prepare_transition(begun.after, Decide(commit=True), NOW)) == (11, 0)


def test_keep_prepared_from_an_exhausted_epoch_asks_for_a_new_producer_id() -> None:
    transit = prepare_transition(meta(S.PREPARED, producer_epoch=ProducerEpoch(32766)), KeepPrepared(30_000, "User:b"),
                                 NOW)
    assert (transit.new_producer_id, transit.after.state, transit.after.producer_epoch) == (True, S.PREPARED, 0)


def test_a_retry_of_a_bump_changes_nothing_but_the_timeout() -> None:
    transit = prepare_transition(meta(S.EMPTY, last_producer_epoch=4), AnswerAgain(30_000), NOW)
    assert transit == TxnTransit(meta(S.EMPTY, last_producer_epoch=4, transaction_timeout_ms=30_000, updated_ms=NOW))


def test_keep_prepared_bumps_the_epoch_and_the_transaction_stays_prepared_with_its_txn_id() -> None:
    transit = prepare_transition(meta(S.PREPARED), KeepPrepared(30_000, "User:b"), NOW)
    assert transit == TxnTransit(meta(S.PREPARED, producer_epoch=6, transaction_timeout_ms=30_000, updated_ms=NOW),
                                 holder="User:b")


@pytest.mark.parametrize("state", [S.ONGOING, S.PREPARED])
@pytest.mark.parametrize("reason", list(FenceReason))
def test_a_fence_of_the_last_epoch_handed_out_takes_the_epoch_kept_back_under_the_same_producer_id(
        state: TransactionState, reason: FenceReason) -> None:
    transit = prepare_transition(meta(state, producer_epoch=ProducerEpoch(32766)), Fence(reason), NOW)
    assert transit == TxnTransit(meta(S.PREPARE_ABORT, producer_epoch=32767, updated_ms=NOW))


@pytest.mark.parametrize("state", [S.ONGOING, S.PREPARED])
@pytest.mark.parametrize("reason", list(FenceReason))
def test_a_fence_past_the_maximum_epoch_asks_for_a_new_producer_id_held_by_nobody(
        state: TransactionState, reason: FenceReason) -> None:
    transit = prepare_transition(meta(state, producer_epoch=MAX_PRODUCER_EPOCH), Fence(reason), NOW)
    assert transit == TxnTransit(meta(S.PREPARE_ABORT, producer_epoch=0, updated_ms=NOW), new_producer_id=True,
                                 holder=None)


def test_a_fence_by_a_recovering_instance_remembers_its_epoch() -> None:
    transit = prepare_transition(meta(S.ONGOING), Fence(FenceReason.INIT_PRODUCER_ID, recovering_epoch=5), NOW)
    assert (transit.after.state, transit.after.producer_epoch, transit.after.last_producer_epoch) == (
        S.PREPARE_ABORT, 6, 5)


@pytest.mark.parametrize("state", IDLE)
def test_begin_opens_transaction_txn_id_started_now(state: TransactionState) -> None:
    transit = prepare_transition(meta(state, txn_started_ms=None), Begin(8), NOW)
    assert transit == TxnTransit(meta(S.ONGOING, txn_id=8, txn_started_ms=NOW, updated_ms=NOW))


def test_prepare_keeps_the_epoch_and_the_txn_id() -> None:
    assert prepare_transition(meta(S.ONGOING), Prepare(), NOW) == TxnTransit(meta(S.PREPARED, updated_ms=NOW))


@pytest.mark.parametrize("version", list(TransactionVersion))
def test_prepare_forgets_the_epoch_and_producer_id_a_bump_left_behind(version: TransactionVersion) -> None:
    # The transaction began with the current epoch: while Prepared, only a KeepPrepared bump's
    # left-behind epoch is kept, for that bump's retry.
    before = meta(S.ONGOING, transaction_version=version, last_producer_epoch=ProducerEpoch(4),
                  previous_producer_id=ProducerId(9))
    assert prepare_transition(before, Prepare(), NOW) == TxnTransit(
        meta(S.PREPARED, transaction_version=version, updated_ms=NOW))


def test_prepare_of_a_transaction_already_prepared_keeps_what_a_keep_prepared_bump_left_behind() -> None:
    before = meta(S.PREPARED, last_producer_epoch=ProducerEpoch(4))
    assert prepare_transition(before, Prepare(), NOW) == TxnTransit(replace(before, updated_ms=NOW))


@pytest.mark.parametrize(("commit", "target"), [(True, S.PREPARE_COMMIT), (False, S.PREPARE_ABORT)])
@pytest.mark.parametrize("state", [S.ONGOING, S.PREPARED])
def test_a_decision_moves_an_open_transaction_to_prepare_commit_or_abort(
        state: TransactionState, commit: bool, target: TransactionState) -> None:
    assert prepare_transition(meta(state), Decide(commit), NOW) == TxnTransit(meta(target, updated_ms=NOW))


@pytest.mark.parametrize(("state", "target"), [(S.PREPARE_COMMIT, S.COMPLETE_COMMIT),
                                                (S.PREPARE_ABORT, S.COMPLETE_ABORT)])
def test_completion_moves_a_decision_to_its_complete_state(state: TransactionState,
                                                           target: TransactionState) -> None:
    assert prepare_transition(meta(state), Complete(), NOW) == TxnTransit(meta(target, updated_ms=NOW))


@pytest.mark.parametrize("commit", [True, False])
def test_a_version_1_decision_keeps_the_epoch(commit: bool) -> None:
    after = prepare_transition(meta(S.ONGOING, last_producer_epoch=3), Decide(commit), NOW).after
    assert (after.producer_epoch, after.last_producer_epoch) == (5, 3)


@pytest.mark.parametrize("commit", [True, False])
def test_a_version_2_decision_bumps_the_epoch_and_remembers_the_one_it_ended(commit: bool) -> None:
    transit = prepare_transition(meta(S.ONGOING, transaction_version=TransactionVersion.V2), Decide(commit), NOW)
    assert not transit.new_producer_id
    assert (transit.after.producer_epoch, transit.after.last_producer_epoch) == (6, 5)
    assert transit.after.previous_producer_id is None


@pytest.mark.parametrize("commit", [True, False])
def test_a_version_2_decision_below_the_exhausted_epoch_hands_out_the_last_epoch(commit: bool) -> None:
    before = meta(S.ONGOING, transaction_version=TransactionVersion.V2, producer_epoch=ProducerEpoch(32765))
    transit = prepare_transition(before, Decide(commit), NOW)
    assert not transit.new_producer_id
    assert (transit.after.producer_id, transit.after.producer_epoch, transit.after.last_producer_epoch,
            transit.after.previous_producer_id) == (10, 32766, 32765, None)
    assert marker_producer(transit) == (10, 32766)


@pytest.mark.parametrize("commit", [True, False])
def test_a_version_2_decision_at_the_exhausted_epoch_asks_for_a_new_producer_id_and_remembers_the_old_one(
        commit: bool) -> None:
    before = meta(S.ONGOING, transaction_version=TransactionVersion.V2, producer_epoch=ProducerEpoch(32766))
    transit = prepare_transition(before, Decide(commit), NOW)
    assert transit.new_producer_id
    assert (transit.after.producer_epoch, transit.after.last_producer_epoch, transit.after.previous_producer_id) == (
        0, 32766, 10)
    # Its markers stay with the old producer id, one epoch above its batches'.
    assert marker_producer(transit) == (10, 32767)


def test_a_later_bump_forgets_the_replaced_producer_id() -> None:
    before = meta(S.COMPLETE_COMMIT, transaction_version=TransactionVersion.V2, previous_producer_id=ProducerId(4),
                  last_producer_epoch=ProducerEpoch(MAX_PRODUCER_EPOCH))
    after = prepare_transition(before, InitProducerId(30_000, "User:a", transaction_version=TransactionVersion.V2),
                               NOW).after
    assert (after.previous_producer_id, after.last_producer_epoch) == (None, None)


def test_init_producer_id_sets_the_version_it_asks_for() -> None:
    before = meta(S.EMPTY, transaction_version=TransactionVersion.V2)
    assert prepare_transition(before, InitProducerId(30_000, "User:a"), NOW).after.transaction_version \
        is TransactionVersion.V1


def test_a_decision_and_its_completion_are_written_as_one_transit_with_the_decision_s_new_producer_id() -> None:
    before = meta(S.ONGOING, transaction_version=TransactionVersion.V2, producer_epoch=ProducerEpoch(32766))
    decided = prepare_transition(before, Decide(commit=True), NOW)
    both = then(decided, prepare_transition(decided.after, Complete(), NOW))
    assert both.new_producer_id and both.after.state is S.COMPLETE_COMMIT and both.after.producer_epoch == 0


@pytest.mark.parametrize("state", (*IDLE, S.ONGOING, S.PREPARED))
def test_speaking_version_2_changes_the_version_and_forgets_version_1_s_last_epoch(state: TransactionState) -> None:
    # Under version 1 the last epoch is the one a KIP-360 recovery bumped from; version 2
    # would take it for an ended transaction's and answer its stale EndTxn as a retry.
    before = meta(state, last_producer_epoch=ProducerEpoch(4))
    transit = speaking(before, TransactionVersion.V2, NOW)
    assert transit == TxnTransit(replace(before, transaction_version=TransactionVersion.V2, updated_ms=NOW,
                                         last_producer_epoch=None))


@pytest.mark.parametrize("state", (*IDLE, S.ONGOING, S.PREPARED))
def test_speaking_version_1_changes_the_version_and_nothing_else(state: TransactionState) -> None:
    # Version 2's last epoch was bumped from by a Commit or Abort: to version 1 it is the
    # epoch bumped from, what a retried recovery may carry.
    before = meta(state, last_producer_epoch=ProducerEpoch(4), transaction_version=TransactionVersion.V2)
    transit = speaking(before, TransactionVersion.V1, NOW)
    assert transit == TxnTransit(replace(before, transaction_version=TransactionVersion.V1, updated_ms=NOW))


@pytest.mark.parametrize(("state", "version"), [
    (S.EMPTY, None),  # the request leaves the version to the stored one (the HTTP door)
    (S.EMPTY, TransactionVersion.V1),  # the stored one already
    (S.PREPARE_COMMIT, TransactionVersion.V2),  # decided: a retry keeps the version it was decided under
    (S.PREPARE_ABORT, TransactionVersion.V2),
])
def test_speaking_changes_nothing_where_there_is_nothing_to_change(state: TransactionState,
                                                                   version: TransactionVersion | None) -> None:
    assert speaking(meta(state), version, NOW) is None


def test_no_epoch_arithmetic_outside_the_domain() -> None:
    """Every epoch bump goes through app.domain.transit: no `producer_epoch + 1` (or `epoch +
    1`) anywhere else in the server's code."""
    root = pathlib.Path(__file__).resolve().parents[2] / "app"
    found = []
    for path in root.rglob("*.py"):
        if path.parts[-3:-1] == ("app", "domain") or "client" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub)):
                names = [n.id if isinstance(n, ast.Name) else getattr(n, "attr", "")
                         for n in (node.left, node.right)]
                if any("epoch" in name for name in names):
                    found.append(f"{path.relative_to(root.parent)}:{node.lineno}")
    assert found == []
