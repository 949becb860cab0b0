"""Producer ids and epochs, and the counters that hand out ids."""

from __future__ import annotations

from sqlalchemy import Connection, bindparam, delete, exists, insert, or_, select, update

from app.domain.errors import ForgottenProducerId
from app.domain.producer import ActiveProducer, EpochRaise, StoredProducer, check_producer_epoch, require_holder
from app.storage import dialect
from app.storage.dialect import RowLock
from app.storage.tables import (
    counters,
    forgotten_producers,
    producer_partitions,
    producers,
    transaction_partitions,
    transactions,
    txn_ids,
)

PRODUCER_ID_COUNTER = "producer_id"
TXN_ID_COUNTER = "txn_id"


_NEXT_ID = (
    update(counters)
    .where(counters.c.name == bindparam("counter_name"))
    .values(value=counters.c.value + 1)
    .returning(counters.c.value)
)


def next_id(conn: Connection, name: str) -> int:
    """Take the next value of a named counter (the row is created by the migration)."""
    return conn.execute(_NEXT_ID, {"counter_name": name}).scalar_one()


def next_txn_id(conn: Connection) -> int:
    """A new txn_id: unique and rising. On PostgreSQL from the sequence txn_ids, which holds no
    lock (a version 2 transaction takes its id inside its first Send, whose database transaction
    lasts until the records are durable: a counter row would make every producer's first Send
    wait for the others'); an id taken by a request that then fails is not used again. On SQLite
    from the counter row, in the caller's database transaction (its writers take turns anyway)."""
    if conn.dialect.name == "postgresql":
        # On the driver (dialect.rows_on_driver): a version 2 Commit that carries a whole
        # transaction takes its id so, and SQLAlchemy's execution costs more than the driver's.
        (row,) = dialect.rows_on_driver(conn, _NEXT_TXN_ID, {})
        return row[0]
    return next_id(conn, TXN_ID_COUNTER)


_NEXT_TXN_ID = select(txn_ids.next_value())


def create_producer(
    conn: Connection, *, transactional_id: str | None, now_ms: int, principal: str | None,
    producer_epoch: int = 0,
) -> int:
    """A new producer id, handed to `principal` (None: made by the service itself)."""
    producer_id = next_id(conn, PRODUCER_ID_COUNTER)
    conn.execute(
        insert(producers).values(
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            transactional_id=transactional_id,
            principal=principal,
            created_ms=now_ms,
        )
    )
    return producer_id


def take_back_producer(conn: Connection, producer_id: int, producer_epoch: int, now_ms: int, principal: str) -> bool:
    """Make again the row of a producer id that was handed out (above 0, the counter's start,
    and at most its value) but has none, forgotten by producer expiry, for the idempotent producer that sends with it
    (LogService.send): at `producer_epoch`, held by `principal`, made now (so expiry keeps it
    for a whole expiration), and marked taken back (taken_back_ms: where it has no sequence
    state, its batches come at any sequence). False for an id never handed out, which stays
    unknown. UnknownProducerId where the id's row of forgotten_producers (delete_idle_producers) names another
    holder, as a live row held by another is answered (require_holder): the row made here is
    rolled back with the caller's transaction, and nothing tells the id from one never handed
    out. InvalidProducerEpoch for an epoch no producer can have (check_producer_epoch).

    An insert-or-ignore: of two Sends taking the id back at once, the second inserts nothing
    and finds the first one's row (on PostgreSQL it waits for the first to commit, the primary
    key's conflict, then ignores it); a row expiry is deleting makes it wait for that deletion,
    and inserts after it. The caller's Send then judges its batches against the row it finds,
    whoever made it (check_idempotent_use), as any Send does.

    The forgotten_producers row is read after the insert, by a statement of its own: on
    PostgreSQL's READ COMMITTED its snapshot is taken once the insert no longer waits, so it has the row of
    an expiry whose deletion the insert waited for (read before, it would miss it, and a
    stranger would take the id its holder just lost). On SQLite this transaction is the only
    writer. The forgotten_producers row stays while the producer's row lives: the row is what a Send reads, and the
    next expiry of the id writes it anew."""
    issued = conn.execute(select(counters.c.value).where(counters.c.name == PRODUCER_ID_COUNTER)).scalar_one()
    if not 0 < producer_id <= issued:
        return False
    check_producer_epoch(producer_epoch)
    conn.execute(dialect.insert_ignore(conn, producers).values(
        producer_id=producer_id, producer_epoch=producer_epoch, transactional_id=None, principal=principal,
        created_ms=now_ms, taken_back_ms=now_ms))
    holder = conn.execute(select(forgotten_producers.c.principal)
                          .where(forgotten_producers.c.producer_id == producer_id)).scalar_one_or_none()
    if holder is not None:
        require_holder(producer_id, holder, principal)
    return True


