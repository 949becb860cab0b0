"""Pooled connections that the database dropped (a restart, an operator's
pg_terminate_backend), with pool pre-ping off, the default: the request that meets the first
dead connection is refused as retriable and writes nothing; the pool is then replaced, so the
requests after it succeed, however many dead connections the pool held."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, text

from app.api.app import create_app
from app.settings import Settings

POOL = 4


@pytest.fixture
def pg_client(request: pytest.FixtureRequest) -> Iterator[tuple[TestClient, str]]:
    """A service on PostgreSQL; `@pytest.mark.parametrize("pg_client", [True], indirect=True)`
    turns pre-ping on."""
    url = request.getfixturevalue("postgres_url")
    from tests.conftest import _reset_postgres

    _reset_postgres(request.getfixturevalue("postgres_engine"))
    settings = Settings(database_url=url, run_coordinator=False, auto_migrate=False, db_pool_size=POOL,
                        db_pool_pre_ping=getattr(request, "param", False))
    with TestClient(create_app(settings)) as client:
        yield client, url


def _fill_pool(client: TestClient) -> list[int]:
    """Check out POOL connections at once, so the pool holds that many when they return.
    Returns their backends' process ids."""
    barrier = threading.Barrier(POOL)
    pool = client.app.state.services.db.engine.pool  # type: ignore[attr-defined]
    pids: list[int] = []

    def take() -> None:
        conn = pool.connect()
        cursor = conn.cursor()
        cursor.execute("SELECT pg_backend_pid()")
        pids.append(cursor.fetchone()[0])
        cursor.close()
        conn.rollback()
        barrier.wait()
        conn.close()

    threads = [threading.Thread(target=take) for _ in range(POOL)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert pool.checkedin() == POOL and len(set(pids)) == POOL
    return pids


def _terminate(url: str, pids: list[int]) -> int:
    """Terminate the backends and wait (up to 30 s) until they are gone; returns how many are.
    pg_terminate_backend's own wait is not what is counted: on a loaded machine a backend can
    take longer to exit than any timeout given to it, and it answers false then although the
    backend is on its way out."""
    admin = create_engine(url, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(text("SELECT pg_terminate_backend(pid) FROM unnest(:pids) AS pid"), {"pids": pids})
            deadline = time.monotonic() + 30
            while True:
                left = conn.execute(text("SELECT count(*) FROM pg_stat_activity WHERE pid = ANY(:pids)"),
                                    {"pids": pids}).scalar_one()
                if left == 0 or time.monotonic() > deadline:
                    return len(pids) - left
                time.sleep(0.05)
    finally:
        admin.dispose()


def _send(client: TestClient, key: str):  # type: ignore[no-untyped-def]
    return client.post("/v1/records", json={"batches": [
        {"topic": "orders", "partition": 0, "records": [{"key": key, "value": 1}]}]})


def test_after_the_database_drops_every_pooled_connection_one_request_is_refused_retriably_then_all_succeed(
    pg_client: tuple[TestClient, str],
) -> None:
    client, url = pg_client
    assert client.post("/v1/topics", json={"name": "orders", "partitions": 1}).status_code == 201
    assert _terminate(url, _fill_pool(client)) == POOL

    answers = [_send(client, f"k{i}") for i in range(POOL + 2)]

    refused = [a for a in answers if a.status_code != 200]
    assert len(refused) <= 1
    for a in refused:
        assert a.status_code == 503
        assert a.json()["error_code"] == "STORAGE_UNAVAILABLE" and a.json()["retriable"] is True
    assert all(a.status_code == 200 for a in answers[1:])
    # Exactly the accepted records are in the log, at consecutive offsets from 0.
    accepted = [f"k{i}" for i, a in enumerate(answers) if a.status_code == 200]
    page = client.get("/v1/topics/orders/partitions/0/records", params={"offset": 0}).json()
    assert [(r["offset"], r["key"]) for r in page["records"]] == list(enumerate(accepted))


@pytest.mark.parametrize("pg_client", [True], indirect=True)
def test_with_pre_ping_on_no_request_meets_a_dropped_connection(pg_client: tuple[TestClient, str]) -> None:
    client, url = pg_client
    assert client.post("/v1/topics", json={"name": "orders", "partitions": 1}).status_code == 201
    assert _terminate(url, _fill_pool(client)) == POOL

    assert [_send(client, f"k{i}").status_code for i in range(POOL + 2)] == [200] * (POOL + 2)
