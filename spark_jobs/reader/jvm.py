"""The JVM read: the data source's plan, read by Spark's own JDBC reader, with no Python worker
between the database and Spark.

    from spark_jobs.datasource import read_outbox
    df = read_outbox(spark, url=…, databaseUrl=…, topics="orders")  # reader="auto": this path
                                                                     # when the JDBC driver is there

The driver plans exactly as the data source does (the same SourceOptions, snapshot and
plan_splits), and Spark's JDBC reader gets one predicate per planned split over its relation
(its partition's view on PostgreSQL, the view `committed_records` on SQLite): split_predicate
(spark_jobs.reader.statement), the text the Python tasks' statements carry too. Each predicate is one Spark task, one query on its own
connection; rows go from the JDBC driver into Spark's rows in the executor's JVM. Where the
Python data source hands Spark Arrow batches from a Python worker, every row crossing
database → Python → JVM, this read has one crossing fewer: docs/SPARK.md, "Read throughput".

The DataFrame's schema is the data source's (schema_ddl): the same names, types, order and
nullability, no metadata. The timestamp is made from the stored milliseconds in Spark,
`headers` (headersFormat=map; with json the stored text as it is) and a valueSchema's struct
are parsed from the stored JSON by from_json (the headers by a Java UDF where the session has
it, spark_jobs.headers_jar, from_json's map all the same), its results
made the data source's (parsed_value); the columns the data source declares NOT NULL are
declared so on the JDBC relation itself (declared), where Spark's JDBC reader makes every
column nullable.

What differs, by construction (docs/SPARK.md, "The JVM read"):
- the plan is made once, when the DataFrame is made: each action reads the same positions,
  where the Python data source plans again per action;
- filters applied afterwards reach every split's query through Spark's JDBC filter pushdown
  (the database returns nothing for a split the filter excludes) rather than removing splits;
- a split's rows come in the database's order, not sorted by commit position (a batch
  DataFrame has no order; the streaming reader, which needs one, stays on the Python path:
  docs/SPARK.md, "A micro-batch's read: why it stays in Python");
- with valueSchema, from_json's conversions: a JSON number read into a STRING field is its
  text, and a number with more decimals than a DECIMAL field's scale is rounded, where the
  data source makes either value a struct of nulls.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode

from app.reader_relations import VIEW
from spark_jobs.common.options import HeadersFormat
from spark_jobs.errors import OutboxSourceError, SparkJobError
from spark_jobs.headers_jar import FUNCTION as HEADERS_FUNCTION
from spark_jobs.headers_jar import register_headers_udf
from spark_jobs.jars import DRIVERS
from spark_jobs.reader.batch import schema_ddl
from spark_jobs.reader.options import Database, SourceOptions
from spark_jobs.reader.planning import Split
from spark_jobs.reader.statement import LAST_TIMESTAMP_MS, TIMESTAMP_PAST_READERS, split_predicate

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

# The JDBC driver's connection parameters that hold a secret: taken out of a URL's query into the
# connection properties, since Spark shows the URL in its plans and UI.
SECRET_PARAMETERS = ("password", "sslpassword")


@dataclass(frozen=True, slots=True)
class JdbcSource:
    """A database as Spark's JDBC reader takes it: the JDBC URL, and user and password as
    connection properties, never in the URL (which Spark shows in its plans and UI)."""

    database: str  # "postgresql" or "sqlite"
    url: str
    user: str | None = None
    password: str | None = field(default=None, repr=False)
    secrets: tuple[tuple[str, str], ...] = field(default=(), repr=False)  # SECRET_PARAMETERS but password

    @property
    def driver_class(self) -> str:
        return DRIVERS[self.database].driver_class

    def properties(self, *, fetchsize: int = DEFAULT_FETCHSIZE) -> dict[str, str]:
        props = {"driver": self.driver_class, "fetchsize": str(fetchsize)}
        if self.user is not None:
            props["user"] = self.user
        if self.password is not None:
            props["password"] = self.password
        props.update(self.secrets)
        return props

    @classmethod
    def _postgresql(cls, base: str, query: Sequence[tuple[str, str]], user: str | None,
                    password: str | None) -> JdbcSource:
        """A PostgreSQL source at `base` with the URL parameters `query`, the secret ones moved
        to the connection properties; `password` given wins over the query's."""
        kept = [(k, v) for k, v in query if k not in SECRET_PARAMETERS]
        secret = {k: v for k, v in query if k in SECRET_PARAMETERS}
        if password is None:
            password = secret.get("password")
        url = f"{base}?{urlencode(kept)}" if kept else base
        secrets = tuple((k, v) for k, v in secret.items() if k != "password")
        return cls("postgresql", url, user, password, secrets)

    @classmethod
    def of(cls, database: Database, *, user: str | None = None, password: str | None = None) -> JdbcSource:
        """The data source's database (option databaseUrl, checked) for JDBC; `user` and
        `password`, given, instead of the URL's."""
        from sqlalchemy.engine import make_url

        if database.kind == "sqlite":
            # Relative paths are relative to the current directory, as for the service; the
            # executors of a local[*] master share it, a cluster's do not (see docs/SPARK.md).
            return cls("sqlite", f"jdbc:sqlite:{database.target}")
        u = make_url(database.target)
        host = u.host or "localhost"
        if ":" in host:  # IPv6 literal
            host = f"[{host}]"
        query = [(k, v) for k, v in u.query.items() if isinstance(v, str)]
        return cls._postgresql(f"jdbc:postgresql://{host}:{u.port or 5432}/{quote(u.database or '')}", query,
                               user if user is not None else u.username,
                               password if password is not None else u.password)

    @classmethod
    def from_url(cls, url: str, *, user: str | None = None, password: str | None = None) -> JdbcSource:
        """From a service database URL (SQLAlchemy or libpq syntax), taken and refused as the
        data source's option databaseUrl (Database.from_url), or a JDBC URL."""
        if url.startswith("jdbc:postgresql:"):
            base, _, query = url.partition("?")
            return cls._postgresql(base, parse_qsl(query, keep_blank_values=True), user, password)
        if url.startswith("jdbc:sqlite:"):
            return cls("sqlite", url)
        if url.startswith("jdbc:"):
            # Its subprotocol only: the rest may hold a password, in a syntax of its driver's own.
            raise SparkJobError(f"unsupported JDBC URL (jdbc:{url.split(':')[1]}:…): use jdbc:postgresql: or jdbc:sqlite:")
        return cls.of(Database.from_url(url), user=user, password=password)


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


