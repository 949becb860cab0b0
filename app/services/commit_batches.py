"""The batches a version 2 Commit carries (the producer's last Sends riding on its Commit): into
the open transaction, as a whole transaction of their own, or answered again on a retry. Each
runs in the Commit's database transaction, which holds the transactional id's row FOR UPDATE
(`TransactionCoordinator.end_transaction` decides which applies)."""

from __future__ import annotations

from app.domain.errors import InvalidTxnState
from app.domain.records import SendBatch
from app.domain.transaction import TransactionMetadata
from app.domain.transit import Decide, prepare_transition, then
from app.services.log_service import SendResult, append_sent, batches_to_append, batches_to_append_seen
from app.services.transaction_completion import complete_decided
from app.services.transaction_join import begin_transit
from app.storage import log_end, markers, sequence_state
from app.storage.seen_topics import SeenTopics


def append_to_open(conn, meta: TransactionMetadata, producer_id: int, producer_epoch: int,  # type: ignore[no-untyped-def]
                   batches: list[SendBatch], now: int, seen: SeenTopics | None) -> list[SendResult]:
    """The batches appended to `meta`'s open transaction, before the Commit decides it; their
    topics from `seen` (batches_to_append_seen)."""
    to_append = batches_to_append_seen(conn, batches, seen)
    # The batches' partitions and then the markers' would each be locked in order, but not
    # together: all of them first, in one order.
    log_end.lock_partitions(conn, [(b.topic_id, b.partition) for b in to_append],
                            of_transaction=meta.transactional_id)
    return append_sent(conn, batches, to_append, producer_id=producer_id, producer_epoch=producer_epoch,
                       transactional_id=meta.transactional_id, txn_id=meta.txn_id, now_ms=now)


def commit_whole(conn, meta: TransactionMetadata, producer_id: int, producer_epoch: int,  # type: ignore[no-untyped-def]
                 batches: list[SendBatch], now: int, seen: SeenTopics | None) -> tuple[TransactionMetadata, list[SendResult]]:
    """A Commit that carries a whole transaction (version 2, none open, completed inline):
    its Begin, its batches, its markers and its completion in this one database transaction,
    which nobody sees until it commits. So each batch is followed by its COMMIT marker, written
    with it (no partition is added to the transaction, to be claimed back at once), it has no
    staged offsets, and its row is written once: Begin, decision and completion composed.
    Answers the completed row and the batches' results. Their topics from `seen`
    (batches_to_append_seen)."""
    begin = begin_transit(conn, meta, now)
    decision = then(begin, prepare_transition(begin.after, Decide(True), now))
    decided = decision.after
    to_append = batches_to_append_seen(conn, batches, seen)
    # The marker carries the decision's producer id and epoch, as complete_decided's do.
    marker = markers.MarkerOwner.of(decision)
    sent = append_sent(conn, batches, to_append, producer_id=producer_id, producer_epoch=producer_epoch,
                       transactional_id=meta.transactional_id, txn_id=decided.txn_id, now_ms=now,
                       commit_marker=marker)
    (completed,) = complete_decided(conn, [decision], now, stored={meta.transactional_id: meta},
                                    markers_written=True)
    return completed, sent


def retried(conn, meta: TransactionMetadata, producer_id: int, producer_epoch: int,  # type: ignore[no-untyped-def]
            batches: list[SendBatch]) -> list[SendResult]:
    """A retry of a Commit that carried batches: answered as their first attempt appended them
    (duplicates), but only if each is what the producer last appended in its partition, in
    that epoch: otherwise this request is not that Commit again, and its batches, never
    appended, must not be acknowledged."""
    to_append = batches_to_append(conn, batches)
    states = sequence_state.last_batches(conn, producer_id, [(b.topic_id, b.partition) for b in to_append])
    sent = []
    for b, batch in zip(to_append, batches, strict=True):
        state = states.get((b.topic_id, b.partition))
        if state is None or (state.producer_epoch, state.last_batch_base_sequence, state.last_batch_record_count) \
                != (producer_epoch, b.base_sequence, len(b.records)):
            raise InvalidTxnState(
                f"transaction {meta.transactional_id!r} was already committed with epoch {producer_epoch}, "
                f"without this batch for {batch.topic}/{batch.partition}: it was not appended",
                state=meta.state.value)
        sent.append(SendResult(batch.topic, batch.partition, state.last_batch_base_offset, len(b.records), True,
                               meta.txn_id))
    return sent
