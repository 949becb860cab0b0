"""A database migrated to head holds the committed_records view of the SQL catalogue
(app/storage/sql/committed_records.sqlite.sql, app/storage/sql/committed_records.postgresql.sql),
not merely a view of the same name: the catalogue's text, created again under another name in
a transaction that is rolled back, reads back as the same definition as the migrated view. On
PostgreSQL the same holds of each log partition's view, the catalogue's text with the
partition written in."""

from __future__ import annotations

import pytest
from sqlalchemy import inspect, text

from app.storage.sql import EVERY_PARTITION, load
from app.reader_relations import partition_view
from migrations.sql_files import render
from tests.helpers import create_topic


def _definition(conn, view: str) -> str:  # type: ignore[no-untyped-def]
    if conn.dialect.name == "sqlite":
        # SQLite keeps the CREATE statement's text as written; only the name differs.
        sql = conn.execute(text("SELECT sql FROM sqlite_master WHERE type = 'view' AND name = :v"),
                           {"v": view}).scalar_one()
        return sql.replace(f"CREATE VIEW {view} AS", "CREATE VIEW AS", 1)
    return conn.execute(text("SELECT pg_get_viewdef(CAST(:v AS regclass))"), {"v": view}).scalar_one()


def one_partition(topic_id: int, partition: int, topic: str) -> dict[str, str]:
    return {"topic_id": str(topic_id), "partition": str(partition),
            "of_partition": f'\n  AND b.topic_id = {topic_id} AND b."partition" = {partition}',
            "records_of_partition": f'\n  AND r.topic_id = {topic_id} AND r."partition" = {partition}',
            "topic": f"CAST('{topic}' AS varchar(249))", "records_joins": "", "batches_topic_join": "",
            "log_start": f'(SELECT p.log_start_offset FROM partitions p WHERE p.topic_id = {topic_id} AND p."partition" = {partition})'}


def test_the_migrated_view_is_the_catalogues(database) -> None:  # type: ignore[no-untyped-def]
    catalogue = load(f"committed_records.{database.engine.dialect.name}.sql")
    with database.engine.connect() as conn:
        migrated = _definition(conn, "committed_records")
        if conn.dialect.name == "postgresql":
            # CREATE OR REPLACE, so that a migration keeps the view's grants.
            created_again = render(catalogue, {"view": "catalogue_committed_records", **EVERY_PARTITION})
        else:
            created_again = catalogue.replace("CREATE VIEW committed_records AS", "CREATE VIEW catalogue_committed_records AS", 1)
        conn.exec_driver_sql(created_again)
        created = _definition(conn, "catalogue_committed_records")
        conn.rollback()
    assert migrated == created
    assert all(word in migrated for word in ("log_start_offset", "record_batches", "batch_position", "value_bytes"))


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
def test_a_log_partitions_view_is_the_catalogues_with_the_partition_written_in(database, client) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "a", 2)
    catalogue = load("committed_records.postgresql.sql")
    with database.engine.connect() as conn:
        a = conn.execute(text("SELECT topic_id FROM topics WHERE name = 'a'")).scalar_one()
        migrated = _definition(conn, partition_view(a, 1))
        conn.exec_driver_sql(render(catalogue, {"view": "catalogue_partition", **one_partition(a, 1, "a")}))
        created = _definition(conn, "catalogue_partition")
        every = _definition(conn, "committed_records")
        conn.rollback()
    assert migrated == created
    assert f"(r_1.topic_id = {a}) AND (r_1.partition = 1)" in migrated and f"(b.topic_id = {a}) AND (b.partition = 1)" in migrated
    # The self-committed records' part names the partition too (its own marker).
    assert f"(r.topic_id = {a}) AND (r.partition = 1)" in migrated, migrated
    # The topic's name is written in and the log start looked up once: a partition's view joins
    # no `topics`, and `partitions` only for its batch rows; the view of every partition joins both.
    assert "'a'::character varying(249) AS topic" in migrated, migrated
    assert "JOIN topics" not in migrated and migrated.count("JOIN partitions") == 1, migrated
    assert 'WHERE (r.self_committed AND (r."offset" >= ( SELECT p.log_start_offset' in migrated, migrated
    assert every.count("JOIN topics") == 2 and every.count("JOIN partitions") == 2, every


def test_the_old_jdbc_readers_columns_are_the_migrated_views_but_a_bytes_topics(database) -> None:  # type: ignore[no-untyped-def]
    from benchmarks.jdbc_reader import VIEW_COLUMNS

    with database.engine.connect() as conn:
        migrated = [c["name"] for c in inspect(conn).get_columns("committed_records")]
    assert [name for name, _ in VIEW_COLUMNS] == [c for c in migrated if c not in ("key_bytes", "value_bytes")]
    # Each column a migration added comes last (PostgreSQL's CREATE OR REPLACE VIEW may only append).
    assert migrated[-3:] == ["key_bytes", "value_bytes", "batch_position"]
