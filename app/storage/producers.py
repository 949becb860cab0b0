"""Producer ids and epochs, and the counters that hand out ids."""

from __future__ import annotations

from sqlalchemy import Connection, bindparam, insert, select, update

from app.domain.errors import UnknownProducerId
from app.domain.producer import ActiveProducer, StoredProducer
from app.storage import dialect
from app.storage.dialect import RowLock
from app.storage.tables import counters, producer_partitions, producers, transaction_partitions, txn_ids

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


def set_producer_epoch(conn: Connection, producer_id: int, producer_epoch: int) -> None:
    conn.execute(
        update(producers)
        .where(producers.c.producer_id == producer_id)
        .values(producer_epoch=producer_epoch)
    )


def current_state(conn: Connection, producer_id: int, *, lock: RowLock | None) -> StoredProducer:
    """The producer as stored; RowLock.UPDATE for an epoch bump (KIP-360), None for the
    refusal of an idempotent Send whose checks in the append failed (app.storage.append)."""
    stmt = select(producers.c.producer_epoch, producers.c.transactional_id, producers.c.principal).where(
        producers.c.producer_id == producer_id
    )
    row = conn.execute(dialect.lock_row(conn.dialect.name, stmt, lock)).first()
    if row is None:
        raise UnknownProducerId(f"unknown producer id {producer_id}; call InitProducerId")
    return StoredProducer(producer_id, row[0], row[1], row[2])


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

