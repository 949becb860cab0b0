"""The `outbox` Spark data source: its registration, and the checked entry points.

    from spark_jobs.datasource import read_outbox, register, write_outbox
    register(spark)  # once per SparkSession: spark.read / readStream / write / writeStream .format("outbox")
    df = (spark.read.format("outbox")
          .option("url", "http://127.0.0.1:8000")
          .option("databaseUrl", "postgresql://spark_reader@127.0.0.1:5432/outbox")
          .option("topics", "orders")
          .load())
    df.where("partition = 1 AND commit_position >= 5000").show()

This module only wires: the reads are spark_jobs.reader (batch, stream), the writes
spark_jobs.writer (the exactly-once sink), what both share spark_jobs.common. read_outbox and
write_outbox run a read's or a write's checks on the driver first, so that a mistake is one
line rather than a traceback inside Spark's error.
"""

from __future__ import annotations

import functools
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from spark_jobs.common.options import PostgresDriver
from spark_jobs.common.service import list_topics
from spark_jobs.errors import OutboxSourceError
from spark_jobs.reader.batch import OutboxBatchReader, check_headers_type, schema_ddl
from spark_jobs.reader.checks import check_database, check_reachable, check_same_database
from spark_jobs.reader.options import SourceOptions, check_batch, parse_options
from spark_jobs.reader.jvm import choose_reader, driver_on_classpath, read_jvm, relation_declarable
from spark_jobs.reader.planning import Pruning, plan_ranges, plan_splits, snapshot, starting_committed
from spark_jobs.reader.stream import OutboxStreamReader
from spark_jobs.writer.columns import check_columns
from spark_jobs.writer.commit import check_service
from spark_jobs.writer.options import parse_sink_options
from spark_jobs.writer.writers import OutboxBatchWriter, OutboxStreamWriter

NAME = "outbox"


# --- Spark's class ------------------------------------------------------------------------------


