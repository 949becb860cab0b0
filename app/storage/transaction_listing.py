"""The transactional ids as operators and the metrics see them: listed by state, age and
prefix (Kafka's ListTransactions, `outbox transactions list`, the console), the hanging ones,
and the counts the gauges sample. Read-only; the rows' reads and writes for the coordinator are
app.storage.transactions'."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from sqlalchemy import Connection, and_, func, or_, select

from app.domain.transaction import (
    COMPLETING_STATES,
    OPEN_TRANSACTION_STATES,
    STORED_COMPLETING_STATES,
    TransactionMetadata,
)
from app.domain.types import TransactionState
from app.storage.tables import transactions
from app.storage.transactions import metadata_of


def list_all(
    conn: Connection,
    *,
    states: list[TransactionState] | None = None,
    open_since_ms: int | None = None,
    begun_before_ms: int | None = None,
    stale_before_ms: int | None = None,
    transactional_id_prefix: str | None = None,
    producer_ids: Collection[int] | None = None,
    after: str | None = None,
    limit: int = 1000,
) -> list[TransactionMetadata]:
    """The first `limit` transactional ids after `after` (all when None) that pass every filter
    given, in transactional id order: a page of a keyset walk, each page one index range of the
    primary key however many ids the pages before it passed over.
    `open_since_ms`: only open transactions (OPEN_TRANSACTION_STATES) begun then or earlier.
    `begun_before_ms`: only transactional ids whose last transaction began before then, in any
    state, one that never began counting as begun at Kafka's -1 (Kafka's DurationFilter).
    `stale_before_ms`: only the hanging ones (_hanging). `producer_ids`: only those whose
    producer id is one of them (Kafka's ProducerIdFilters)."""
    t = transactions.c
    stmt = select(transactions).order_by(t.transactional_id).limit(limit)
    if after is not None:
        stmt = stmt.where(t.transactional_id > after)
    if states:
        stmt = stmt.where(t.state.in_([s.value for s in states]))
    if open_since_ms is not None:
        stmt = stmt.where(t.txn_started_ms <= open_since_ms,
                          t.state.in_([s.value for s in OPEN_TRANSACTION_STATES]))
    if begun_before_ms is not None:
        stmt = stmt.where(func.coalesce(t.txn_started_ms, -1) < begun_before_ms)
    if stale_before_ms is not None:
        stmt = stmt.where(_hanging(stale_before_ms))
    if producer_ids:
        stmt = stmt.where(t.producer_id.in_(sorted(producer_ids)))
    if transactional_id_prefix is not None:
        stmt = stmt.where(_id_starts_with(transactional_id_prefix, conn.dialect.name))
    return [metadata_of(r) for r in conn.execute(stmt)]


def _id_starts_with(prefix: str, dialect_name: str) -> Any:
    """transactional_id starts with `prefix`, in any collation.

    SQLite: a range of the primary key, [prefix, the first text after every text that starts
    with it): its BINARY collation orders texts by code point, so the range is exact, and it is
    an index range scan. Not LIKE 'prefix%': SQLite's LIKE ignores ASCII case (the prefix 'A.'
    would list 'a.1') and reads the whole table, and the prefix's '%' and '_' would need escaping
    (unescaped, 'a_b' would list 'axb.1').

    PostgreSQL: starts_with(). A range is exact there only under a collation that orders by
    code point (C, POSIX, C.UTF-8); under a language's (glibc's en_US, the postgres image's
    default) punctuation is weighed last, so 'sink.10' may sort outside ['sink.', 'sink/') and
    be left out, and the Spark sink would never abort that leftover. starts_with compares
    characters whatever the collation; it reads the table (one row per transactional id)
    rather than an index range, which is the price of being exact on every database.
    """
    t = transactions.c.transactional_id
    if dialect_name == "postgresql":
        return func.starts_with(t, prefix)
    successor = _prefix_successor(prefix)
    return t >= prefix if successor is None else and_(t >= prefix, t < successor)


def _prefix_successor(prefix: str) -> str | None:
    """The least text greater than every text that starts with `prefix`, in code point order:
    its last character that is not the last code point, plus one (surrogates skipped: neither
    database stores them), with what followed that character dropped. None when every
    character is the last code point: then no text is greater."""
    kept = prefix.rstrip(chr(0x10FFFF))
    if not kept:
        return None
    following = ord(kept[-1]) + 1
    if 0xD800 <= following <= 0xDFFF:
        following = 0xE000
    return kept[:-1] + chr(following)


def count_by_state(conn: Connection) -> dict[TransactionState, int]:
    """How many transactional_ids are in each state (states with none are left out)."""
    rows = conn.execute(
        select(transactions.c.state, func.count()).group_by(transactions.c.state)
    ).all()
    return {TransactionState(state): n for state, n in rows}


def _hanging(stale_before_ms: int) -> Any:
    """Open since stale_before_ms or earlier, or decided but not completed since then: what
    the coordinator should have ended already (TransactionListing.hanging)."""
    t = transactions.c
    return or_(
        and_(t.state == TransactionState.ONGOING.value, t.txn_started_ms <= stale_before_ms),
        and_(
            t.state.in_(sorted(s.value for s in STORED_COMPLETING_STATES)),
            t.updated_ms <= stale_before_ms,
        ),
    )


def count_hanging(conn: Connection, stale_before_ms: int) -> int:
    return conn.execute(
        select(func.count()).select_from(transactions).where(_hanging(stale_before_ms))
    ).scalar_one()


def oldest_open_started_ms(conn: Connection) -> int | None:
    """When the oldest open transaction (OPEN_TRANSACTION_STATES, as stored) began; None if none
    is open. The one meaning of open, that of `age_ms` and `min_age_ms`: a Prepared transaction
    waiting for its application, or one stuck completing, holds back its partitions' last stable
    offset as an Ongoing one does, so the gauge an operator alerts on counts it too."""
    stored_open = (OPEN_TRANSACTION_STATES - COMPLETING_STATES) | STORED_COMPLETING_STATES
    return conn.execute(
        select(func.min(transactions.c.txn_started_ms))
        .where(transactions.c.state.in_(sorted(s.value for s in stored_open)))
    ).scalar()
