"""The reset between PostgreSQL tests (tests/conftest.py, `_reset_postgres`): each test on the
session's database starts from it as migrated, whatever the test before it stored or drew.
It truncates only the tables that hold rows, so it must still find every one of them."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, text

from app.api.app import create_app
from app.settings import Settings
from app.storage.tables import metadata, record_leaf_pattern
from tests.conftest import LEAVES_KEPT, _reset_postgres, require_postgres
from tests.helpers import batch, begin, create_topic, ident, init_producer, send

pytestmark = pytest.mark.raw_records  # no settings fixture: the check does not run here


@pytest.fixture
def engine(request: pytest.FixtureRequest) -> Iterator[Engine]:
    require_postgres()
    engine = request.getfixturevalue("postgres_engine")
    _reset_postgres(engine)
    yield engine
    _reset_postgres(engine)


def rows_per_table(engine: Engine) -> dict[str, int]:
    with engine.connect() as conn:
        return {t.name: conn.execute(text(f'SELECT count(*) FROM "{t.name}"')).scalar_one()
                for t in metadata.sorted_tables if t.name != "counters"}


def test_every_table_a_test_wrote_to_is_empty_after_the_reset(engine: Engine, postgres_url: str) -> None:
    settings = Settings(database_url=postgres_url, run_coordinator=False, auto_migrate=False,
                        console_lag_interval_ms=0)
    with TestClient(create_app(settings)) as client:
        create_topic(client, "t", 2)
        p = init_producer(client, "tx")
        begin(client, "tx", p)
        assert send(client, [batch("t", 0, ["a", "b"], 0)], p, "tx").status_code == 200
        assert client.post("/v1/transactions/tx/commit", json=ident(p)).status_code == 200
        assert client.post("/v1/groups/g/offsets", json={"offsets": [
            {"topic": "t", "partition": 0, "offset": 1}]}).status_code == 200
    written = {name for name, count in rows_per_table(engine).items() if count}
    assert {"topics", "partitions", "records", "record_batches", "producers", "transactions",
            "group_offsets"} <= written

    _reset_postgres(engine)

    assert {name: count for name, count in rows_per_table(engine).items() if count} == {}
    with engine.connect() as conn:
        assert conn.execute(text("SELECT value FROM counters WHERE value <> 0")).all() == []


def test_every_sequence_starts_again_though_its_table_is_empty(engine: Engine) -> None:
    with engine.begin() as conn:
        sequences = conn.execute(text(
            "SELECT sequencename, start_value FROM pg_sequences WHERE schemaname = current_schema()")).all()
        assert {name for name, _ in sequences} >= {"topics_topic_id_seq", "txn_ids"}
        for name, _ in sequences:  # drawn as a rolled-back insert draws: no row left
            conn.execute(text(f"SELECT nextval('\"{name}\"'), nextval('\"{name}\"')"))
    assert rows_per_table(engine)["topics"] == 0

    _reset_postgres(engine)

    with engine.begin() as conn:
        drawn = {name: conn.execute(text(f"SELECT nextval('\"{name}\"')")).scalar_one() for name, _ in sequences}
    assert drawn == {name: start for name, start in sequences}


def leaves(engine: Engine) -> int:
    with engine.connect() as conn:
        return conn.execute(text("SELECT count(*) FROM pg_class WHERE relkind = 'r' AND relname ~ :leaf"),
                            {"leaf": record_leaf_pattern()}).scalar_one()


def test_the_leaves_of_records_past_the_kept_number_are_dropped_and_a_new_topic_takes_new_ones(
        engine: Engine, postgres_url: str) -> None:
    settings = Settings(database_url=postgres_url, run_coordinator=False, auto_migrate=False,
                        console_lag_interval_ms=0)
    with TestClient(create_app(settings)) as client:
        create_topic(client, "wide", LEAVES_KEPT + 1)
    assert leaves(engine) > LEAVES_KEPT

    _reset_postgres(engine)

    assert leaves(engine) == 0
    with TestClient(create_app(settings)) as client:
        create_topic(client, "t", 2)
        assert send(client, [batch("t", 1, ["a"])]).status_code == 200
    assert leaves(engine) == 2