def give_back_producer(conn: Connection, producer_id: int, producer_epoch: int, taken_back_ms: int) -> None:
    """Delete again the row a take-back made (take_back_producer, at `taken_back_ms`) when the
    Send it was made for is refused (an overflowing sequence, OFFSET_MISMATCH…): a refused Send
    leaves nothing, as one of an id never handed out. Only the row as it was made: no sequence
    state in any partition, not raised since (raise_taken_back_epoch), not bumped (which clears
    taken_back_ms); a row another Send has written with stays.

    Locked FOR UPDATE first, as delete_idle_producers does but waiting: on PostgreSQL a Send
    under way holds the row FOR KEY SHARE until it commits, and the delete's own snapshot, taken
    once the lock is held, has its state if it wrote any. Left as it is: a concurrent Send that
    found this row (its own take-back inserted nothing) but whose statements have not reached it
    yet finds it gone and is answered UNKNOWN_PRODUCER_ID, as when expiry forgets it again."""
    conn.execute(dialect.lock_row(conn.dialect.name, select(producers.c.producer_id)
                                  .where(producers.c.producer_id == producer_id), RowLock.UPDATE)).first()
    conn.execute(delete(producers).where(
        producers.c.producer_id == producer_id, producers.c.producer_epoch == producer_epoch,
        producers.c.taken_back_ms == taken_back_ms, producers.c.created_ms == taken_back_ms,
        producers.c.transactional_id.is_(None),
        ~exists().where(producer_partitions.c.producer_id == producers.c.producer_id)))


def raise_taken_back_epoch(conn: Connection, producer_id: int, producer_epoch: int, now_ms: int,
                           principal: str) -> bool:
    """A Send at a higher epoch than its producer's row, while that row is taken back
    (taken_back_ms): the row made again by a request its sender had left behind, at an older
    epoch than the sender's now (expiry forgot the epoch bump with the rest). Raised to
    `producer_epoch`, made now, still taken back, and without its sequence state, which was the
    older epoch's: every partition takes the newer epoch's batches at the sequence they carry,
    as a take-back's, as Kafka's brokers take a newer epoch from a producer whose state they
    lost. Without it, the sender's current epoch is refused for good (InvalidProducerEpoch) and
    so is its epoch bump. True, with nothing changed, where the row is already taken back at
    this epoch for this sender (a concurrent Send raised it): the Send is judged again. False
    where the row is not that (StoredProducer.epoch_raise decides, from the row as locked).

    The row is locked FOR UPDATE first: on PostgreSQL an idempotent Send under way holds it FOR
    KEY SHARE until it commits (sequence_state._PRODUCER_HOLDS), so this waits for the older
    epoch's Sends in flight, and the state deleted here is all of theirs; without the lock (an
    update alone takes FOR NO KEY UPDATE, which waits for none of them) one could write its
    older epoch's state after the delete, and the newer epoch would be refused there (a new
    epoch's sequences start at 0). A Send that comes later waits, then finds the higher epoch.
    On SQLite this transaction is the only writer."""
    try:
        verdict = current_state(conn, producer_id, lock=RowLock.UPDATE).epoch_raise(principal, producer_epoch)
    except ForgottenProducerId:  # forgotten again meanwhile: the Send's own refusal stands
        return False
    if verdict is not EpochRaise.RAISE:
        # ALREADY_RAISED: raised to this epoch by a concurrent Send of the same sender (its
        # batches to other partitions at once) since this Send was refused: judged again as any
        # Send, nothing deleted here (that Send may have written this epoch's state since).
        # Without it the second of two such Sends was refused InvalidProducerEpoch with the
        # row at its epoch.
        return verdict is EpochRaise.ALREADY_RAISED
    # The row is locked: what epoch_raise read of it is what this updates.
    conn.execute(update(producers).where(producers.c.producer_id == producer_id)
                 .values(producer_epoch=producer_epoch, created_ms=now_ms, taken_back_ms=now_ms))
    conn.execute(delete(producer_partitions).where(producer_partitions.c.producer_id == producer_id))
    return True


