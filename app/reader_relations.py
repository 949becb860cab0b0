"""The relations a reader of the database reads committed records from: the view of every log
partition, and on PostgreSQL (since migration 0035) each log partition's own view.

The one definition of their names, for the service (app.storage: the purge drops a deleted
topic's views, `outbox grant-reader` grants them) and for the Spark readers (spark_jobs.reader:
each split reads its partition's view). The SQL that makes the views spells the same names in
its frozen copies (app/storage/sql/record_leaves.postgresql.sql, outbox.create_partition_view),
and tests/integration/test_record_leaves.py reads the views it makes by these names. It imports
nothing: the Spark jobs may import it (pyproject.toml, contract spark-through-client).
"""

from __future__ import annotations

# The view of every log partition, and on PostgreSQL the schema of each partition's view.
VIEW = "committed_records"
PARTITION_VIEWS_SCHEMA = "committed_records"


def partition_view(topic_id: int, partition: int) -> str:
    """One log partition's view on PostgreSQL, schema-qualified:
    committed_records.partition_<topic_id>_<partition>. The text of the view of every partition
    with the partition written in, so that its plan holds that partition's leaf of `records`
    alone, where the view of every partition holds and locks every leaf
    (docs/DESIGN-partitioned-records.md, "A view of each log partition")."""
    return f"{PARTITION_VIEWS_SCHEMA}.partition_{int(topic_id)}_{int(partition)}"
