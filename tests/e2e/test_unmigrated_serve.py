"""`outbox serve` on a database whose schema is not at the code's head: none yet (PostgreSQL, where
migrating is a step of its own, or SQLite with OUTBOX_AUTO_MIGRATE=false), or an older
revision. It starts, says so in ONE warning, answers every API call 503 SCHEMA_NOT_MIGRATED
(retriable, naming `outbox migrate`), keeps its background chores waiting quietly, and once the
database is migrated works, chores included, without a restart.

Real `python -m app.cli serve` processes (tests/e2e/conftest.py), each on a database of its own.
"""

from __future__ import annotations

import json
import sqlite3
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool

from app.storage import migrate
from tests.e2e.api import ok, refused
from tests.e2e.conftest import ADMIN_URL, Backend, Launcher

pytestmark = pytest.mark.e2e

REVISIONS = migrate.revisions()
HEAD = REVISIONS[-1]
PREVIOUS = REVISIONS[-2]
QUIET_S = 3.0  # how long the log is watched; the coordinator's default interval is 200 ms
# (backend, the revision the database is left at: None for no schema)
STATES = [("postgresql", None), ("postgresql", PREVIOUS), ("sqlite", None)]
WHY = {None: f"the database has no outbox schema: run `outbox migrate` (to {HEAD})",
       PREVIOUS: f"the database schema is at {PREVIOUS}, this version needs {HEAD}: run `outbox migrate`"}


@pytest.fixture
def unmigrated(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Launcher, str | None]]:
    """A launcher on a database of `request.param`'s kind, left at its revision; OUTBOX_AUTO_MIGRATE
    is false for the processes it starts (SQLite would migrate itself otherwise)."""
    kind, at = request.param
    if kind == "sqlite":
        path = tmp_path / "outbox.db"
        sqlite3.connect(path).close()
        backend = Backend("sqlite", f"sqlite:///{path}", tmp_path)
        admin, name = None, None
    else:
        name = f"outbox_unmigrated_{uuid.uuid4().hex[:10]}"
        admin = create_engine(ADMIN_URL, isolation_level="AUTOCOMMIT", poolclass=NullPool)
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
        backend = Backend("postgresql", make_url(ADMIN_URL).set(database=name).render_as_string(hide_password=False),
                          tmp_path)
    launcher = Launcher(backend)
    try:
        if at is not None:
            launcher.cli("migrate", at)
        yield launcher, at
    finally:
        launcher.close()
        backend.dispose()
        if admin is not None:
            with admin.connect() as conn:
                conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
            admin.dispose()


def _serve(launcher: Launcher, **settings: object):  # type: ignore[no-untyped-def]
    # Bounds under any machine's open-file limit: the warning of a low one (app.cli.server)
    # would be a line more than these tests count.
    server = launcher.start_server(auto_migrate=False, http_max_connections=100, max_waiting_requests=50,
                                   max_waiting_requests_per_principal=50, **settings)
    server.wait_for_log("Application startup complete")
    return server


@pytest.mark.parametrize("unmigrated", STATES, indirect=True, ids=["postgresql-empty", "postgresql-older", "sqlite-empty"])
def test_serve_warns_once_and_its_background_chores_wait_quietly(unmigrated) -> None:  # type: ignore[no-untyped-def]
    launcher, at = unmigrated
    server = _serve(launcher)
    time.sleep(QUIET_S)
    lines = server.log_text().splitlines()
    assert [line.split(" ", 2)[2] for line in lines if " WARNING " in line] == [
        f"WARNING app.storage.migrate: {WHY[at]}; until then /readyz and the API answer 503 (SCHEMA_NOT_MIGRATED) "
        f"and background work waits"]
    assert not [line for line in lines if " ERROR " in line or "Traceback" in line], lines
    # The warning and uvicorn's four start-up lines; nothing since.
    assert len(lines) == 5, lines