def choose_reader(requested: str, given: Collection[str], *, driver_loaded: bool, database: str,
                  declarable: bool = True) -> str:
    """"jvm" or "python", for reader=`requested` with the options `given` (their names, any
    case). auto: the JVM read when the database's JDBC driver is loaded, this Spark's JDBC
    relation can declare the data source's schema (`declarable`, relation_declarable) and no
    option only the Python data source acts on is given; it reads faster (docs/SPARK.md, "Read
    throughput"). jvm: that, or an OutboxSourceError of one line naming what is missing."""
    if requested not in READERS:
        raise OutboxSourceError(f"reader: expected {', '.join(READERS)}, not {requested!r}")
    if requested == "python":
        return "python"
    lowered = {name.lower() for name in given}
    python_only = [name for name in PYTHON_ONLY_OPTIONS if name.lower() in lowered]
    if requested == "auto":
        return "jvm" if driver_loaded and declarable and not python_only else "python"
    if python_only:
        raise OutboxSourceError(f"option {python_only[0]} is the Python data source's: reader=jvm reads through "
                                "Spark's JDBC reader; leave the option out, or read with reader=python")
    if not driver_loaded:
        raise OutboxSourceError(
            f"reader=jvm needs the {database} JDBC driver ({DRIVERS[database].driver_class}) on the session's "
            f"classpath: start the session with spark_jobs.session.build_session(databases=[\"{database}\"]) "
            "or spark-submit --jars, or read with reader=auto")
    if not declarable:
        raise OutboxSourceError("reader=jvm cannot declare the data source's schema on this Spark: its JDBC relation "
                                f"({JDBC_RELATION}) is not the case class the JVM read copies; read with reader=auto "
                                "or reader=python")
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


