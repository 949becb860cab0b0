"""A transactional Send racing the end of its transaction, on PostgreSQL (on SQLite the write
lock runs one write transaction at a time, so nothing can interleave).

A Send reads its transaction's row FOR SHARE in its first statement, together with its topics
(storage.transactions.get_with_topics), and holds it until it commits; a Commit, an Abort or a
fence takes the row FOR UPDATE. So whichever comes second waits for the first: a Commit sees
every partition of the Sends before it, and a Send after it sees the ended transaction and is
refused, appending nothing. Each test holds the first request inside its database transaction
and lets it go once the second waits for a lock (test_topic_admin_races' Held and hold_then).
"""

from __future__ import annotations

import pytest

from app.domain.errors import InvalidProducerEpoch, InvalidTxnState, ProducerFenced
from app.domain.records import RecordToAppend
from app.domain.types import IsolationLevel, TransactionVersion
from app.services import log_service, transaction_coordinator
from app.storage import transactions
from app.services.log_service import SendBatch
from tests.integration.test_topic_admin_races import Held, hold_then

pytestmark = pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)

TID = "racer"


def _record(value: str) -> list[RecordToAppend]:
    return [RecordToAppend(None, f'"{value}"', None, 0)]


def _log_ends(services) -> list[int]:  # type: ignore[no-untyped-def]
    _topic, partitions = services.topics.describe("t")
    return [p.log_end_offset for p in partitions]


def _open_transaction(services, version: TransactionVersion):  # type: ignore[no-untyped-def]
    """A producer of `version` with a transaction open and one record in partition 0 of "t"."""
    services.topics.create("t", 2)
    p = services.coordinator.init_producer_id(transactional_id=TID, transaction_timeout_ms=None,
                                              transaction_version=version)
    if version is TransactionVersion.V1:
        services.coordinator.begin(TID, p.producer_id, p.producer_epoch)
    services.log.send([SendBatch("t", 0, _record("a"), 0)], producer_id=p.producer_id,
                      producer_epoch=p.producer_epoch, transactional_id=TID)
    return p


@pytest.fixture(params=list(TransactionVersion), ids=lambda v: f"v{v.value}")
def commit_during_a_send(services, database, monkeypatch, request):  # type: ignore[no-untyped-def]
    """A transaction open (_open_transaction, each version), and what runs a Send of one batch,
    held inside its database transaction, while that transaction's Commit starts: the Send's
    results, the Commit's and whether the Commit had to wait for a lock. `transactional`: the
    Send is the transaction's producer's, in it; else a plain Send."""
    p = _open_transaction(services, request.param)
    held = Held(monkeypatch, log_service, "append_sent")

    def run(batch: SendBatch, *, transactional: bool):  # type: ignore[no-untyped-def]
        sender = ({"producer_id": p.producer_id, "producer_epoch": p.producer_epoch, "transactional_id": TID}
                  if transactional else {"producer_id": None, "producer_epoch": None, "transactional_id": None})
        return hold_then(
            held,
            lambda: services.log.send([batch], **sender),
            lambda: services.coordinator.end_transaction(TID, p.producer_id, p.producer_epoch, commit=True),
            database,
        )
    return run


def test_a_commit_during_a_send_waits_for_it_and_marks_the_partition_it_added(  # type: ignore[no-untyped-def]
    services, commit_during_a_send
) -> None:
    sent, committed, waited = commit_during_a_send(SendBatch("t", 1, _record("b"), 0), transactional=True)

    assert waited
    assert [(r.partition, r.base_offset, r.duplicate) for r in sent] == [(1, 0, False)]
    assert committed.meta.state.value == "CompleteCommit"
    # Each partition: its record and its COMMIT marker; partition 1's record is readable.
    assert _log_ends(services) == [2, 2]
    _found, fetched = services.log.fetch("t", 1, offset=0, max_records=10, isolation=IsolationLevel.READ_COMMITTED)
    assert [(r.offset, r.value) for r in fetched.records] == [(0, '"b"')]


@pytest.mark.parametrize(("version", "refusal", "message"), [
    (TransactionVersion.V1, InvalidTxnState, "transaction is CompleteCommit; call begin first"),
    (TransactionVersion.V2, InvalidProducerEpoch,
     "producer epoch 0 belongs to a transaction that has ended; the current epoch is 1"),
], ids=["v1", "v2"])
def test_a_send_during_a_commit_waits_for_it_and_is_refused_appending_nothing(  # type: ignore[no-untyped-def]
    services, database, monkeypatch, version, refusal, message
) -> None:
    p = _open_transaction(services, version)
    held = Held(monkeypatch, transaction_coordinator, "complete_decided")

    committed, sent, waited = hold_then(
        held,
        lambda: services.coordinator.end_transaction(TID, p.producer_id, p.producer_epoch, commit=True),
        lambda: services.log.send([SendBatch("t", 1, _record("late"), 0)], producer_id=p.producer_id,
                                  producer_epoch=p.producer_epoch, transactional_id=TID),
        database,
    )

    assert waited
    assert committed.meta.state.value == "CompleteCommit"
    assert isinstance(sent, refusal), sent
    assert sent.message == message
    assert _log_ends(services) == [2, 0]  # partition 0's record and marker; nothing in partition 1