@pytest.mark.parametrize("unmigrated", STATES, indirect=True, ids=["postgresql-empty", "postgresql-older", "sqlite-empty"])
def test_api_calls_answer_503_schema_not_migrated_naming_outbox_migrate(unmigrated) -> None:  # type: ignore[no-untyped-def]
    launcher, at = unmigrated
    server = _serve(launcher)
    with server.client() as c:
        created = c.post("/v1/topics", json={"name": "orders", "partitions": 1})
        listed = c.get("/v1/transactions")
        # The Send too, which app.api.direct_route serves past FastAPI's router.
        sent = c.post("/v1/records", json={"batches": [{"topic": "orders", "partition": 0, "records": [{"value": 1}]}]})
        ready = c.get("/readyz")
    for r in (created, listed, sent):
        assert (r.status_code, r.headers.get("retry-after"), r.json()) == (
            503, "1", {"error_code": "SCHEMA_NOT_MIGRATED", "message": WHY[at], "retriable": True})
    assert (ready.status_code, ready.json()) == (503, {
        "error_code": "SCHEMA_NOT_MIGRATED", "message": WHY[at], "retriable": True})
    assert "Traceback" not in server.log_text()


@pytest.mark.parametrize("unmigrated", STATES, indirect=True, ids=["postgresql-empty", "postgresql-older", "sqlite-empty"])
def test_once_migrated_the_api_serves_and_the_coordinator_works_without_a_restart(unmigrated) -> None:  # type: ignore[no-untyped-def]
    launcher, _ = unmigrated
    server = _serve(launcher)
    with server.client() as c:
        refused(c.post("/v1/topics", json={"name": "orders", "partitions": 1}), 503, "SCHEMA_NOT_MIGRATED")
        launcher.cli("migrate")
        ok(c.post("/v1/topics", json={"name": "orders", "partitions": 1}), 201)
        producer = ok(c.post("/v1/producers", json={"transactional_id": "late", "transaction_timeout_ms": 1}))
        ok(c.post("/v1/transactions/late/begin", json={k: producer[k] for k in ("producer_id", "producer_epoch")}))
        # Only a coordinator worker ends a transaction past its timeout.
        deadline = time.monotonic() + 20
        while (state := ok(c.get("/v1/transactions/late"))["state"]) != "CompleteAbort" and time.monotonic() < deadline:
            time.sleep(0.1)
    assert state == "CompleteAbort"
    assert server.alive()


@pytest.mark.parametrize("unmigrated", [("postgresql", None)], indirect=True, ids=["postgresql-empty"])
def test_with_authentication_on_it_starts_and_takes_keys_once_migrated(unmigrated) -> None:  # type: ignore[no-untyped-def]
    launcher, _ = unmigrated
    server = _serve(launcher, authentication="api_key", super_users="User:admin")
    with server.client() as c:
        refused(c.get("/v1/topics"), 503, "SCHEMA_NOT_MIGRATED")
        launcher.cli("migrate")
        key = json.loads(launcher.cli("principals", "create", "admin"))["api_key"]
        # The key was created by another process: this one sees it within its refresh interval.
        deadline = time.monotonic() + 10
        while (r := c.get("/v1/topics", headers={"authorization": f"Bearer {key}"})).status_code != 200 \
                and time.monotonic() < deadline:
            time.sleep(0.1)
    assert (r.status_code, r.json()) == (200, {"topics": []})
@pytest.mark.parametrize("run_coordinator", [True, False], ids=["with-coordinator", "no-coordinator"])
@pytest.mark.parametrize("unmigrated", [("postgresql", None)], indirect=True, ids=["postgresql-empty"])
def test_the_ready_line_comes_once_the_database_is_migrated(unmigrated, run_coordinator: bool) -> None:  # type: ignore[no-untyped-def]
    launcher, _ = unmigrated
    server = _serve(launcher, run_coordinator=run_coordinator)
    assert " is ready at " not in server.log_text()
    launcher.cli("migrate")
    server.wait_for_log("outbox is ready at ")
    (ready,) = [line.split(" ", 2)[2] for line in server.log_text().splitlines() if " is ready at " in line]
    assert ready == f"INFO app.cli: outbox is ready at {server.url} (Swagger UI: {server.url}/docs)"
