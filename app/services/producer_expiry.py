"""Producer expiry, what the producer-expiry worker (app.worker.producer_expiry) runs: forgets the
producer ids no Send has used for OUTBOX_PRODUCER_ID_EXPIRATION_MS (Kafka's
producer.id.expiration.ms), with their sequence state in every partition. Every InitProducerId
without a transactional id makes a row of `producers`, and every partition its producer writes
to a row of `producer_partitions`: without expiry a caller allowed to write one topic could
make the service hold rows without bound. The next idempotent Send of a forgotten id takes it
back (LogService.send), as a Kafka broker takes the produce of a producer whose state it no
longer holds: its producer goes on without noticing.

Which ids (storage.producers.idle_producers): those without a transactional id, and those a
transactional id no longer names (replaced when its epochs ran out); a transactional id's own
producer goes with it (OUTBOX_TRANSACTIONAL_ID_EXPIRATION_MS). Last use: the producer's
creation, or the latest write of its sequence state by a Send (every accepted batch of an
idempotent producer writes it, with the Send's time). A Send racing the expiry of its producer
either is seen by it (the producer is kept) or finds the producer gone and takes it back
(storage.producers.delete_idle_producers and take_back_producer say how).

A forgotten producer that had a holder (the principal InitProducerId handed it to) leaves a
row of forgotten_producers, its id and holder: while it lives only that holder takes the id
back, anyone else is answered UNKNOWN_PRODUCER_ID as for an id never handed out; without it a
principal allowed to write some topic could take the id of another's producer idle past the
expiration, whose next Send would then be refused. Expiry drops that row
FORGOTTEN_PRODUCER_EXPIRATIONS expirations after it forgot its producer, so that those rows stay
bounded as producers are."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

from app import metrics
from app.settings import Settings
from app.storage import producers
from app.storage.engine import Database, after_commit

# The most producer ids one pass forgets (it holds their ids; the next pass takes the rest), and
# one write transaction of it: a transaction locks its producers' rows, and holds up their
# Sends, until it commits.
PRODUCERS_EXPIRED_PER_PASS = 1_000
EXPIRY_CHUNK_PRODUCERS = 100
# How often producer expiry looks for idle producers (ProducerExpiryWorker): the look reads every
# producer's row and, for each one made before the cut-off, whether a Send wrote its state in
# any partition since (the primary key of producer_partitions). An expiration is a day by
# default: a look every pass of the coordinator (200 ms) would read them all five times a
# second for producers that become idle once a day. Among 100,000 producers with a state each
# and none idle, the look took 24 to 37 ms on PostgreSQL and 83 to 152 ms on SQLite, on a
# machine at load 7 (2026-12-06); a pass of PRODUCERS_EXPIRED_PER_PASS deletions 252 ms and
# 47 ms. A look that found its most looks again at the next pass.
PRODUCER_EXPIRY_CHECK_INTERVAL_MS = 60 * 1000
# How long a forgotten producer's row of forgotten_producers lives, in expirations (OUTBOX_PRODUCER_ID_EXPIRATION_MS)
# after expiry forgot it: a week with the default day, so that a producer that sends once a
# week (a weekly job's) is taken back by its holder alone. A multiple of the expiration, not a
# setting of its own: those rows are made at the rate producers are forgotten, so they number
# at most this many times the producers forgotten in one expiration, each a row of three
# columns, whatever the expiration is set to.
FORGOTTEN_PRODUCER_EXPIRATIONS = 7


@dataclass(frozen=True, slots=True)
class ProducerIdExpiry:
    """What one ProducerExpiry.expire did."""

    expired: int  # producer ids forgotten
    # The look found PRODUCERS_EXPIRED_PER_PASS idle producers, or dropped as many forgotten ones,
    # its most: more may be waiting.
    limit_reached: bool
    forgotten_dropped: int = 0  # rows of producers forgotten FORGOTTEN_PRODUCER_EXPIRATIONS ago (forgotten_producers)


class ProducerExpiry:
    def __init__(self, db: Database, settings: Settings) -> None:
        self.db = db
        self.settings = settings

    def expire(self, now_ms: int) -> ProducerIdExpiry:
        """Forget the producer ids idle for OUTBOX_PRODUCER_ID_EXPIRATION_MS at `now_ms`: at most
        PRODUCERS_EXPIRED_PER_PASS, read outside a transaction, then in write transactions of
        EXPIRY_CHUNK_PRODUCERS each, which lock their rows and look at their last use again
        (a producer used meanwhile is kept); then drop at most PRODUCERS_EXPIRED_PER_PASS
        rows of forgotten_producers, of producers forgotten FORGOTTEN_PRODUCER_EXPIRATIONS expirations before
        `now_ms`, in a write transaction of their own. Not durable, as group expiry's
        deletions: one lost in a crash is made again by the next pass."""
        expiration = self.settings.producer_id_expiration_ms
        if expiration is None:  # unset: producer ids are kept for ever (maintenance_chores runs no worker)
            return ProducerIdExpiry(0, False)
        used_before = now_ms - expiration
        with self.db.read() as conn:
            candidates = producers.idle_producers(conn, used_before, PRODUCERS_EXPIRED_PER_PASS)
        expired = 0
        for i in range(0, len(candidates), EXPIRY_CHUNK_PRODUCERS):
            with self.db.write(durable=False) as conn:
                deleted = producers.delete_idle_producers(conn, candidates[i:i + EXPIRY_CHUNK_PRODUCERS], used_before,
                                                          now_ms)
                after_commit(conn, partial(metrics.PRODUCER_IDS_EXPIRED.inc, len(deleted)))
            expired += len(deleted)
        forgotten_before = now_ms - FORGOTTEN_PRODUCER_EXPIRATIONS * expiration
        dropped = 0
        # Below 0 no forgotten producer is that old, and the bound would not fit a BIGINT (an expiration
        # may be 2^62).
        if forgotten_before > 0:
            with self.db.write(durable=False) as conn:
                dropped = producers.drop_forgotten_producers(conn, forgotten_before, PRODUCERS_EXPIRED_PER_PASS)
        return ProducerIdExpiry(expired, max(len(candidates), dropped) >= PRODUCERS_EXPIRED_PER_PASS, dropped)
