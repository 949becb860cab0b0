"""The raise of a taken-back producer id's epoch (storage.producers.raise_taken_back_epoch) in a
database transaction of its own, for both callers that need it: an idempotent Send refused at
its epoch (LogService.send) and the holder's epoch bump (ProducerInit's InitProducerId without a
transactional id). Its own transaction, committed before the Send or the bump is tried again:
it locks the producer's row FOR UPDATE, and so waits for the older epoch's Sends in flight;
made inside a Send's, after that Send took a partition's lock, it could wait for a concurrent
Send that waits for that partition's lock (LogService._take_back says the same of a take-back)."""

from __future__ import annotations

from app.domain.clock import Clock
from app.storage import producers
from app.storage.engine import Database


def raise_taken_back_epoch(db: Database, clock: Clock, producer_id: int, producer_epoch: int,
                           principal: str) -> bool:
    """storage.producers.raise_taken_back_epoch, committed: True where the row is (now) taken
    back at `producer_epoch` for `principal`, and the request may be tried again."""
    with db.write() as conn:
        return producers.raise_taken_back_epoch(conn, producer_id, producer_epoch, clock(), principal)
