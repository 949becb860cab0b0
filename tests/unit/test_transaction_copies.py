"""A process's copies of transactional ids' rows (TransactionCopies): a bounded set of guesses,
from which a Send's condition is computed."""

from __future__ import annotations

from dataclasses import replace

from app.domain.transaction import JoinCondition, TransactionMetadata
from app.domain.transit import BeginCondition
from app.domain.types import ProducerEpoch, ProducerId, TransactionState, TransactionVersion, TxnId
from app.services.transaction_join import MAX_COPIES, TransactionCopies

ROW = TransactionMetadata(transactional_id="t", producer_id=ProducerId(7), producer_epoch=ProducerEpoch(3),
                          state=TransactionState.ONGOING, txn_id=TxnId(11), transaction_timeout_ms=60_000,
                          txn_started_ms=0, updated_ms=0, transaction_version=TransactionVersion.V2)


def test_without_a_copy_a_send_has_no_condition() -> None:
    assert TransactionCopies().condition("t", 7, 3, None, 1) is None


def test_a_copy_of_an_ongoing_transaction_gives_a_join_condition() -> None:
    copies = TransactionCopies()
    copies.keep(ROW)
    assert isinstance(copies.condition("t", 7, 3, None, 1), JoinCondition)


def test_a_copy_of_an_idle_version_2_row_gives_a_begin_condition() -> None:
    copies = TransactionCopies()
    copies.keep(replace(ROW, state=TransactionState.COMPLETE_COMMIT))
    assert isinstance(copies.condition("t", 7, 3, None, 1), BeginCondition)


def test_a_forgotten_copy_gives_no_condition() -> None:
    copies = TransactionCopies()
    copies.keep(ROW)
    copies.forget("t")
    assert copies.condition("t", 7, 3, None, 1) is None


def test_past_the_bound_every_copy_is_dropped_but_the_one_kept_then() -> None:
    copies = TransactionCopies()
    for i in range(MAX_COPIES + 1):
        copies.keep(replace(ROW, transactional_id=f"t{i}"))
    assert copies.condition("t0", 7, 3, None, 1) is None
    assert copies.condition(f"t{MAX_COPIES - 1}", 7, 3, None, 1) is None
    assert copies.condition(f"t{MAX_COPIES}", 7, 3, None, 1) is not None