def read_jvm(spark: Any, options: SourceOptions, splits: Sequence[Split], *, relation: str | None = None) -> Any:
    """The DataFrame of `splits`, read by Spark's JDBC reader, with the data source's schema.
    Each split reads its own relation (Split.relation: its partition's view, where the
    database has them), unless a benchmark names a copy of the view as `relation`
    (benchmarks/spark_source.py)."""
    from functools import reduce

    from pyspark.sql.types import StructType, _parse_datatype_string

    schema = _parse_datatype_string(schema_ddl(options))
    assert isinstance(schema, StructType)
    # Not DataFrame.to(schema): beside refusing NOT NULL, it rebuilds every map row by row
    # (map_from_arrays over transform) even when the types are equal: 1.44 s against 1.29 s
    # without it for 0.5 M rows, in a one-off measurement of a first form that ended with it
    # (docs/SPARK.md, "The JVM read measured"; the benchmark no longer has that form).
    # record_columns over the declared relations gives the schema as it is
    # (tests/spark/test_jvm_reader.py).
    frames = [declared(spark, stored, schema) for stored in stored_frames(spark, options, splits, relation=relation)]
    headers_udf = (options.include_headers and options.headers_format is HeadersFormat.MAP
                   and register_headers_udf(spark))
    return record_columns(reduce(lambda a, b: a.union(b), frames), options, headers_udf=headers_udf)


def stored_rows(spark: Any, options: SourceOptions, splits: Sequence[Split], *, relation: str | None = None) -> Any:
    """The rows of `splits` as stored (STORED_TYPES), one JDBC query per split (stored_frames,
    unioned)."""
    from functools import reduce

    return reduce(lambda a, b: a.union(b), stored_frames(spark, options, splits, relation=relation))


def stored_frames(spark: Any, options: SourceOptions, splits: Sequence[Split], *,
                  relation: str | None = None) -> list[Any]:
    """The rows of `splits`, as stored (STORED_TYPES): a JDBC relation per relation the splits
    read (each partition's view, or the view of every partition), one query per split. Spark's
    JDBC reader reads one relation with a predicate per task, so a read of several partitions'
    views is the union of a relation each."""
    source = JdbcSource.of(options.database)
    by_relation: dict[str, list[Split]] = {}
    for s in splits:
        by_relation.setdefault(relation or s.relation, []).append(s)
    return [spark.read.jdbc(source.url, name, predicates=predicates(chosen, source.database),
                            properties=connection_properties(source))
            for name, chosen in (sorted(by_relation.items()) or [(relation or VIEW, [])])]


def record_columns(stored: Any, options: SourceOptions, *, headers_udf: bool = False) -> Any:
    """The data source's columns made from the stored ones: the timestamp from its
    milliseconds, the value (with valueSchema) and the headers (headersFormat=map) parsed from
    their JSON (parsed_headers; headers_udf: the session has the headers' UDF); with
    headersFormat=json the headers are the stored text as it is."""
    from pyspark.sql import functions as F

    columns: list[Any] = ["topic", "partition", "offset", "commit_position", timestamp_column().alias("timestamp"), "key"]
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
        columns.append(parsed_headers("headers", udf=headers_udf) if options.headers_format is HeadersFormat.MAP
                       else "headers")
    return stored.select(*columns)


def timestamp_column() -> Any:
    """The data source's `timestamp` from the stored milliseconds, or, for a record stored past
    LAST_TIMESTAMP_MS (before the service refused it), the data source's line naming it
    (raise_error: Spark's USER_RAISED_EXCEPTION), where timestamp_millis failed with
    DATETIME_OVERFLOW naming no record. The check is coalesce's first argument, null for every
    other record: the column stays NOT NULL, as the stored one is declared."""
    from pyspark.sql import functions as F

    ms = F.col(STORED_AS["timestamp"])
    past = F.when(ms > F.lit(LAST_TIMESTAMP_MS), F.raise_error(F.format_string(
        TIMESTAMP_PAST_READERS, F.col("offset"), F.col("topic"), F.col("partition"), ms)).cast("bigint"))
    return F.timestamp_millis(F.coalesce(past, ms))


