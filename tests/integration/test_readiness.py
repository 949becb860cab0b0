"""/readyz when the database does not answer: 503 STORAGE_UNAVAILABLE, retriable, naming the
error's kind; the driver's own words (a database's name, a host, a role) go to the service's log,
not to a caller without credentials."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from sqlalchemy.exc import OperationalError


def test_readyz_with_the_database_away_answers_503_and_logs_why(
        client: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    def away() -> None:
        raise OperationalError("SELECT 1", {}, Exception('database "orders_prod" does not exist\nDETAIL: more'))

    monkeypatch.setattr(client.app.state.schema_gate, "revisions", away)
    with caplog.at_level(logging.WARNING, logger="app.api.routers.health"):
        r = client.get("/readyz")
    assert (r.status_code, r.json()) == (503, {
        "error_code": "STORAGE_UNAVAILABLE", "retriable": True,
        "message": "database unreachable (OperationalError): the service's log says why"})
    assert [m.getMessage() for m in caplog.records if m.name == "app.api.routers.health"] == [
        '/readyz: the database is unreachable: database "orders_prod" does not exist']