def bump_producer_epoch(conn: Connection, producer_id: int, producer_epoch: int, now_ms: int) -> None:
    """An idempotent producer's KIP-360 epoch bump: its new epoch, and `created_ms` moved to now,
    as the bump makes the producer anew (its sequences start again). Producer expiry counts
    that as use (_IDLE): a producer bumped just before its expiration would otherwise be
    forgotten before its first Send under the new epoch. A producer taken back is no longer
    (taken_back_ms): its new epoch's sequences start at 0 everywhere, as any new epoch's."""
    conn.execute(
        update(producers)
        .where(producers.c.producer_id == producer_id)
        .values(producer_epoch=producer_epoch, created_ms=now_ms, taken_back_ms=None)
    )


def current_state(conn: Connection, producer_id: int, *, lock: RowLock | None) -> StoredProducer:
    """The producer as stored; RowLock.NO_KEY_UPDATE for an epoch bump (KIP-360),
    RowLock.KEY_SHARE for an idempotent Send whose checks in the append's statements failed
    (app.storage.append: the refusal to give, or the check of a batch no statement judged)."""
    stmt = select(producers.c.producer_epoch, producers.c.transactional_id, producers.c.principal,
                  producers.c.taken_back_ms).where(producers.c.producer_id == producer_id)
    row = conn.execute(dialect.lock_row(conn.dialect.name, stmt, lock)).first()
    if row is None:
        raise ForgottenProducerId(f"unknown producer id {producer_id}; call InitProducerId")
    return StoredProducer(producer_id, row[0], row[1], row[2], row[3] is not None)


def partition_producers(conn: Connection, topic_id: int, partition: int, limit: int) -> list[ActiveProducer]:
    """The producers with a sequence state in the partition, the most recent writers first (at
    most `limit`), each with the first offset of its transactional id's open transaction there."""
    pp, tp = producer_partitions, transaction_partitions
    rows = conn.execute(
        select(pp.c.producer_id, pp.c.producer_epoch, pp.c.last_sequence, pp.c.updated_ms, tp.c.first_offset)
        .select_from(
            pp.join(producers, producers.c.producer_id == pp.c.producer_id, isouter=True)
            .join(tp, (tp.c.transactional_id == producers.c.transactional_id) & (tp.c.topic_id == pp.c.topic_id)
                  & (tp.c.partition == pp.c.partition), isouter=True))
        .where(pp.c.topic_id == topic_id, pp.c.partition == partition)
        .order_by(pp.c.updated_ms.desc(), pp.c.producer_id)
        .limit(limit)
    ).all()
    return [ActiveProducer(*row) for row in rows]



# What producer expiry may forget (idle_producers): a producer id without a transactional id,
# and one whose transactional id no longer names it (a new producer id replaced it when its
# epochs ran out, app.domain.transit's new_producer_id: its rows were left behind, and no Send
# can use it again, its transactional id's row naming another). A transactional id's own
# producer goes with its transactional id (transactions.delete_transactional_id), after
# OUTBOX_TRANSACTIONAL_ID_EXPIRATION_MS.
_FORGETTABLE = or_(
    producers.c.transactional_id.is_(None),
    ~exists().where(transactions.c.transactional_id == producers.c.transactional_id,
                    transactions.c.producer_id == producers.c.producer_id),
)
# Idle: neither made (created, or its epoch bumped: bump_producer_epoch) nor used by a Send
# (every Send of an idempotent producer writes updated_ms in each partition it writes to) since
# `used_before`.
_IDLE = (
    producers.c.created_ms < bindparam("used_before"),
    ~exists().where(producer_partitions.c.producer_id == producers.c.producer_id,
                    producer_partitions.c.updated_ms >= bindparam("used_before")),
)
_IDLE_PRODUCERS = (
    select(producers.c.producer_id).where(_FORGETTABLE, *_IDLE)
    .order_by(producers.c.producer_id).limit(bindparam("limit"))
)


