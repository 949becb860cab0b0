"""The log partitions' views a downgrade must drop itself (PostgreSQL): the shared mechanism,
never another migration's statements.

A deleted topic's partitions keep their views (committed_records.partition_<topic_id>_<partition>)
until the log cleaner purges the topic's leaves. A downgrade that puts an older view text back
makes the views of existing partitions only; those of a purge still pending would keep reading
a column the downgrade then drops, and the DROP COLUMN would fail on them. The purge drops its
views IF EXISTS, so nothing waits for them."""

from __future__ import annotations

from alembic import op


def drop_views_of_purged_partitions() -> None:
    """Drop every partition's view whose partition no longer exists. On the driver: through
    op.execute the statement's %s and %I would reach format() doubled."""
    op.get_bind().exec_driver_sql("""
        DO $$
        DECLARE v record;
        BEGIN
            FOR v IN SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                     WHERE n.nspname = 'committed_records' AND c.relkind = 'v'
                       AND NOT EXISTS (SELECT 1 FROM partitions p
                                       WHERE format('partition_%s_%s', p.topic_id, p."partition") = c.relname)
            LOOP
                EXECUTE format('DROP VIEW committed_records.%I', v.relname);
            END LOOP;
        END
        $$""")
