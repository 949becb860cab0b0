"""Reading transactions, for operators and for the producer that lost an answer: one
transactional id described (its metadata with its partitions and staged offsets: GET
/v1/transactions/{id}, Kafka's DescribeTransactions, `outbox transactions describe`), and
lists of them (GET /v1/transactions, Kafka's ListTransactions, `outbox transactions list` and
`hanging`). Each is one read-only database transaction; nothing here changes a transaction,
which is app.services.transaction_coordinator's (it holds a TransactionListing as `listing`).

Also the shape the coordinator's requests answer in (TransactionView, view_of)."""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass, field, replace

from sqlalchemy import Connection

from app.domain import acl
from app.domain.acl import Operation, Resource
from app.domain.clock import Clock
from app.domain.errors import InvalidRequest
from app.domain.transaction import IDLE_STATES, OPEN_STATE_NAMES, OPEN_TRANSACTION_STATES, TransactionMetadata
from app.domain.types import TRANSACTION_LIST_DEFAULT, TRANSACTION_LIST_EXAMINED_MAX, TransactionState
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


# Whether the caller may describe a transactional id (its door's ACL decision).
Describable = Callable[[str], bool]
# How many transactional ids one read of a filtered walk takes (TransactionListing._walk): one
# round trip per chunk, and a chunk's rows held at once.
TRANSACTION_LIST_CHUNK = 1000


@dataclass(frozen=True, slots=True)
class TransactionPage:
    """A list of transactions, and, when the list was cut (by its limit or by the ids one
    request may read), the transactional id to continue after: more may follow it. None: the
    list is complete."""

    transactions: list[TransactionMetadata]
    next_after: str | None = None


class TransactionListing:
    # The ids one bounded walk reads at most (_walk); an attribute so that a test can make it small.
    examined_max = TRANSACTION_LIST_EXAMINED_MAX

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
        transactional_id_prefix: str | None = None, *, after: str | None = None,
        describable: Describable | None = None, producer_ids: Collection[int] | None = None,
        bounded: bool = True,
    ) -> TransactionPage:
        """Transactions, optionally only those in `states`, only those open (an
        OPEN_TRANSACTION_STATES state) for at least min_age_ms, only the transactional ids
        that start with transactional_id_prefix, and only those of `producer_ids`: a page of
        at most `limit` after `after` (_walk). A state with no transaction open, asked for
        with min_age_ms, is refused: the list would always be empty."""
        ended = [s.value for s in states or () if s not in OPEN_TRANSACTION_STATES]
        if min_age_ms is not None and ended:
            raise InvalidRequest(
                f"min_age_ms lists open transactions only (states {OPEN_STATE_NAMES}); in state "
                f"{', '.join(ended)} no transaction is open: list {'it' if len(ended) == 1 else 'them'} "
                "without min_age_ms"
            )
        open_since = None if min_age_ms is None else self.clock() - min_age_ms
        return self._walk(
            lambda conn, from_id, n: transaction_listing.list_all(
                conn, states=states, open_since_ms=open_since, transactional_id_prefix=transactional_id_prefix,
                producer_ids=producer_ids, after=from_id, limit=n),
            limit, after, describable, bounded)

    def list_begun_before(
        self, states: list[TransactionState] | None, limit: int, duration_ms: int, *,
        describable: Describable | None = None, producer_ids: Collection[int] | None = None,
        bounded: bool = True,
    ) -> TransactionPage:
        """Kafka's ListTransactions with a DurationFilter: the transactional ids, optionally
        only those in `states` and of `producer_ids`, whose last transaction began more than
        duration_ms ago, in whatever state it is now (Kafka's coordinator compares the start
        time alone, and an id that began none as begun at -1)."""
        begun_before = self.clock() - duration_ms
        return self._walk(
            lambda conn, from_id, n: transaction_listing.list_all(
                conn, states=states, begun_before_ms=begun_before, producer_ids=producer_ids,
                after=from_id, limit=n),
            limit, None, describable, bounded)

    def hanging(
        self, now_ms: int, transactional_id_prefix: str | None = None, *, limit: int = TRANSACTION_LIST_DEFAULT,
        after: str | None = None, describable: Describable | None = None,
        bounded: bool = True,
    ) -> TransactionPage:
        """Transactions open longer than the maximum timeout, or decided but not completed for
        as long: the coordinator should have ended them, so none is running or it is failing.
        Optionally only the transactional ids that start with transactional_id_prefix; a page
        as list's."""
        stale = now_ms - self.settings.max_transaction_timeout_ms
        return self._walk(
            lambda conn, from_id, n: transaction_listing.list_all(
                conn, stale_before_ms=stale, transactional_id_prefix=transactional_id_prefix,
                after=from_id, limit=n),
            limit, after, describable, bounded)

    def _walk(
        self, read: Callable[[Connection, str | None, int], list[TransactionMetadata]], limit: int,
        after: str | None, describable: Describable | None, bounded: bool,
    ) -> TransactionPage:
        """The first `limit` transactions after `after` that `read` finds (its filters are
        SQL's) and `describable` keeps (the caller's ACLs, which SQL cannot ask), in
        transactional id order, read in chunks by keyset. The ACLs are applied per chunk
        rather than to one capped read: a read capped before them let other principals' ids
        take every place, and a caller who may describe one id late in the order got an empty
        list that said nothing. `bounded`: at most examined_max ids are read per call (not
        bounded: the Kafka door's, which cannot page); when that or `limit` ends the walk
        before the ids do, next_after says where the next page starts."""
        examined_max = self.examined_max if bounded else None
        found: list[TransactionMetadata] = []
        examined = 0
        cursor = after
        with self.db.read() as conn:
            while True:
                # Unfiltered, every row read is kept: one read of limit + 1 tells whether more
                # follow. Filtered, a chunk's share kept is unknown: chunks of a fixed size.
                size = limit - len(found) + 1 if describable is None else TRANSACTION_LIST_CHUNK
                if examined_max is not None:
                    size = min(size, examined_max - examined)
                rows = read(conn, cursor, size)
                for i, m in enumerate(rows):
                    examined += 1
                    cursor = m.transactional_id
                    if describable is None or describable(m.transactional_id):
                        found.append(m)
                        if len(found) == limit:
                            # The last id there is: nothing to continue from.
                            ended = i == len(rows) - 1 and len(rows) < size
                            return TransactionPage(found, None if ended else cursor)
                if len(rows) < size:
                    return TransactionPage(found, None)
                if examined_max is not None and examined >= examined_max:
                    return TransactionPage(found, cursor)