def idle_producers(conn: Connection, used_before: int, limit: int) -> list[int]:
    """The ids of the producers expiry may forget (_FORGETTABLE) whose last use (their creation
    or epoch bump, or a Send's write of their sequence state in any partition) was before `used_before`: at
    most `limit`, lowest first."""
    return list(conn.execute(_IDLE_PRODUCERS, {"used_before": used_before, "limit": limit}).scalars())


def delete_idle_producers(conn: Connection, producer_ids: list[int], used_before: int, now_ms: int) -> list[int]:
    """Delete those of `producer_ids` still idle (idle_producers' rule) with their sequence state
    in every partition; the ids deleted. Each deleted producer that had a holder leaves its
    row of forgotten_producers, forgotten now: its holder alone may take the id back while it lives
    (take_back_producer; one left by an earlier expiry of the id is written anew). Their rows are locked first, in one statement that
    skips the ones another transaction holds (on PostgreSQL an idempotent Send under way holds
    its producer's row FOR KEY SHARE, sequence_state._PRODUCER_HOLDS: that producer is in use,
    and the next pass looks again), and looked at again by a statement of its own: on
    PostgreSQL's READ COMMITTED its snapshot, taken once the locks are held, has every Send
    that held them committed, and a Send that comes later waits for this transaction and finds
    the row gone (it then takes the id back: take_back_producer, whose row is made now, not idle). On SQLite this transaction is the only writer."""
    locked = list(conn.execute(dialect.lock_for_update_skip_locked(
        conn.dialect.name,
        select(producers.c.producer_id).where(producers.c.producer_id.in_(producer_ids))
        .order_by(producers.c.producer_id))).scalars())
    if not locked:
        return []
    rows = conn.execute(
        delete(producers).where(producers.c.producer_id.in_(locked), _FORGETTABLE, *_IDLE)
        .returning(producers.c.producer_id, producers.c.principal),
        {"used_before": used_before}).all()
    deleted = sorted(producer_id for producer_id, _ in rows)
    if deleted:
        conn.execute(delete(producer_partitions).where(producer_partitions.c.producer_id.in_(deleted)))
    held = [{"producer_id": producer_id, "principal": principal, "forgotten_ms": now_ms}
            for producer_id, principal in rows if principal is not None]
    if held:
        conn.execute(dialect.upsert(conn, forgotten_producers, ("principal", "forgotten_ms")), held)
    return deleted


_OLDEST_FORGOTTEN = (
    select(forgotten_producers.c.producer_id)
    .where(forgotten_producers.c.forgotten_ms < bindparam("forgotten_before"))
    .order_by(forgotten_producers.c.forgotten_ms).limit(bindparam("limit"))
)


def drop_forgotten_producers(conn: Connection, forgotten_before: int, limit: int) -> int:
    """Delete the rows of forgotten_producers (delete_idle_producers) of ids forgotten before
    `forgotten_before`, at most `limit`, the oldest first; how many. A take-back racing it either
    read the row first (and was judged by it) or finds none, as for an id forgotten before such
    rows were kept.

    The age is tested on the deleted row itself as well as in the subquery that picks the
    oldest: on PostgreSQL a DELETE that waited for a row's lock (an expiry forgetting the id
    again, which writes its row anew) tests the row's own conditions again once it
    holds it, but not the subquery's, whose snapshot is older; without it the row just
    written went, and another principal could take the id its holder had just lost."""
    return conn.execute(delete(forgotten_producers).where(
        forgotten_producers.c.producer_id.in_(_OLDEST_FORGOTTEN),
        forgotten_producers.c.forgotten_ms < bindparam("forgotten_before")),
        {"forgotten_before": forgotten_before, "limit": limit}).rowcount
