"""The `outbox` data source's batch reader: spark.read.format("outbox").

    from spark_jobs.datasource import register
    register(spark)  # once per SparkSession
    df = (spark.read.format("outbox")
          .option("url", "http://127.0.0.1:8000")
          .option("databaseUrl", "postgresql://spark_reader@127.0.0.1:5432/outbox")
          .option("topics", "orders")
          .load())
    df.where("partition = 1 AND commit_position >= 5000").show()

Columns: topic, partition, offset, commit_position, timestamp, key, value (the stored JSON
text, or a struct with the option valueSchema), headers (map<string,string>, or with
headersFormat=json the stored JSON text; left out with includeHeaders=false). Options:
spark_jobs.common.options, and docs/SPARK.md.

Spark's planner asks the reader for its partitions: one snapshot of the log bounds, the plan
(spark_jobs.reader.planning), one task per split. The reader takes no filters: Spark applies
them after the read (the JVM read, spark_jobs.reader.jvm, puts them into its queries).
Each task reads its split from the view committed_records with the database's own Python
driver (spark_jobs.reader.split) and hands Spark Arrow record batches.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from pyspark.sql.datasource import DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from spark_jobs.common.options import HeadersFormat
from spark_jobs.errors import OutboxSourceError
from spark_jobs.reader.options import SourceOptions
from spark_jobs.reader.planning import Pruning, Split, plan_splits, snapshot, starting_committed
from spark_jobs.reader.split import read_split

RECORD_COLUMNS = (
    "topic STRING NOT NULL, `partition` INT NOT NULL, `offset` BIGINT NOT NULL, commit_position BIGINT NOT NULL, "
    "`timestamp` TIMESTAMP NOT NULL, key STRING"
)


# The headers column's type in each form (option headersFormat).
HEADERS_TYPES = {HeadersFormat.MAP: "MAP<STRING, STRING>", HeadersFormat.JSON: "STRING"}


def check_headers_type(options: SourceOptions, schema: StructType) -> None:
    """A schema given with .schema() whose headers type is not the one headersFormat makes would
    fail in every task, as a long Arrow error at collect(): refused here in one line instead."""
    if not options.include_headers or "headers" not in schema.names:
        return
    given = schema["headers"].dataType.simpleString()
    made = HEADERS_TYPES[options.headers_format].lower().replace(" ", "")
    if given != made:
        raise OutboxSourceError(f"the schema given has headers {given}; headersFormat="
                                f"{options.headers_format.value} makes them {made}")


def schema_ddl(options: SourceOptions) -> str:
    value = f"STRUCT<{options.value_schema}>" if options.value_schema else "STRING"
    headers = f", headers {HEADERS_TYPES[options.headers_format]}" if options.include_headers else ""
    return f"{RECORD_COLUMNS}, value {value}{headers}"


# --- Spark's classes --------------------------------------------------------------------------


class OutboxPartition(InputPartition):
    """One Spark task: a Split (picklable, sent to an executor)."""

    def __init__(self, split: Split | None) -> None:
        super().__init__(split)
        self.split = split


class OutboxBatchReader(DataSourceReader):
    """No pushFilters, on purpose. PySpark (4.3) keeps the reader that took one query's filters
    on the data source it read, and a later query of the same DataFrame reads with it: after
    df.where("partition = 1").count(), df.count() read partition 1 only, with no error
    (tests/spark/test_datasource.py). So the reader takes none, and reads what the options name;
    prune (spark_jobs.reader.planning) is kept, tested, for a PySpark that scopes pushed filters
    to their query."""

    def __init__(self, options: SourceOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema

    def partitions(self) -> Sequence[InputPartition]:
        bounds = snapshot(self.options, None)
        splits = plan_splits(self.options, bounds, starting_committed(self.options, bounds), Pruning())
        # Spark wants at least one partition: an empty read is one task that reads nothing.
        return [OutboxPartition(s) for s in splits] or [OutboxPartition(None)]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return read_partition(self.options, self.schema, partition)


def read_partition(options: SourceOptions, schema: StructType, partition: InputPartition) -> Iterator[Any]:
    """A task's records (batch or streaming), as Arrow record batches of `schema`."""
    from pyspark.sql.pandas.types import to_arrow_schema

    split = partition.split  # type: ignore[attr-defined]
    if split is None:
        return iter(())
    arrow_schema = to_arrow_schema(schema, timezone="UTC")
    value_type = arrow_schema.field("value").type
    return read_split(options.database.kind, options.database.target, split, arrow_schema,
                      value_type=value_type if options.value_schema else None,
                      headers_parsed=options.headers_format is HeadersFormat.MAP,
                      query_log=options.query_log, driver=options.driver)


