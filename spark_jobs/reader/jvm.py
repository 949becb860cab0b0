"""The JVM read: the data source's plan, read by Spark's own JDBC reader, with no Python worker
between the database and Spark.

    from spark_jobs.datasource import read_outbox
    df = read_outbox(spark, url=…, databaseUrl=…, topics="orders")  # reader="auto": this path
                                                                     # when the JDBC driver is there

The driver plans exactly as the data source does (the same SourceOptions, snapshot and
plan_splits), and Spark's JDBC reader gets one predicate per planned split over the view
`committed_records`: split_predicate (spark_jobs.reader.statement), the text the Python
tasks' statements carry too. Each predicate is one Spark task, one query on its own
connection; rows go from the JDBC driver into Spark's rows in the executor's JVM. Where the
Python data source hands Spark Arrow batches from a Python worker, every row crossing
database → Python → JVM, this read has one crossing fewer: docs/SPARK.md, "Read throughput".

The columns are the data source's, same names and types (schema_ddl): the timestamp is made
from the stored milliseconds in Spark, `headers` and a valueSchema's struct are parsed from
the stored JSON by from_json, its results made the data source's (parsed_value).

What differs, by construction (docs/SPARK.md, "The JVM read"):
- every column is nullable in the DataFrame's schema: Spark's JDBC reader declares them so
  (topic, partition, offset, commit_position and timestamp are never null all the same);
- the plan is made once, when the DataFrame is made: each action reads the same positions,
  where the Python data source plans again per action;
- filters applied afterwards reach every split's query through Spark's JDBC filter pushdown
  (the database returns nothing for a split the filter excludes) rather than removing splits;
- a split's rows come in the database's order, not sorted by commit position (a batch
  DataFrame has no order; the streaming reader, which needs one, stays on the Python path);
- with valueSchema, from_json's conversions: a JSON number read into a STRING field is its
  text, and a number with more decimals than a DECIMAL field's scale is rounded, where the
  data source makes either value a struct of nulls.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

from spark_jobs.errors import OutboxSourceError, SparkJobError
from spark_jobs.jars import DRIVERS
from spark_jobs.reader.options import Database, SourceOptions
from spark_jobs.reader.planning import Split
from spark_jobs.reader.statement import split_predicate

READERS = ("auto", "jvm", "python")
# Options only the Python data source's tasks act on: given, `auto` reads with it, and `jvm`
# refuses them (every setting acts, or is an error).
PYTHON_ONLY_OPTIONS = ("driver", "queryLog")

# pgjdbc buffers a whole result set unless autocommit is off and a fetch size is set; Spark's
# PostgreSQL dialect turns autocommit off when fetchsize > 0. So every read sets one.
DEFAULT_FETCHSIZE = 10_000

# The stored columns read, and their Spark types: Spark has no SQLite dialect and SQLite reports
# no types for a view's expressions, so they are pinned (on PostgreSQL too: one schema).
STORED_TYPES = ("`topic` STRING, `partition` INT, `offset` BIGINT, `commit_position` BIGINT, "
                "`timestamp_ms` BIGINT, `key` STRING, `value` STRING, `headers` STRING")
VIEW = "committed_records"


@dataclass(frozen=True, slots=True)
class JdbcSource:
    """A database as Spark's JDBC reader takes it: the JDBC URL, and user and password as
    connection properties, never in the URL (which Spark shows in its plans and UI)."""

    database: str  # "postgresql" or "sqlite"
    url: str
    user: str | None = None
    password: str | None = field(default=None, repr=False)

    @property
    def driver_class(self) -> str:
        return DRIVERS[self.database].driver_class

    def properties(self, *, fetchsize: int = DEFAULT_FETCHSIZE) -> dict[str, str]:
        props = {"driver": self.driver_class, "fetchsize": str(fetchsize)}
        if self.user is not None:
            props["user"] = self.user
        if self.password is not None:
            props["password"] = self.password
        return props

    @classmethod
    def of(cls, database: Database) -> JdbcSource:
        """The data source's database (option databaseUrl, checked) for JDBC."""
        if database.kind == "sqlite":
            return cls("sqlite", f"jdbc:sqlite:{database.target}")
        return cls.from_url(database.target)

    @classmethod
    def from_url(cls, url: str, *, user: str | None = None, password: str | None = None) -> JdbcSource:
        """From a service database URL (SQLAlchemy or libpq syntax) or a JDBC URL."""
        from sqlalchemy.engine import make_url

        if url.startswith("jdbc:postgresql:"):
            return cls("postgresql", url, user, password)
        if url.startswith("jdbc:sqlite:"):
            return cls("sqlite", url)
        if url.startswith("jdbc:"):
            raise SparkJobError(f"unsupported JDBC URL {url!r}: use jdbc:postgresql: or jdbc:sqlite:")
        u = make_url(url)
        backend = u.get_backend_name()
        if backend == "sqlite":
            if not u.database or u.database == ":memory:":
                raise SparkJobError(f"{url!r} is an in-memory SQLite database; Spark needs a file")
            # Relative paths are relative to the current directory, as for the service; the
            # executors of a local[*] master share it, a cluster's do not (see docs/SPARK.md).
            return cls("sqlite", f"jdbc:sqlite:{Path(u.database).resolve()}")
        if backend == "postgresql":
            host = u.host or "localhost"
            if ":" in host:  # IPv6 literal
                host = f"[{host}]"
            query = urlencode({k: v for k, v in u.query.items() if isinstance(v, str)})
            jdbc = f"jdbc:postgresql://{host}:{u.port or 5432}/{quote(u.database or '')}"
            if query:
                jdbc += f"?{query}"
            return cls("postgresql", jdbc, user if user is not None else u.username,
                       password if password is not None else u.password)
        raise SparkJobError(f"unsupported database URL {url!r}: use sqlite:///… or postgresql://…")