class OutboxDataSource(DataSource):
    """The one data source `outbox`, both directions: Spark builds it from the options given and
    asks it for a reader (spark_jobs.reader) or a writer (spark_jobs.writer)."""

    @functools.cached_property
    def parsed(self) -> SourceOptions:
        # A read's options, checked at schema() (load(), before any job): an unknown option or
        # a malformed value stops the read with its one line. Not when Spark builds the source:
        # it builds it for a write too, whose options are the sink's (spark_jobs.writer.options).
        return parse_options(self.options)

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> str:
        # Also called at load(): the database and the service must answer now, not in a task.
        check_reachable(self.parsed)
        return schema_ddl(self.parsed)

    def reader(self, schema: StructType) -> DataSourceReader:
        check_batch(self.parsed)
        check_headers_type(self.parsed, schema)
        return OutboxBatchReader(self.parsed, schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        return OutboxBatchWriter(self.options, schema, overwrite)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:  # noqa: N802 - Spark's name
        return OutboxStreamWriter(self.options, schema, overwrite)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:  # noqa: N802 - Spark's name
        check_headers_type(self.parsed, schema)
        return OutboxStreamReader(self.parsed, schema)


# --- For the driver program ---------------------------------------------------------------------


def register(spark: Any) -> None:
    """Make spark.read.format("outbox") available in this SparkSession. Filter pushdown to
    Python data sources (spark.sql.python.filterPushdown.enabled) is left as it is: the reader
    takes no filters (spark_jobs.reader.batch.OutboxBatchReader says why). The Python workers
    that plan and read must have pyarrow and this package (workers_python)."""
    workers_python(spark.sparkContext)
    spark.dataSource.register(OutboxDataSource)


def workers_python(sc: Any) -> None:
    """Spark's Python workers run the interpreter the SparkContext took at its start:
    PYSPARK_PYTHON, else `python3` from PATH, which is rarely the one with pyarrow and this
    package when a script runs as `.venv/bin/python script.py`. PySpark hands a data source
    that interpreter when it is registered, so before it is: in local mode, with
    PYSPARK_PYTHON unset, the workers run the driver's own interpreter (which has imported
    this module); an interpreter named on purpose is checked, and one without what the reads
    need is one line saying what to set. A cluster's workers are not looked at: their
    PYSPARK_PYTHON is the cluster's to set (docs/SPARK.md)."""
    import os
    import subprocess
    import sys

    if sc.pythonExec == sys.executable or not sc.master.startswith("local"):
        return
    if not os.environ.get("PYSPARK_PYTHON"):
        sc.pythonExec = sys.executable
        return
    try:
        usable = subprocess.run([sc.pythonExec, "-c", "import pyarrow, spark_jobs"], capture_output=True,
                                timeout=60).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        usable = False
    if not usable:
        raise OutboxSourceError(
            f"Spark's Python workers run PYSPARK_PYTHON={sc.pythonExec}, which cannot import pyarrow and "
            f"spark_jobs: set PYSPARK_PYTHON={sys.executable} (an interpreter with the spark extra) before the "
            "SparkSession starts")


def read_outbox(spark: Any, *, reader: str = "auto", **options: str) -> Any:
    """A batch read of the outbox's committed records, with the options, the database, the
    service, the topics and the positions checked here first, so that a mistake is an
    OutboxSourceError (or DataLossError) of one line rather than a Python traceback inside
    Spark's AnalysisException.

    `reader` says who reads the rows (spark_jobs.reader.jvm.choose_reader):
    - "jvm": Spark's JDBC reader, one query per split the data source plans, planned here
      (spark_jobs.reader.jvm); needs the database's JDBC driver on the session's classpath;
    - "python": spark.read.format("outbox"), the Python data source; Spark plans the read
      again when the DataFrame runs, with the log bounds then; it takes no filters (Spark
      applies them after the read: spark_jobs.reader.batch says why);
    - "auto" (default): jvm when the driver is loaded (and this Spark's JDBC relation can
      declare the data source's schema) and no option only the Python data source acts on
      (driver, queryLog) is given, else python.
    Both give the DataFrame the same schema (spark_jobs.reader.batch.schema_ddl)."""
    parsed = parse_options(options)
    check_batch(parsed)
    if parsed.value_schema:
        from pyspark.sql.types import _parse_datatype_string

        try:
            _parse_datatype_string(f"struct<{parsed.value_schema}>")
        except Exception as e:  # noqa: BLE001 - Spark's parse errors have several classes
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise OutboxSourceError(f"option valueSchema: {parsed.value_schema!r} is not a schema: {first}") from None
    kind = parsed.database.kind
    jvm_possible = reader != "python"
    chosen = choose_reader(reader, options, driver_loaded=jvm_possible and driver_on_classpath(spark, kind),
                           database=kind, declarable=jvm_possible and relation_declarable(spark))
    # The JVM read's tasks do not use the Python driver: no ADBC needed for it.
    check_database(parsed.database, parsed.driver if chosen == "python" else PostgresDriver.PSYCOPG)
    listed = list_topics(parsed.url, parsed.api_key, OutboxSourceError)
    # One snapshot for the checks and a planning pass, as Spark will plan when the DataFrame
    # runs, for the errors that planning finds (a topic that does not exist, data loss): here
    # they are one line. The JVM read is planned here, once, on this snapshot.
    bounds = snapshot(parsed, None, listed=listed)
    check_same_database(parsed, bounds)
    committed = starting_committed(parsed, bounds)
    if chosen == "jvm":
        return read_jvm(spark, parsed, plan_splits(parsed, bounds, committed, Pruning()))
    plan_ranges(parsed, bounds, committed, Pruning())
    register(spark)
    # The schema given, Spark does not ask the source for it, so load() does not check again
    # what was checked here.
    return spark.read.format(NAME).schema(schema_ddl(parsed)).options(**options).load()


def write_outbox(df: Any, **options: str) -> None:
    """df.write.format("outbox").mode("append").options(**options).save(), with the options, the
    columns, the service and the topic checked here first, so that a mistake is an
    OutboxSinkError of one line rather than a Python traceback inside Spark's exception."""
    parsed = parse_sink_options(options, streaming=False)
    check_columns(df.schema, parsed)
    check_service(parsed)
    register(df.sparkSession)
    df.write.format(NAME).mode("append").options(**options).save()
