"""The transaction version a Commit or Abort speaks (a Kafka client's EndTxn: 5 is version 2's),
switched to in its transactional id's row (SpeakVersion) before the request's rules are
applied, since they are that version's (`TransactionCoordinator.end_transaction`).

The switch costs no write of its own where the request writes the row anyway: it is composed
with whatever the request then writes (its decision, or an Abort's bump) and stored in the
same UPDATE; alone only where nothing else is written. A Commit that carries batches (the
HTTP door's, which speaks no version) writes it first, so that the Begin and appends that
follow see it stored. Runs in the request's database transaction, which holds the row
FOR UPDATE."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Connection

from app.domain.transaction import TransactionMetadata
from app.domain.transit import TxnTransit, speaking, then
from app.domain.types import TransactionVersion
from app.storage import transactions as txns


@dataclass(slots=True)
class VersionSwitch:
    """`stored`: the transactional id's row as stored (the caller sets it again when it writes
    the row otherwise, e.g. joining a transaction); `pending`: the switch not yet written."""

    stored: TransactionMetadata
    pending: TxnTransit | None

    @classmethod
    def spoken_by(cls, conn: Connection, stored: TransactionMetadata,
                  transaction_version: TransactionVersion | None, now: int, *, write_first: bool) -> VersionSwitch:
        """The switch of the row `stored` to the version a request speaks (None: the stored
        one, no switch); written at once where `write_first` (a Commit that carries batches)."""
        pending = speaking(stored, transaction_version, now)
        if pending is not None and write_first:
            return cls(txns.apply_transit(conn, stored, pending), None)
        return cls(stored, pending)

    @property
    def meta(self) -> TransactionMetadata:
        """The row as the request's rules see it: in the version it speaks."""
        return self.stored if self.pending is None else self.pending.after

    def spoken(self, transit: TxnTransit) -> TxnTransit:
        """`transit` of this transactional id (computed from `meta`) with the switch still to
        write composed before it."""
        return transit if self.pending is None else then(self.pending, transit)

    def write(self, conn: Connection, transit: TxnTransit) -> TransactionMetadata:
        """`transit` and the switch written over the stored row, in one UPDATE."""
        return txns.apply_transit(conn, self.stored, self.spoken(transit))

    def write_alone(self, conn: Connection) -> TransactionMetadata:
        """The switch written by itself, where the request writes nothing else of the row (a
        decided transaction keeps the version it was decided under, so only a complete one
        has a switch pending); the row as stored then."""
        if self.pending is not None:
            self.stored = txns.apply_transit(conn, self.stored, self.pending)
            self.pending = None
        return self.stored