def test_a_send_during_a_fence_waits_for_it_and_is_fenced_appending_nothing(  # type: ignore[no-untyped-def]
    services, database, monkeypatch
) -> None:
    """An operator's abort (as a timeout's) bumps the epoch under the row lock: the Send that
    waited for it is PRODUCER_FENCED."""
    p = _open_transaction(services, TransactionVersion.V1)
    held = Held(monkeypatch, transaction_coordinator, "complete_stored")

    aborted, sent, waited = hold_then(
        held,
        lambda: services.coordinator.admin_abort(TID),
        lambda: services.log.send([SendBatch("t", 1, _record("late"), 0)], producer_id=p.producer_id,
                                  producer_epoch=p.producer_epoch, transactional_id=TID),
        database,
    )

    assert waited
    assert (aborted.meta.state.value, aborted.meta.producer_epoch) == ("CompleteAbort", 1)
    assert isinstance(sent, ProducerFenced), sent
    assert sent.message == ("producer epoch 0 is older than the current epoch 1: a newer instance took over "
                            "or the transaction timed out")
    assert _log_ends(services) == [2, 0]  # partition 0's record and ABORT marker


def test_a_commit_whose_marker_waits_for_a_plain_send_in_the_partition_marks_after_its_record(  # type: ignore[no-untyped-def]
    services, commit_during_a_send
) -> None:
    # The marker's statement takes its offset, writes the marker and stamps the transaction's
    # batches in one statement (app.storage.markers): when it queued behind another writer's
    # lock on the partition, the offset and the stamp are both the ones taken after the wait.
    sent, committed, waited = commit_during_a_send(SendBatch("t", 0, _record("plain"), None), transactional=False)

    assert waited
    assert [(r.partition, r.base_offset) for r in sent] == [(0, 1)]
    assert committed.meta.state.value == "CompleteCommit"
    assert _log_ends(services) == [3, 0]  # the transaction's record, the plain one, the marker at 2
    _found, fetched = services.log.fetch("t", 0, offset=0, max_records=10, isolation=IsolationLevel.READ_COMMITTED)
    # The plain record at its own offset (1), the transaction's at its marker's (2): in that order.
    assert [(r.offset, r.value) for r in fetched.records] == [(1, '"plain"'), (0, '"a"')]


def test_two_sends_beginning_the_same_version_2_transaction_both_join_the_one_the_first_began(  # type: ignore[no-untyped-def]
    services, database, monkeypatch
) -> None:
    # Each Send reads the idle row FOR SHARE; the one that raises its lock without waiting
    # while the other holds the row too starts again waiting for it FOR UPDATE (waiting while
    # holding FOR SHARE would deadlock the two), and finds the transaction the first began. The
    # raise takes the new txn_id in the same statement, once granted: the attempt that could not
    # take the lock spends no id.
    p = _open_transaction(services, TransactionVersion.V2)
    ended = services.coordinator.end_transaction(TID, p.producer_id, p.producer_epoch, commit=True)
    epoch = ended.meta.producer_epoch
    if services.log.transaction_copies is not None:
        # A process with no copy of the row (one that has just started): both Sends read it. A
        # process with one begins in the statement that takes the offsets
        # (test_send_begins_in_its_offsets_statement.py).
        services.log.transaction_copies.forget(TID)
    held = Held(monkeypatch, transactions, "get_with_topics")

    first, second, waited = hold_then(
        held,
        lambda: services.log.send([SendBatch("t", 0, _record("b"), 0)], producer_id=p.producer_id,
                                  producer_epoch=epoch, transactional_id=TID),
        lambda: services.log.send([SendBatch("t", 1, _record("c"), 0)], producer_id=p.producer_id,
                                  producer_epoch=epoch, transactional_id=TID),
        database,
    )

    assert waited
    assert [(r.partition, r.base_offset, r.txn_id) for r in first] == [(0, 2, ended.meta.txn_id + 1)]
    assert [(r.partition, r.base_offset, r.txn_id) for r in second] == [(1, 0, ended.meta.txn_id + 1)]
    described = services.coordinator.listing.describe(TID)
    assert (described.meta.state.value, described.meta.txn_id, described.meta.producer_epoch) == (
        "Ongoing", ended.meta.txn_id + 1, epoch)
    assert [(t.topic, t.partition) for t in described.partitions] == [("t", 0), ("t", 1)]
