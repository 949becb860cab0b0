"""The data source's first check (spark_jobs.reader.checks.check_database) refuses a database
whose committed_records view predates batch_position (migration 0020): every split is bounded
by batch positions; and on PostgreSQL asks for the driver it is given, by member or by value."""

from __future__ import annotations

import sys

import pytest
from alembic import command

from app.storage import migrate
from spark_jobs.common.options import PostgresDriver
from spark_jobs.errors import OutboxSourceError
from spark_jobs.reader.checks import check_database
from spark_jobs.reader.options import Database


def test_a_database_migrated_to_0019_only_is_refused_by_name(empty_url: str) -> None:
    command.upgrade(migrate.alembic_config(empty_url), "0019")
    database = Database.from_url(empty_url)

    with pytest.raises(OutboxSourceError) as raised:
        check_database(database, driver=PostgresDriver.PSYCOPG)

    assert str(raised.value) == (
        f"the database {database.display} has no committed_records view with batch_position: it is not an "
        "outbox database migrated to 0020 or later (run outbox migrate, or start outbox serve on it)")


def test_a_database_migrated_to_0020_passes(empty_url: str) -> None:
    command.upgrade(migrate.alembic_config(empty_url), "0020")

    assert check_database(Database.from_url(empty_url), driver=PostgresDriver.PSYCOPG) is None


@pytest.mark.parametrize("driver", [PostgresDriver.ADBC, "adbc"], ids=["member", "value"])
def test_on_postgresql_the_adbc_driver_is_asked_for_by_member_or_by_value(
        monkeypatch: pytest.MonkeyPatch, driver: PostgresDriver | str) -> None:
    # Refused before any connection: the database need not exist.
    monkeypatch.setitem(sys.modules, "adbc_driver_postgresql", None)

    with pytest.raises(OutboxSourceError, match="^adbc-driver-postgresql is not installed: "):
        check_database(Database.from_url("postgresql://postgres@127.0.0.1:5432/outbox_nowhere"), driver=driver)


@pytest.mark.parametrize("empty_url", ["postgresql"], indirect=True)
def test_on_postgresql_a_role_that_may_not_read_the_view_is_told_so(empty_url: str) -> None:
    import uuid

    import psycopg
    from sqlalchemy.engine import make_url

    command.upgrade(migrate.alembic_config(empty_url), "head")
    role = f"stranger_{uuid.uuid4().hex[:8]}"
    dsn = empty_url.replace("postgresql+psycopg", "postgresql")
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(f"CREATE ROLE {role} LOGIN PASSWORD 'pw'")
    try:
        as_role = make_url(empty_url).set(drivername="postgresql", username=role, password="pw")
        database = Database.from_url(as_role.render_as_string(hide_password=False))
        with pytest.raises(OutboxSourceError) as raised:
            check_database(database, driver=PostgresDriver.PSYCOPG)
        assert str(raised.value) == (f"cannot read the database {database.display}: permission denied for view "
                                     "committed_records (run outbox grant-reader for the role)")
    finally:
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute(f"DROP ROLE {role}")