# --- Which reader --------------------------------------------------------------------------------


def driver_on_classpath(spark: Any, database: str) -> bool:
    """The database's JDBC driver class can be loaded by the session's driver JVM (spark.jars:
    build_session puts it there; spark-submit --jars). A session without a JVM of its own
    (Spark Connect) has none."""
    try:
        jvm = spark.sparkContext._jvm
    except Exception:  # noqa: BLE001 - Spark Connect's sessions refuse sparkContext (several classes)
        return False
    if jvm is None:
        return False
    return bool(jvm.org.apache.spark.util.Utils.classIsLoadable(DRIVERS[database].driver_class))


def choose_reader(requested: str, given: Collection[str], *, driver_loaded: bool, database: str) -> str:
    """"jvm" or "python", for reader=`requested` with the options `given` (their names, any
    case). auto: the JVM read when the database's JDBC driver is loaded and no option only the
    Python data source acts on is given; it reads faster (docs/SPARK.md, "Read throughput").
    jvm: that, or an OutboxSourceError of one line naming what is missing."""
    if requested not in READERS:
        raise OutboxSourceError(f"reader: expected {', '.join(READERS)}, not {requested!r}")
    if requested == "python":
        return "python"
    lowered = {name.lower() for name in given}
    python_only = [name for name in PYTHON_ONLY_OPTIONS if name.lower() in lowered]
    if requested == "auto":
        return "jvm" if driver_loaded and not python_only else "python"
    if python_only:
        raise OutboxSourceError(f"option {python_only[0]} is the Python data source's: reader=jvm reads through "
                                "Spark's JDBC reader; leave the option out, or read with reader=python")
    if not driver_loaded:
        raise OutboxSourceError(
            f"reader=jvm needs the {database} JDBC driver ({DRIVERS[database].driver_class}) on the session's "
            f"classpath: start the session with spark_jobs.session.build_session(databases=[\"{database}\"]) "
            "or spark-submit --jars, or read with reader=auto")
    return "jvm"


# --- The read ------------------------------------------------------------------------------------


def predicates(splits: Sequence[Split], database: str) -> list[str]:
    """One WHERE condition per split; an empty read is one task that reads nothing, as the
    data source's."""
    return [split_predicate(s, database) for s in splits] or ["1 = 0"]


def connection_properties(source: JdbcSource) -> dict[str, str]:
    props = {**source.properties(), "customSchema": STORED_TYPES}
    if source.database == "postgresql":
        # No JIT compilation: index range scans and nested loops gain nothing from it, as for
        # the Python tasks. (split_predicate's literals read the same whatever the connection's
        # standard_conforming_strings, which a URL's own options may set.)
        props["options"] = "-c jit=off"
    else:
        props["open_mode"] = "1"  # SQLITE_OPEN_READONLY, as the Python tasks open it
    return props


def read_jvm(spark: Any, options: SourceOptions, splits: Sequence[Split]) -> Any:
    """The DataFrame of `splits`, read by Spark's JDBC reader, in the data source's columns."""
    from pyspark.sql import functions as F

    source = JdbcSource.of(options.database)
    stored = spark.read.jdbc(source.url, VIEW, predicates=predicates(splits, source.database),
                             properties=connection_properties(source))
    columns: list[Any] = ["topic", "partition", "offset", "commit_position",
                          F.timestamp_millis("timestamp_ms").alias("timestamp"), "key"]
    if options.value_schema:
        # In a projection of its own: the JSON is parsed once, then its fields are read twice
        # (Spark does not merge a projection into the next when that would repeat from_json).
        stored = stored.select(*stored.columns, F.from_json(
            "value", f"{options.value_schema}, `{UNPARSED}` STRING",
            {"columnNameOfCorruptRecord": UNPARSED}).alias(PARSED))
        columns.append(parsed_value(options.value_schema).alias("value"))
    else:
        columns.append("value")
    if options.include_headers:
        columns.append(F.from_json("headers", "map<string,string>").alias("headers"))
    return stored.select(*columns)


# from_json's field for a value that did not parse into the schema, whole
UNPARSED = "__outbox_unparsed"
PARSED = "__outbox_parsed"


def parsed_value(value_schema: str) -> Any:
    """The data source's value struct (spark_jobs.reader.split.parse_values) from from_json's
    result: a field the object lacks is null; a value that is not an object of the schema (not
    an object, or a field of another type) a struct of nulls, where from_json would keep the
    fields that did parse (Spark 4's partial results); a null value or JSON null a null struct.
    from_json marks what did not parse in its corrupt-record field, UNPARSED."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StructType, _parse_datatype_string

    struct = _parse_datatype_string(f"struct<{value_schema}>")
    assert isinstance(struct, StructType)
    if UNPARSED in struct.fieldNames():
        raise OutboxSourceError(f"option valueSchema: the field name {UNPARSED} is the reader's own")
    parsed = F.col(PARSED)
    nulls = F.struct(*[F.lit(None).cast(f.dataType).alias(f.name) for f in struct.fields])
    whole = F.struct(*[parsed[f.name].alias(f.name) for f in struct.fields])
    return (F.when(F.col("value").isNull() | (F.trim(F.col("value")) == "null"), F.lit(None).cast(struct))
            .when(parsed[UNPARSED].isNotNull(), nulls)
            .otherwise(whole))