def parsed_headers(stored: str, *, udf: bool = False) -> Any:
    """The data source's `headers` (a map) from the stored column `stored` (a JSON object's
    text): from_json's map. udf (the session has spark_jobs.headers_jar's UDF, registered): the
    UDF makes it where the text has the shape the service stores, from_json for any other
    text, for which the UDF gives null (coalesce evaluates from_json only then): the same map
    in every case, at about half from_json's cost (docs/SPARK.md, "The headers' parser")."""
    from pyspark.sql import functions as F

    parsed = F.from_json(stored, "map<string,string>")
    if udf:
        parsed = F.coalesce(F.call_function(HEADERS_FUNCTION, F.col(stored)), parsed)
    return parsed.alias("headers")


# A data source column and the stored column it is made from, where their names differ.
STORED_AS = {"timestamp": "timestamp_ms"}


def declared(spark: Any, stored: Any, schema: Any) -> Any:
    """`stored` (stored_rows) with its JDBC relation declaring NOT NULL the stored columns whose
    data source columns `schema` declares so (the view's topic, partition, offset,
    commit_position and timestamp_ms are never null), and no column metadata (Spark's JDBC
    reader gives each column its own: jdbcClientType, isSigned, scale, …; the data source's
    columns have none).

    Spark offers no public way: its JDBC reader declares every column nullable and refuses a
    schema given with .schema() that differs from it (USER_SPECIFIED_AND_ACTUAL_SCHEMA_MISMATCH),
    customSchema sets types only, DataFrame.to refuses to make a column NOT NULL
    (NULLABLE_COLUMN_OR_FIELD), an expression such as coalesce would stop filters on the column
    from reaching the queries, and createDataFrame over the rows would read them through an
    RDD, with neither pushdown nor column pruning. So the relation Spark made is copied with
    the declared schema (its case class's copy, the other fields as they are) and read as a
    DataFrame of its own (SparkSession.baseRelationToDataFrame): the same queries, pushdown
    and pruning. relation_declarable checks that this Spark's relation has that shape."""
    from pyspark.sql import DataFrame
    from pyspark.sql.types import StructField, StructType

    never_null = {STORED_AS.get(f.name, f.name) for f in schema.fields if not f.nullable}
    fields = [StructField(f.name, f.dataType, f.name not in never_null) for f in stored.schema.fields]
    relation = stored._jdf.queryExecution().analyzed().relation()
    jsession = spark._jsparkSession
    kept = [getattr(relation, f"copy$default${k}")() for k in range(2, _copy_defaults(relation.getClass()) + 1)]
    copied = relation.copy(jsession.parseDataType(StructType(fields).json()), *kept, relation.sparkSession())
    return DataFrame(jsession.baseRelationToDataFrame(copied), spark)


JDBC_RELATION = "org.apache.spark.sql.execution.datasources.jdbc.JDBCRelation"


def _copy_defaults(relation_class: Any) -> int:
    """How many fields the relation's case class has in its first parameter list."""
    return sum(1 for m in relation_class.getMethods() if m.getName().startswith("copy$default$"))


def relation_declarable(spark: Any) -> bool:
    """This Spark's JDBC relation is a case class whose copy takes the schema first, then its
    other fields, then the session (what `declared` calls). A Spark whose relation is made
    otherwise is read by the Python data source (auto), or refused (reader=jvm)."""
    try:
        relation_class = spark.sparkContext._jvm.java.lang.Class.forName(JDBC_RELATION)
        copies = [m for m in relation_class.getMethods() if m.getName() == "copy"]
        if len(copies) != 1:
            return False
        types = [t.getName() for t in copies[0].getParameterTypes()]
        return (len(types) == _copy_defaults(relation_class) + 1 and types[0] == "org.apache.spark.sql.types.StructType"
                and types[-1].endswith(".SparkSession"))
    except Exception:  # noqa: BLE001 - Py4J and Spark Connect raise several classes
        return False


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
