"""The transaction coordinator: the requests of a transactional (or idempotent) producer and
of an operator, InitProducerId, Begin, AddPartitionsToTxn, AddOffsets, Prepare, Commit/Abort,
and an operator's abort (Kafka's TransactionCoordinator). Each request is one
or a few short database transactions.

Two phases. Commit records the decision (PrepareCommit); completion then writes the markers
and the staged offsets and records CompleteCommit (app.services.transaction_completion). With
`complete_inline` (the default) Commit decides and completes in the same database
transaction, so PrepareCommit is never seen from outside and a Commit costs one durable
write. Without it, Commit makes PrepareCommit durable and answers; the coordinator worker
completes it (Kafka's behaviour), and so does the worker after any crash that left a
transaction decided but not completed (docs/GUARANTEES.md#recovery). InitProducerId is
app.services.producer_init's, which the coordinator inherits. The worker's other work,
aborting what timed out and expiring idle transactional ids, is
app.services.transaction_timeouts'; describing and listing transactions is
app.services.transaction_listing's. The coordinator holds all three (`completion`,
`timeouts`, `listing`), so that whoever has the coordinator reaches every part of it.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

from app.domain.clock import Clock
from app.domain.offsets import (
    GroupMetadata,
    OffsetToStage,
    check_distinct_partitions,
    check_partition_count,
    offsets_to_write,
)
from app.domain.errors import (
    OutboxError,
    ConcurrentTransactions,
    InvalidRequest,
    InvalidTxnState,
    TransactionIncomplete,
    TransactionPrepared,
    UnknownTopicOrPartition,
)
from app.domain.ids import check_group_id
from app.domain.transaction import (
    COMPLETING_STATES,
    IDLE_STATES,
    MAX_JOINT_COMMIT,
    UNDECIDED_STATES,
    JoinAs,
    PreparedTxnRef,
    TransactionMetadata,
)
from app.domain.transit import (
    Decide,
    Fence,
    FenceReason,
    InitProducerId,
    Prepare,
    TxnTransit,
    prepare_transition,
)
from app.domain.types import TransactionState, TransactionVersion
from app.settings import Settings
from app.storage import groups, topics
from app.storage import transactions as txns
from app.storage.dialect import RowLock
from app.storage.engine import Database
from app.storage.seen_topics import SeenTopics, TopicChanged
from app.domain.records import SendBatch
from app.services import commit_batches as carried
from app.services.log_service import SendResult, check_send
from app.services.producer_init import ProducerIdAndEpoch, ProducerInit
from app.services.transaction_completion import TransactionCompletion, apply_event, complete_decided, complete_stored, fence
from app.services.transaction_join import TransactionCopies, begin_next, found, join_transaction, joining, keep_copy, require
from app.services.transaction_listing import TransactionListing, TransactionView, view_of
from app.services.transaction_timeouts import TransactionTimeouts
from app.services.version_switch import VersionSwitch

# ProducerIdAndEpoch, InitProducerId's answer, stays importable from here, where it was defined
# before InitProducerId moved to its own module.
__all__ = ["ProducerIdAndEpoch", "TransactionCoordinator"]

S = TransactionState


class TransactionCoordinator(ProducerInit):
    def __init__(self, db: Database, settings: Settings, clock: Clock, seen_topics: SeenTopics | None = None,
                 transaction_copies: TransactionCopies | None = None) -> None:
        """`seen_topics`: the process's copy of the topics (LogService.seen_topics), from which
        a Commit that carries batches takes their topics, as a plain Send does; None: read.
        `transaction_copies`: the process's copies of transactional ids' rows
        (LogService.transaction_copies), where each Begin, Commit and Abort keeps the row it
        wrote, so that the producer's next Send joins, or begins its next transaction (version
        2), in the statement that takes its offsets."""
        self.db = db
        self.settings = settings
        self.clock = clock
        self.seen_topics = seen_topics
        self.transaction_copies = transaction_copies
        self.completion = TransactionCompletion(db, clock)
        self.timeouts = TransactionTimeouts(db, settings)
        self.listing = TransactionListing(db, settings, clock)

    def pass_work(self, now_ms: int, limit: int = 100) -> txns.CoordinatorWork:
        """What the coordinator worker's pass at `now_ms` has to do (at most `limit` of each
        kind): one statement, outside a transaction, as it needs no snapshot across
        statements (each step locks its row and checks again)."""
        with self.db.autocommit() as conn:
            return txns.coordinator_work(conn, now_ms, self.settings.transactional_id_expiration_ms, limit)

    # --- Begin ------------------------------------------------------------------------------

    def begin(self, transactional_id: str, producer_id: int, producer_epoch: int,
              transaction_version: TransactionVersion | None = None) -> TransactionView:
        """`transaction_version`: the version the request that begins speaks (a Kafka client's
        AddPartitionsToTxn or AddOffsetsToTxn: 1), None: the stored one."""
        for attempt in range(2):
            now = self.clock()
            # Not durable: if a crash loses a Begin, nothing durable can have depended on it
            # (the first transactional Send, AddOffsets or Commit commits durably, and so
            # flushes it too), and the producer's next call is refused (INVALID_TXN_STATE)
            # rather than misapplied. Kafka's BeginTransaction does not even reach the
            # coordinator. Completing a previous transaction is durable: it is done apart.
            begun = None
            with self.db.write(durable=False) as conn:
                meta = require(conn, transactional_id)
                meta.check_producer(producer_id, producer_epoch)
                if meta.state not in COMPLETING_STATES:
                    begun = TransactionView(begin_next(conn, meta, now, transaction_version))
            if begun is not None:  # kept once its database transaction has committed
                return self._kept(begun)
            if attempt == 0 and self.settings.complete_inline:
                # Finish the previous transaction here rather than make the caller wait for
                # the worker's next pass.
                self.completion.complete(transactional_id)
            else:
                break
        raise ConcurrentTransactions(
            f"the previous transaction of {transactional_id!r} is still completing; retry"
        )

    # --- AddPartitionsToTxn (Kafka's wire, transaction version 1) ----------------------------

    def add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                       partitions: Sequence[tuple[str, int]],
                       transaction_version: TransactionVersion | None = None,
                       ) -> dict[tuple[str, int], OutboxError | None]:
        """Kafka's AddPartitionsToTxn: there is no BeginTransaction on Kafka's wire, so a
        version 1 producer's first AddPartitionsToTxn (or AddOffsetsToTxn) begins its
        transaction, through `begin` (the one way a version 1 transaction begins); on an Ongoing
        transaction it only checks the producer and state. The service records a transaction's
        partitions as its records are appended, so nothing is stored per partition here.
        The answer per partition: None (added, or not attempted when another is refused), or
        why not. If one partition is unknown, nothing begins."""
        check_partition_count(len(partitions))
        wanted = sorted(set(partitions))
        # Outside a transaction (two round trips fewer on PostgreSQL): the row and the topics are
        # facts apart, read in no one snapshot, and `begin` reads the row again under its lock.
        with self.db.autocommit() as conn:
            meta = require(conn, transactional_id, lock=None)
            meta.check_producer(producer_id, producer_epoch)
            known = topics.existing_topics(conn, {t for t, _ in wanted})
        errors: dict[tuple[str, int], OutboxError | None] = {}
        for name, partition in wanted:
            topic = known.get(name)
            try:
                if topic is None:
                    raise UnknownTopicOrPartition(f"unknown topic {name!r}")
                topics.check_partition(topic, partition)
                errors[(name, partition)] = None
            except UnknownTopicOrPartition as e:
                errors[(name, partition)] = e
        if any(e is not None for e in errors.values()):
            return errors  # nothing begun
        self.begin_or_join(transactional_id, producer_id, producer_epoch, read=meta,
                           transaction_version=transaction_version)
        return errors

    def begin_or_join(self, transactional_id: str, producer_id: int, producer_epoch: int,
                      read: TransactionMetadata | None = None,
                      transaction_version: TransactionVersion | None = None) -> TransactionView:
        """The transaction a Kafka client's AddPartitionsToTxn or AddOffsetsToTxn adds to, as
        join_as decides for a request that begins an idle id's transaction whatever its
        version: the Ongoing one, or a new one, begun by `begin`. `read`: the row as the
        caller has just read it."""
        meta = read
        if meta is None:
            with self.db.autocommit() as conn:  # one statement, checked again under `begin`'s lock
                meta = require(conn, transactional_id, lock=None)
        try:
            joins = meta.join_as(producer_id, producer_epoch, transaction_version, begins_when_idle=True) is JoinAs.JOIN
        except ConcurrentTransactions:
            # The previous transaction is decided and still completing: `begin` completes it
            # inline (complete_inline) and begins, as a Begin does, rather than have the client
            # retry until the worker's next pass.
            joins = False
        if joins:
            return TransactionView(meta)
        # Between this read and the Begin the state may change: `begin` checks the producer
        # and the state again under the row lock, so a race is refused (INVALID_TXN_STATE),
        # never misapplied.
        try:
            return self.begin(transactional_id, producer_id, producer_epoch, transaction_version)
        except InvalidTxnState:
            # Another request of the producer began it in between: join it if join_as, asked
            # again of the row as it is now, says this request joins; else `begin`'s refusal.
            with self.db.autocommit() as conn:
                meta = require(conn, transactional_id, lock=None)
            if meta.join_as(producer_id, producer_epoch, transaction_version) is not JoinAs.JOIN:
                raise
            return TransactionView(meta)

    # --- AddOffsets -------------------------------------------------------------------------

    def add_offsets(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        group_id: str,
        offsets: list[OffsetToStage],
        group_metadata: GroupMetadata | None = None,
        transaction_version: TransactionVersion | None = None,
        *,
        each_partition: bool = False,
    ) -> TransactionView:
        """`transaction_version`: the version the request speaks (a Kafka client's
        TxnOffsetCommit: 5 is version 2's, and begins the next transaction), None: the stored one.
        The producer and the group are checked before each offset's metadata (offsets_to_write):
        with `each_partition` an offset whose metadata is too long is left out, else it refuses
        the request."""
        check_group_id(group_id)  # the group's offsets are written under it
        check_distinct_partitions(offsets)
        return self._kept(joining(lambda lock: self._add_offsets(transactional_id, producer_id, producer_epoch, group_id,
                                                      offsets, group_metadata, lock=lock,
                                                      transaction_version=transaction_version,
                                                      each_partition=each_partition)))

    def _add_offsets(
        self, transactional_id: str, producer_id: int, producer_epoch: int, group_id: str,
        offsets: list[OffsetToStage], group_metadata: GroupMetadata | None, *, lock: RowLock,
        transaction_version: TransactionVersion | None = None, each_partition: bool = False,
    ) -> TransactionView:
        with self.db.write() as conn:
            meta = join_transaction(conn, transactional_id, producer_id, producer_epoch, self.clock(), lock=lock,
                                    transaction_version=transaction_version)
            groups.check_group_metadata(conn, group_id, group_metadata)
            offsets = offsets_to_write(offsets, each_partition=each_partition)
            if not offsets:
                return view_of(conn, meta)
            topic_ids = topics.topic_ids_for_offsets(conn, offsets)
            assert meta.txn_id is not None  # joined: its transaction is open
            txns.stage_offsets(conn, transactional_id, meta.txn_id, group_id,
                               list(zip(offsets, topic_ids, strict=True)),
                               hold_committed=self.settings.offsets_retention_minutes is not None)
            return view_of(conn, meta)

    # --- Prepare (KIP-939) ------------------------------------------------------------------

    def prepare(
        self, transactional_id: str, producer_id: int, producer_epoch: int, *, txn_id: int | None = None,
        acknowledged_records: int | None = None,
    ) -> TransactionView:
        """Ongoing → Prepared: the transaction's records and offsets are all in; its outcome
        waits, durable and without a timeout, for Commit or Abort. A retry answers the same.
        `acknowledged_records`: as a Commit's (end_transaction), checked before the Prepare is
        written, which is durable and so makes every earlier Send durable too: the Commit of a
        Prepared transaction needs no count. A count that differs changes nothing here
        (TRANSACTION_INCOMPLETE): the transaction stays Ongoing, for the producer to abort."""
        now = self.clock()
        with self.db.write() as conn:
            if acknowledged_records is None:
                meta, held = require(conn, transactional_id, lock=RowLock.UPDATE), 0
            else:
                stored, held = txns.get_holding(conn, transactional_id)
                meta = found(stored, transactional_id)
            meta.check_producer(producer_id, producer_epoch)
            meta.check_txn_id(txn_id)
            if meta.state is not S.PREPARED:
                if meta.state in COMPLETING_STATES:
                    meta.require_ongoing()  # CONCURRENT_TRANSACTIONS, as for a Send
                if meta.state is S.ONGOING and not meta.is_whole(acknowledged_records, held):
                    raise _incomplete(acknowledged_records, held, asked="Prepare",
                                      held_by=f"the transaction of {transactional_id!r} holds",
                                      outcome="Nothing changed: the transaction is still Ongoing; abort it and "
                                      "send it again")
                meta = apply_event(conn, meta, Prepare(), now)
            return view_of(conn, meta)

    # --- Commit / Abort ---------------------------------------------------------------------

    def end_transaction(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        *,
        commit: bool,
        txn_id: int | None = None,
        prepared: Sequence[PreparedTxnRef] = (),
        batches: Sequence[SendBatch] = (),
        transaction_version: TransactionVersion | None = None,
        acknowledged_records: int | None = None,
    ) -> TransactionView:
        """Commit or Abort. A Commit may name other Prepared transactions (`prepared`): they are
        decided with the caller's, in the same database transaction, and (inline completion)
        completed in it too, so read_committed readers see all of their records or none.

        Under transaction version 2 a Commit may carry the transaction's last `batches`: they
        are appended (beginning the transaction if none is open) and committed in the same
        database transaction, all or nothing, so a transaction of one Send costs one request
        and one durable write. A retry of it is answered again and appends nothing.

        `transaction_version`: the version the request speaks (a Kafka client's EndTxn: 5 is
        version 2's), which decides, as Kafka's coordinator does, whether this Commit or Abort
        bumps the epoch; None: the stored one.

        `acknowledged_records`: a Commit's count of the records its producer was acknowledged in
        this transaction, those it carries included; required from a producer of durability
        COMMIT, checked whenever given (TransactionMetadata.is_whole). When the transaction
        holds another number it is aborted instead, and TRANSACTION_INCOMPLETE raised once the
        abort is written: its Sends were acknowledged before they were durable, and a database
        crash lost some of them."""
        end = functools.partial(self._end_transaction, transactional_id, producer_id, producer_epoch, commit, txn_id,
                                prepared, batches, transaction_version, acknowledged_records)
        if batches and self.seen_topics is not None:
            try:
                return self._kept(end(self.seen_topics))
            except TopicChanged:
                # A topic of the batches changed since this process read it: everything this
                # attempt wrote rolled back; again as if the copy were not there.
                self.seen_topics.forget({b.topic for b in batches})
        return self._kept(end(None))

    def _kept(self, view: TransactionView) -> TransactionView:
        """`view`, its row kept as the process's copy (transaction_copies): kept once its database
        transaction has committed, it is the row as stored, until another request changes it
        (the row as read, where the request only joined)."""
        keep_copy(self.transaction_copies, view.meta)
        return view

    def _end_transaction(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        txn_id: int | None,
        prepared: Sequence[PreparedTxnRef],
        batches: Sequence[SendBatch],
        transaction_version: TransactionVersion | None,
        acknowledged_records: int | None,
        seen: SeenTopics | None,
    ) -> TransactionView:
        """end_transaction, the carried batches' topics from `seen` (batches_to_append_seen)."""
        now = self.clock()
        target = S.PREPARE_COMMIT if commit else S.PREPARE_ABORT
        _check_joint_commit(transactional_id, prepared, commit)
        batches = list(batches)
        if batches:
            if not commit or prepared:
                raise InvalidRequest("only a Commit that names no prepared transactions carries batches")
            check_send(batches, producer_id, producer_epoch, transactional_id)
        sent: list[SendResult] = []
        incomplete: TransactionIncomplete | None = None
        with self.db.write() as conn:
            # Each row locked in one order, the transactional ids sorted: two joint commits
            # naming overlapping transactions would otherwise deadlock on PostgreSQL.
            names = sorted({transactional_id, *(ref.transactional_id for ref in prepared)})
            locked, held = {}, 0
            for name in names:
                if name == transactional_id and commit and acknowledged_records is not None:
                    # The records its transaction holds, read with the row's lock: the count's check.
                    stored, held = txns.get_holding(conn, name)
                    locked[name] = found(stored, name)
                else:
                    locked[name] = require(conn, name, lock=RowLock.UPDATE)
            # The request's version first: the rules below are that version's.
            switch = VersionSwitch.spoken_by(conn, locked[transactional_id], transaction_version, now,
                                             write_first=bool(batches))
            locked[transactional_id] = switch.stored
            meta = switch.meta
            if batches and meta.transaction_version is not TransactionVersion.V2:
                # Under version 1 a Commit of a completed transaction is answered as a retry:
                # batches sent with one would be acknowledged without being appended.
                raise InvalidRequest("a Commit carries batches only under transaction_version 2")
            # Version 2: the Commit (Abort) that bumped the epoch, retried with the epoch it
            # carried the first time, is answered again; any other use of that epoch is refused.
            retried = meta.is_end_retry(producer_id, producer_epoch, commit=commit)
            if retried:
                if batches:
                    sent = carried.retried(conn, meta, producer_id, producer_epoch, batches)
                if meta.state is S.EMPTY:  # an Abort that found nothing open, retried
                    return view_of(conn, switch.write(conn, TxnTransit(meta)))
            else:
                meta.check_producer(producer_id, producer_epoch)
                # A Commit naming a txn_id names a transaction already open: not a whole one.
                if batches and meta.begins_on_join() and self.settings.complete_inline and txn_id is None:
                    # Nothing open: the carried batches are the whole transaction. A count that
                    # says otherwise names Sends that are gone; nothing is appended.
                    whole = sum(len(b.records) for b in batches)
                    if not meta.is_whole(acknowledged_records, whole):
                        raise _incomplete(acknowledged_records, whole,
                                          held_by=f"no transaction of {transactional_id!r} is open: it carries",
                                          outcome="Nothing was appended; send the whole transaction again")
                    return view_of(conn, *carried.commit_whole(conn, meta, producer_id, producer_epoch,
                                                                  batches, now, seen))
                if batches:
                    meta = switch.stored = locked[transactional_id] = join_transaction(
                        conn, transactional_id, producer_id, producer_epoch, now, lock=RowLock.UPDATE, read=meta)
                    sent = carried.append_to_open(conn, meta, producer_id, producer_epoch, batches, now, seen)
                    # A duplicate was appended before (a Send whose answer was lost): held already.
                    held += sum(r.record_count for r in sent if not r.duplicate)
                elif not commit and meta.transaction_version is TransactionVersion.V2 and meta.state in IDLE_STATES:
                    # Version 2: an Abort with nothing open still bumps the epoch, so that a
                    # request of this epoch still under way (a Send or a Commit whose answer
                    # was lost) is refused when it arrives instead of beginning a transaction
                    # the producer has given up. A retry of this Abort is answered again.
                    bump = prepare_transition(meta, InitProducerId(
                        meta.transaction_timeout_ms, None, recovering_epoch=producer_epoch,
                        transaction_version=TransactionVersion.V2), now)
                    return view_of(conn, switch.write(conn, bump))
            meta.check_txn_id(txn_id)
            done = {S.PREPARE_COMMIT, S.COMPLETE_COMMIT} if commit else {S.PREPARE_ABORT, S.COMPLETE_ABORT}
            # Already decided: a retry of the same request, answered as the first time.
            decided = meta.state in done
            if decided and not retried and meta.transaction_version is TransactionVersion.V2:
                # Version 2's decision bumped the epoch: its retry carries the epoch before (the
                # branch above). The new epoch names the next transaction, which has not begun,
                # so there is nothing of it to commit or abort.
                if meta.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
                    raise ConcurrentTransactions(
                        f"the last transaction of {transactional_id!r} is still completing; retry shortly")
                if commit and not meta.is_whole(acknowledged_records, 0):
                    # Records were acknowledged at this epoch, and no transaction holds them: a
                    # database crash lost the Sends that began it, and the Begin with them.
                    raise _nothing_open(transactional_id, acknowledged_records)
                raise InvalidTxnState(f"transaction is {meta.state.value}; no transaction is open at epoch "
                                      f"{producer_epoch}", state=meta.state.value)
            for ref in prepared:
                locked[ref.transactional_id].check_joins_commit(ref.txn_id, decided=decided)
            joined = [locked[ref.transactional_id] for ref in prepared]
            if decided:
                # What the first request decided but left to the worker (complete_inline was
                # off then) is completed now if it is on.
                transits = [TxnTransit(m) for m in (meta, *joined) if m.state is target]
                meta = locked[transactional_id] = switch.write_alone(conn)
            else:
                if commit and not retried and not meta.is_whole(acknowledged_records, held):
                    if meta.state not in UNDECIDED_STATES:
                        raise _nothing_open(transactional_id, acknowledged_records)
                    # Aborted rather than committed without Sends the producer was told were
                    # appended (Kafka aborts a transaction that cannot commit); the refusal is
                    # raised once the abort is written (below). The prepared transactions it
                    # named stay Prepared, for their own Commit or Abort.
                    incomplete = _incomplete(acknowledged_records, held,
                                             held_by=f"the transaction of {transactional_id!r} holds",
                                             outcome="The transaction is aborted; send it again")
                    commit, target, joined = False, S.PREPARE_ABORT, []
                transits = [switch.spoken(prepare_transition(meta, Decide(commit), now)),
                            *(prepare_transition(m, Decide(commit), now) for m in joined)]
                if not self.settings.complete_inline:
                    meta = txns.apply_transit(conn, switch.stored, transits[0])
                    for m, transit in zip(joined, transits[1:], strict=True):
                        txns.apply_transit(conn, m, transit)
                    if incomplete is None:
                        return view_of(conn, meta, sent)
            if self.settings.complete_inline and transits:
                # The decision is completed in this same database transaction: the Prepare
                # state would be overwritten at once, so it is computed (and checked) but only
                # the Complete state is written, with the decision's epoch bump (version 2) and
                # the version switch, over the rows as stored.
                completed = {m.transactional_id: m for m in complete_decided(conn, transits, now, stored=locked)}
                meta = completed.get(transactional_id, meta)
            if incomplete is None:
                return view_of(conn, meta, sent)
        raise incomplete

    # --- Operator tools ---------------------------------------------------------------------

    def admin_abort(self, transactional_id: str, *, force_prepared: bool = False,
                    txn_id: int | None = None) -> TransactionView:
        """Abort an open transaction without its producer (kafka-transactions.sh abort): the
        epoch is bumped, as on timeout, so the producer is fenced if it comes back. A Prepared
        transaction only with `force_prepared` (Kafka's separate force-terminate). `txn_id`: the
        transaction the operator looked at; another one of the same id (the first completed, the
        next begun meanwhile) is refused, never aborted unseen."""
        now = self.clock()
        with self.db.write() as conn:
            meta = require(conn, transactional_id, lock=RowLock.UPDATE)
            if txn_id is not None and meta.txn_id != txn_id:
                # Under the row lock: a confirmation given for one transaction (the console's,
                # naming its txn id) must not abort the next one of the same id, which nobody saw.
                raise InvalidTxnState(
                    f"transaction of {transactional_id!r} is now txn {meta.txn_id} ({meta.state.value}), not txn "
                    f"{txn_id}: look at it again before aborting", state=meta.state.value)
            if meta.state is S.PREPARED and not force_prepared:
                # Checked under the row lock: a Prepared transaction ends by its owner's Commit
                # or Abort (docs/GUARANTEES.md, prepared transactions), and its application's
                # database may have committed its side already; aborting it unasked would leave
                # that side without its records.
                raise TransactionPrepared(
                    f"transaction of {transactional_id!r} is Prepared: its application decides it, and its own "
                    "database may have committed its side already. Abort it only once that is known not to "
                    "have committed, with force_prepared (`outbox transactions abort --force-prepared`)",
                    state=meta.state.value)
            if meta.state in UNDECIDED_STATES:
                meta = fence(conn, meta, now, Fence(FenceReason.ADMIN))
            elif meta.state is not S.PREPARE_ABORT:
                # Not "open": a PrepareCommit transaction is open (glossary) and is not aborted.
                committing = ": it is committed, and completes by itself" if meta.state is S.PREPARE_COMMIT else ""
                raise InvalidTxnState(
                    f"transaction is {meta.state.value}; only a transaction not decided yet (Ongoing or Prepared) "
                    f"can be aborted{committing}",
                    state=meta.state.value,
                )
            return view_of(conn, complete_stored(conn, meta, now))


def _incomplete(acknowledged_records: int | None, held: int, *, held_by: str, outcome: str,
                asked: str = "Commit") -> TransactionIncomplete:
    """TRANSACTION_INCOMPLETE: the request (`asked`) counts other records than `held_by` says
    are there (`held`); `outcome` says what the refusal did, which depends on where it is raised."""
    return TransactionIncomplete(
        f"the {asked} counts {acknowledged_records} acknowledged records, and {held_by} {held}: Sends acknowledged "
        f"before they were durable were lost (a database crash), or the count is wrong. {outcome}",
        acknowledged_records=acknowledged_records, held_records=held)


def _nothing_open(transactional_id: str, acknowledged_records: int | None) -> TransactionIncomplete:
    """A Commit counting records when no transaction is open at its epoch: a database crash lost
    the Sends that began it, and its beginning with them."""
    return _incomplete(acknowledged_records, 0, held_by=f"no transaction of {transactional_id!r} is open: it holds",
                       outcome="Nothing was aborted, as nothing is open; send the whole transaction again")


def _check_joint_commit(transactional_id: str, prepared: Sequence[PreparedTxnRef], commit: bool) -> None:
    if not prepared:
        return
    if not commit:
        raise InvalidRequest("only a Commit names other prepared transactions")
    if len(prepared) > MAX_JOINT_COMMIT:
        raise InvalidRequest(f"a Commit names at most {MAX_JOINT_COMMIT:,} other prepared transactions, "
                             f"not {len(prepared):,}")
    names = [ref.transactional_id for ref in prepared]
    if transactional_id in names:
        raise InvalidRequest(f"prepared names the committing transaction {transactional_id!r} itself")
    if len(set(names)) != len(names):
        raise InvalidRequest("prepared names a transactional id twice")
