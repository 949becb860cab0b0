"""PROTOTYPE, benchmarks only: a json topic's headers stored beside their JSON text as two
`text[]` columns (names and values, in the object's order), so that Spark's JDBC reader gets
them as two arrays and makes the map with `map_from_arrays`, without a JSON parse per row.

Nothing of the service writes or reads these columns: `ensure` adds them to a scratch
database's `records` by hand (`prototype_header_keys`, `prototype_header_values`), fills them
from the JSON text, and creates `prototype_committed_records`, the view committed_records
(its SQL loaded from app/storage/sql/, `prototype_view_sql`) exposing them too;
`read_header_arrays` is the JVM read over that view with the headers made from the arrays.
benchmarks/spark_source.py's `jvm_header_arrays` variant measures it (docs/SPARK.md, "Headers as arrays, measured").

The UPDATE that fills the arrays writes a new version of every row with headers at the heap's
end; `ensure` then rewrites the table (VACUUM FULL, which keeps the rows' order and drops the
dead versions), so that every variant of a run reads one compact heap, the rows with headers
after the others as the fill's own UPDATE left them.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import create_engine, text
from sqlalchemy.pool import NullPool

from app.storage.sql import EVERY_PARTITION, load
from migrations.sql_files import render

KEYS = "prototype_header_keys"
VALUES = "prototype_header_values"
VIEW = "prototype_committed_records"

# json_each_text over the text as `json` (not jsonb) keeps the object's order; a json topic's
# object has distinct names and string values (app.domain.records and .kafka_records: the HTTP Send checks an
# object of strings, the Kafka door refuses a repeated name and a null value). An empty object
# is two empty arrays, no headers (NULL) two NULLs: from_json and map_from_arrays then agree
# (an empty map; null). A bytes topic's headers (a list, repeats and nulls allowed) are not
# read by the Spark reader and are left out.
FILL = f"""
UPDATE records SET ({KEYS}, {VALUES}) = (
    SELECT coalesce(array_agg(e.k ORDER BY e.n), '{{}}'), coalesce(array_agg(e.v ORDER BY e.n), '{{}}')
    FROM json_each_text(records.headers::json) WITH ORDINALITY AS e(k, v, n))
WHERE headers IS NOT NULL AND topic_id IN (SELECT topic_id FROM topics WHERE value_format = 'json')
"""


def prototype_view_sql() -> str:
    """CREATE OR REPLACE VIEW prototype_committed_records: the view committed_records as the
    database has it at head (app/storage/sql/committed_records.postgresql.sql, the text the
    newest migration's frozen copy is held equal to), loaded rather than copied, so that the
    prototype reads the same rows the view does, changed by two substitutions only."""
    sql = render(load("committed_records.postgresql.sql"), {"view": "committed_records", **EVERY_PARTITION})
    # 1. The view's name: the service's own view stays as it is.
    named = sql.replace("CREATE OR REPLACE VIEW committed_records AS", f"CREATE OR REPLACE VIEW {VIEW} AS")
    # 2. The two array columns beside `headers`, in each of the view's column lists: its
    #    self-committed part's, and its batch part's outer SELECT's and LATERAL subquery's, each
    #    reading them from `records`.
    widened = named.replace("r.headers,", f"r.headers, r.{KEYS}, r.{VALUES},")
    # A view whose text moved so that a substitution no longer matches would otherwise replace
    # the service's own view (1), or make a prototype without the arrays and read_header_arrays
    # fail far from the cause (2).
    if named == sql or sql.count("r.headers,") != 3:
        raise RuntimeError("app/storage/sql/committed_records.postgresql.sql changed: update the prototype's "
                           "substitutions in benchmarks/header_arrays_prototype.py")
    return widened


def ensure(url: str) -> bool:
    """Add the prototype's columns and view to the scratch database at `url` unless there;
    whether it did."""
    engine = create_engine(url, poolclass=NullPool)
    try:
        with engine.begin() as conn:
            if conn.execute(text("SELECT 1 FROM information_schema.columns WHERE table_name = 'records' "
                                 "AND column_name = :c"), {"c": KEYS}).first():
                return False
            conn.execute(text(f"ALTER TABLE records ADD COLUMN {KEYS} text[], ADD COLUMN {VALUES} text[]"))
            conn.execute(text(FILL))
            conn.exec_driver_sql(prototype_view_sql())
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.execute(text("VACUUM FULL ANALYZE records"))
        return True
    finally:
        engine.dispose()


def read_header_arrays(spark: Any, options: Any, splits: Any) -> Any:
    """spark_jobs.reader.jvm.read_jvm over the prototype's view, `headers` made by
    map_from_arrays from the two arrays instead of from_json of the text."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StructType, _parse_datatype_string

    from spark_jobs.reader.batch import schema_ddl
    from spark_jobs.reader.jvm import JdbcSource, STORED_AS, connection_properties, declared, predicates

    source = JdbcSource.of(options.database)
    # customSchema pins the columns it names; the arrays keep the driver's type, text[] being
    # ArrayType(StringType) from PostgreSQL's JDBC driver.
    stored = spark.read.jdbc(source.url, VIEW, predicates=predicates(splits, source.database),
                             properties=connection_properties(source))
    schema = _parse_datatype_string(schema_ddl(options))
    assert isinstance(schema, StructType)
    stored = declared(spark, stored, schema)
    return stored.select("topic", "partition", "offset", "commit_position",
                         F.timestamp_millis(STORED_AS["timestamp"]).alias("timestamp"), "key", "value",
                         F.map_from_arrays(KEYS, VALUES).alias("headers"))


def differing_headers(a: Any, b: Any) -> int:
    """Rows of `a` whose headers differ from `b`'s row of the same partition and offset (the
    JSON of the map, so the order of its entries counts), or which `b` lacks."""
    from pyspark.sql import functions as F

    left = a.select("partition", "offset", F.to_json("headers").alias("h"))
    right = b.select("partition", "offset", F.to_json("headers").alias("g"))
    joined = left.join(right, ["partition", "offset"], "left")
    return joined.where(~F.col("h").eqNullSafe(F.col("g"))).count()
