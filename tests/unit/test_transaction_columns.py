"""The columns a transit writes and a Begin from a process's copy is checked on
(storage.transactions.STORED) are every column of `transactions` but its key, and every field of
TransactionMetadata but the transactional id: a column added to one and not the others would let
BEGUN write a Begin computed from a copy that differs in it."""

from __future__ import annotations

from dataclasses import fields

from app.domain.transaction import TransactionMetadata
from app.storage.tables import transactions
from app.storage.transactions import STORED


def test_the_stored_columns_are_the_tables_columns_but_its_key() -> None:
    assert set(STORED) == {c.key for c in transactions.c if not c.primary_key}
    assert len(STORED) == len(set(STORED))


def test_the_stored_columns_are_the_metadatas_fields_but_the_transactional_id() -> None:
    assert set(STORED) == {f.name for f in fields(TransactionMetadata)} - {"transactional_id"}
