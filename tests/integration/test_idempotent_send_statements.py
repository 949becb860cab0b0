"""An idempotent Send on PostgreSQL runs as many statements as a plain one: the producer's
epoch, holder and sequence are checked in the statement that writes the batch's sequence state
(app.storage.sequence_state), not read by a statement of their own. Each Send here follows one
of its own kind to the same partition, so that neither pays for a first write (a new leaf's
lock, a first sequence state)."""

from __future__ import annotations

from typing import Any

import pytest

from app.domain.records import RecordToAppend, SendBatch
from tests.helpers import statements_run

pytestmark = pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)


def _batch(values: list[str], base_sequence: int | None) -> list[SendBatch]:
    return [SendBatch("t", 0, [RecordToAppend(None, v, None, 1) for v in values], base_sequence)]


def test_an_idempotent_send_runs_no_more_statements_than_a_plain_one(services: Any) -> None:
    services.topics.create("t", 1)
    producer = services.coordinator.init_producer_id(transactional_id=None, transaction_timeout_ms=None)
    idempotent = {"producer_id": producer.producer_id, "producer_epoch": producer.producer_epoch,
                  "transactional_id": None}
    plain = {"producer_id": None, "producer_epoch": None, "transactional_id": None}
    services.log.send(_batch(["a"], None), **plain)
    services.log.send(_batch(["b"], 0), **idempotent)

    with statements_run() as plain_statements:
        (sent_plain,) = services.log.send(_batch(["c", "d"], None), **plain)
    with statements_run() as idempotent_statements:
        (sent_idempotent,) = services.log.send(_batch(["e", "f"], 1), **idempotent)

    assert (sent_plain.base_offset, sent_idempotent.base_offset) == (2, 4)
    assert len(idempotent_statements) == len(plain_statements), (plain_statements, idempotent_statements)
