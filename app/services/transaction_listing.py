"""Reading transactions, for operators and for the producer that lost an answer: one
transactional id described (its metadata with its partitions and staged offsets: GET
/v1/transactions/{id}, Kafka's DescribeTransactions, `outbox transactions describe`), and
lists of them (GET /v1/transactions, Kafka's ListTransactions, `outbox transactions list` and
`hanging`). Each is one read-only database transaction; nothing here changes a transaction,
which is app.services.transaction_coordinator's (it holds a TransactionListing as `listing`).

Also the shape the coordinator's requests answer in (TransactionView, view_of)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

from sqlalchemy import Connection

from app.domain import acl
from app.domain.acl import Operation, Resource
from app.domain.clock import Clock
from app.domain.errors import InvalidRequest
from app.domain.transaction import IDLE_STATES, OPEN_STATE_NAMES, OPEN_TRANSACTION_STATES, TransactionMetadata
from app.domain.types import TRANSACTION_LIST_MAX, TransactionState
from app.services.log_service import SendResult
from app.services.transaction_join import require
from app.settings import Settings
from app.storage import transaction_listing, transactions as txns
from app.storage.engine import Database


@dataclass(frozen=True, slots=True)
class TransactionView:
    """A transactional_id's metadata with its partitions and staged offsets, read in the same
    database transaction that changed it (what Begin, AddOffsets, Commit and Abort answer) or
    read it (describe)."""

    meta: TransactionMetadata
    partitions: list[txns.TxnPartition] = field(default_factory=list)
    pending_offsets: list[txns.PendingOffset] = field(default_factory=list)
    sent: list[SendResult] = field(default_factory=list)  # the batches a Commit carried

    def describable(self, allows: Callable[[Operation, Resource], bool]) -> TransactionView:
        """The view as a principal may see it, `allows` being its door's decision for it: only
        the partitions of the topics it may describe, and the staged offsets of the topics and
        groups it may describe. A refusal reveals nothing the principal may not describe, so
        both doors describe a transaction through this (Kafka's DescribeTransactions leaves the
        other topics out too); DESCRIBE on the transactional id is the door's to check first."""
        topic_ok = lambda name: allows(Operation.DESCRIBE, acl.topic(name))  # noqa: E731
        return replace(
            self,
            partitions=[p for p in self.partitions if topic_ok(p.topic)],
            pending_offsets=[o for o in self.pending_offsets
                             if topic_ok(o.topic) and allows(Operation.DESCRIBE, acl.group(o.group_id))],
        )


def view_of(conn: Connection, meta: TransactionMetadata, sent: list[SendResult] | None = None) -> TransactionView:
    """The view of a transaction just changed to `meta`, read in the database transaction
    that changed it."""
    if meta.state in IDLE_STATES:
        return TransactionView(meta, sent=sent or [])  # completion removed its partitions and staged offsets
    return TransactionView(
        meta, txns.partitions_of(conn, meta.transactional_id), txns.pending_offsets_of(conn, meta.transactional_id),
        sent or [],
    )


class TransactionListing:
    def __init__(self, db: Database, settings: Settings, clock: Clock) -> None:
        self.db = db
        self.settings = settings
        self.clock = clock

    def describe(self, transactional_id: str) -> TransactionView:
        """The transactional id's transaction as stored, whatever its state;
        TransactionalIdNotFound if there is none."""
        with self.db.read() as conn:
            meta = require(conn, transactional_id, lock=None)
            return TransactionView(
                meta, txns.partitions_of(conn, transactional_id), txns.pending_offsets_of(conn, transactional_id)
            )

    def list(
        self, states: list[TransactionState] | None, limit: int, min_age_ms: int | None = None,
        transactional_id_prefix: str | None = None,
    ) -> list[TransactionMetadata]:
        """Transactions, optionally only those in `states`, only those open (an
        OPEN_TRANSACTION_STATES state) for at least min_age_ms, and only the transactional ids
        that start with transactional_id_prefix. A state with no transaction open, asked for
        with min_age_ms, is refused: the list would always be empty."""
        ended = [s.value for s in states or () if s not in OPEN_TRANSACTION_STATES]
        if min_age_ms is not None and ended:
            raise InvalidRequest(
                f"min_age_ms lists open transactions only (states {OPEN_STATE_NAMES}); in state "
                f"{', '.join(ended)} no transaction is open: list {'it' if len(ended) == 1 else 'them'} "
                "without min_age_ms"
            )
        open_since = None if min_age_ms is None else self.clock() - min_age_ms
        with self.db.read() as conn:
            return transaction_listing.list_all(conn, states=states, open_since_ms=open_since,
                                 transactional_id_prefix=transactional_id_prefix, limit=limit)

    def list_begun_before(
        self, states: list[TransactionState] | None, limit: int, duration_ms: int,
    ) -> list[TransactionMetadata]:
        """Kafka's ListTransactions with a DurationFilter: the transactional ids, optionally
        only those in `states`, whose last transaction began more than duration_ms ago, in
        whatever state it is now (Kafka's coordinator compares the start time alone, and an id
        that began none as begun at -1)."""
        with self.db.read() as conn:
            return transaction_listing.list_all(conn, states=states, begun_before_ms=self.clock() - duration_ms,
                                                limit=limit)

    def hanging(self, now_ms: int, transactional_id_prefix: str | None = None) -> list[TransactionMetadata]:
        """Transactions open longer than the maximum timeout, or decided but not completed for
        as long: the coordinator should have ended them, so none is running or it is failing.
        Optionally only the transactional ids that start with transactional_id_prefix."""
        with self.db.read() as conn:
            stale = now_ms - self.settings.max_transaction_timeout_ms
            # At most a list's maximum of open ones and as many decided ones: the two lists it
            # was built from, one of each, held that many.
            return transaction_listing.list_hanging(conn, stale, limit=2 * TRANSACTION_LIST_MAX,
                                     transactional_id_prefix=transactional_id_prefix)
