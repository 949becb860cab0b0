"""A database migrated to head holds the committed_records view of the SQL catalogue
(app/storage/sql/committed_records.sqlite.sql, app/storage/sql/committed_records.postgresql.sql),
not merely a view of the same name: the
catalogue's text, created again under another name in a transaction that is rolled back,
reads back as the same definition as the migrated view."""

from __future__ import annotations

from sqlalchemy import inspect, text

from app.storage.sql import load


def _definition(conn, view: str) -> str:  # type: ignore[no-untyped-def]
    if conn.dialect.name == "sqlite":
        # SQLite keeps the CREATE statement's text as written; only the name differs.
        sql = conn.execute(text("SELECT sql FROM sqlite_master WHERE type = 'view' AND name = :v"),
                           {"v": view}).scalar_one()
        return sql.replace(f"CREATE VIEW {view} AS", "CREATE VIEW AS", 1)
    return conn.execute(text("SELECT pg_get_viewdef(CAST(:v AS regclass))"), {"v": view}).scalar_one()


def test_the_migrated_view_is_the_catalogues(database) -> None:  # type: ignore[no-untyped-def]
    catalogue = load(f"committed_records.{database.engine.dialect.name}.sql")
    # PostgreSQL's is CREATE OR REPLACE, so that a migration keeps the view's grants.
    create = "CREATE OR REPLACE VIEW" if database.engine.dialect.name == "postgresql" else "CREATE VIEW"
    assert catalogue.startswith(f"{create} committed_records AS\n")
    with database.engine.connect() as conn:
        migrated = _definition(conn, "committed_records")
        conn.exec_driver_sql(catalogue.replace(f"{create} committed_records AS",
                                               "CREATE VIEW catalogue_committed_records AS", 1))
        created = _definition(conn, "catalogue_committed_records")
        conn.rollback()
    assert migrated == created
    assert all(word in migrated for word in ("log_start_offset", "record_batches", "batch_position", "value_bytes"))


def test_the_old_jdbc_readers_columns_are_the_migrated_views_but_a_bytes_topics(database) -> None:  # type: ignore[no-untyped-def]
    from benchmarks.jdbc_reader import VIEW_COLUMNS

    with database.engine.connect() as conn:
        migrated = [c["name"] for c in inspect(conn).get_columns("committed_records")]
    assert [name for name, _ in VIEW_COLUMNS] == [c for c in migrated if c not in ("key_bytes", "value_bytes")]
    # Each column a migration added comes last (PostgreSQL's CREATE OR REPLACE VIEW may only append).
    assert migrated[-3:] == ["key_bytes", "value_bytes", "batch_position"]
