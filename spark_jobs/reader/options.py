"""A read's options (spark.read / spark.readStream .format("outbox")), checked before Spark runs anything.

    spark.read.format("outbox")
        .option("url", "http://127.0.0.1:8000")          # the service: topics, log bounds, groups
        .option("databaseUrl", "postgresql://…/outbox")  # its database: the records
        .option("topics", "orders,refunds")              # or topicPattern
        .option("startingPositions", "earliest")         # latest, group, or JSON per partition
        .option("endingPositions", "latest")             # or JSON per partition
        .load()

Every option is read here, once, into `SourceOptions` (the table of options is
spark_jobs.common.options); an unknown option or a malformed value is an OutboxSourceError of
one line naming it. The checks that need the outside world (the database answers and is
migrated, the service answers, the database is the service's own) are
spark_jobs.reader.checks.
"""

from __future__ import annotations

import enum
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from app.database_url import DRIVERS, redacted_url, sqlite_in_memory, unencoded_at
from spark_jobs.common.options import (
    HeadersFormat,
    PostgresDriver,
    bool_option,
    choices,
    given_options,
    known_options,
    positive_option,
    service_url,
)
from spark_jobs.common.positions import EARLIEST, LATEST, TopicPartition, positions_from_json
from spark_jobs.errors import OutboxSourceError

Choice = TypeVar("Choice", bound=enum.Enum)

DEFAULT_POSITIONS_PER_SPLIT = 250_000


@dataclass(frozen=True, slots=True)
class Database:
    """Where the records are read: the service's database, for the Python driver of its kind."""

    kind: str  # "postgresql" or "sqlite"
    target: str = field(repr=False)  # a libpq connection URI, or the SQLite file's path

    @property
    def display(self) -> str:
        """The target as messages show it: never with a password."""
        return self.target if self.kind == "sqlite" else redacted_url(self.target)

    @classmethod
    def from_url(cls, url: str) -> Database:
        """The database of a URL the service takes (OUTBOX_DATABASE_URL), refused as the
        service refuses it; no message shows a password the URL holds."""
        from sqlalchemy.engine import make_url
        from sqlalchemy.exc import ArgumentError

        try:
            u = make_url(url)
        except ArgumentError:
            # Not repeated: what could not be parsed may hold a password anywhere.
            raise OutboxSourceError("option databaseUrl is not a database URL "
                                    "(sqlite:///path/outbox.db or postgresql://user@host:5432/outbox)") from None
        driver = DRIVERS.get(u.drivername)
        if driver is None:
            raise OutboxSourceError(f"option databaseUrl: unsupported database URL {redacted_url(url)!r}: the service "
                                    "takes sqlite:///… or postgresql[+psycopg]://… only")
        kind = u.set(drivername=driver).get_backend_name()
        if kind == "sqlite":
            if sqlite_in_memory(u):
                raise OutboxSourceError(f"option databaseUrl: {redacted_url(url)!r} is an in-memory SQLite database; "
                                        "the service's database file is needed")
            return cls("sqlite", str(Path(u.database or "").resolve()))
        if unencoded_at(url):
            raise OutboxSourceError(f"option databaseUrl: {redacted_url(url)!r}: the user, password or database "
                                    "holds an '@' as it is: write it %40")
        # libpq takes the URI with the driver name dropped (postgresql+psycopg:// → postgresql://).
        return cls("postgresql", u.set(drivername="postgresql").render_as_string(hide_password=False))


@dataclass(frozen=True, slots=True)
class SourceOptions:
    url: str
    database: Database
    api_key: str | None = field(default=None, repr=False)
    topics: tuple[str, ...] = ()
    topic_pattern: str | None = None
    # "earliest", "latest", "group" or "json" (then starting_json holds the positions)
    starting: str = "earliest"
    starting_json: Mapping[TopicPartition, int] = field(default_factory=dict)
    group: str | None = None
    ending: str = "latest"
    ending_json: Mapping[TopicPartition, int] = field(default_factory=dict)
    fail_on_data_loss: bool = True
    value_schema: str | None = None
    include_headers: bool = True
    # The headers column's form; parse_options refuses headersFormat given with includeHeaders=false.
    headers_format: HeadersFormat = HeadersFormat.MAP
    positions_per_split: int = DEFAULT_POSITIONS_PER_SPLIT
    query_log: str | None = None
    # PostgreSQL's reader: ADBC used less CPU per row than psycopg and read faster in every
    # round of benchmarks/spark_source.py (docs/SPARK.md, "The data source's throughput")
    driver: PostgresDriver = PostgresDriver.ADBC
    # Streaming only: positions per micro-batch (None: all there are), and the group to which
    # finished micro-batches' end positions are committed.
    max_offsets_per_trigger: int | None = None
    commit_group: str | None = None

    def wants_topic(self, topic: str) -> bool:
        if self.topic_pattern is not None:
            return re.fullmatch(self.topic_pattern, topic) is not None
        return topic in self.topics


def _positions(name: str, value: str, *, allow_group: bool) -> tuple[str, dict[TopicPartition, int]]:
    word = value.strip()
    if word.lower() in ("earliest", "latest") or (allow_group and word.lower() == "group"):
        return word.lower(), {}
    if word.startswith("{"):
        try:
            return "json", positions_from_json(word)
        except ValueError as e:
            raise OutboxSourceError(f"option {name}: {e}") from None
    kinds = "earliest, latest, group" if allow_group else "earliest, latest"
    raise OutboxSourceError(f"option {name}: expected {kinds} or JSON like "
                            f'{{"orders": {{"0": 23, "1": {EARLIEST}}}}}, not {value!r}')


def parse_options(raw: Mapping[str, str], env: Mapping[str, str] | None = None) -> SourceOptions:
    """The options of one read, checked; OutboxSourceError (one line) for the first problem."""
    env = os.environ if env is None else env
    given = given_options(raw, "read", OutboxSourceError, "the outbox data source")
    url = service_url(given, OutboxSourceError)
    if not given.get("databaseUrl", "").strip():
        raise OutboxSourceError(f"option databaseUrl is required: {known_options('read')['databaseUrl']}")

    topics = tuple(t.strip() for t in given.get("topics", "").split(",") if t.strip())
    pattern = given.get("topicPattern")
    if bool(topics) == bool(pattern):
        raise OutboxSourceError("give exactly one of the options topics (a comma-separated list) "
                                "and topicPattern (a regular expression)")
    if pattern:
        try:
            re.compile(pattern)
        except re.error as e:
            raise OutboxSourceError(f"option topicPattern: {pattern!r} is not a regular expression: {e}") from None

    starting, starting_json = _positions("startingPositions", given.get("startingPositions", "earliest"),
                                         allow_group=True)
    ending, ending_json = _positions("endingPositions", given.get("endingPositions", "latest"),
                                     allow_group=False)
    if ending == "earliest":
        raise OutboxSourceError("option endingPositions: earliest would read nothing; use latest or JSON")
    if EARLIEST in ending_json.values():
        raise OutboxSourceError(f"option endingPositions: {EARLIEST} (earliest) is not an end; use an offset or "
                                f"{LATEST} (latest)")
    group = given.get("group", "").strip() or None
    if starting == "group" and group is None:
        raise OutboxSourceError("option group is required with startingPositions=group")
    if group is not None and starting != "group":
        raise OutboxSourceError("option group is only read with startingPositions=group")
    for name, positions in (("startingPositions", starting_json), ("endingPositions", ending_json)):
        strangers = sorted({tp.topic for tp in positions if not (tp.topic in topics or pattern and re.fullmatch(pattern, tp.topic))})
        if strangers:
            raise OutboxSourceError(f"option {name} names topics this read does not read: {', '.join(strangers)}")

    per_split = _positive("positionsPerSplit", given.get("positionsPerSplit", str(DEFAULT_POSITIONS_PER_SPLIT)))
    max_per_trigger = (_positive("maxOffsetsPerTrigger", given["maxOffsetsPerTrigger"])
                       if "maxOffsetsPerTrigger" in given else None)
    value_schema = given.get("valueSchema", "").strip() or None
    driver = _chosen(given, "driver", PostgresDriver.ADBC)
    headers_format = _chosen(given, "headersFormat", HeadersFormat.MAP)
    include_headers = _bool("includeHeaders", given.get("includeHeaders", "true"))
    # Every setting acts or is refused: a form for a column left out would do nothing.
    if "headersFormat" in given and not include_headers:
        raise OutboxSourceError("option headersFormat is only read with includeHeaders=true")

    database = Database.from_url(given["databaseUrl"].strip())
    # The driver chooses PostgreSQL's reader: a SQLite file is read with sqlite3 whatever it says.
    if "driver" in given and database.kind != "postgresql":
        raise OutboxSourceError("option driver is only read with a PostgreSQL databaseUrl: a SQLite database "
                                "is read with Python's sqlite3")

    return SourceOptions(
        url=url,
        database=database,
        api_key=given.get("apiKey") or env.get("OUTBOX_API_KEY") or None,
        topics=topics,
        topic_pattern=pattern or None,
        starting=starting,
        starting_json=starting_json,
        group=group,
        ending=ending,
        ending_json=ending_json,
        fail_on_data_loss=_bool("failOnDataLoss", given.get("failOnDataLoss", "true")),
        value_schema=value_schema,
        include_headers=include_headers,
        headers_format=headers_format,
        positions_per_split=per_split,
        query_log=given.get("queryLog") or None,
        driver=driver,
        max_offsets_per_trigger=max_per_trigger,
        commit_group=given.get("commitGroup", "").strip() or None,
    )


def check_batch(options: SourceOptions) -> None:
    """A batch read (spark.read) of `options`: the streaming options would do nothing there, and
    are refused naming themselves, as a stream refuses endingPositions."""
    stray = [name for name, value in (("maxOffsetsPerTrigger", options.max_offsets_per_trigger),
                                      ("commitGroup", options.commit_group)) if value is not None]
    if stray:
        raise OutboxSourceError(f"option {stray[0]} is for streaming reads (spark.readStream); a batch read "
                                "reads every position up to endingPositions and commits no group's offsets")


def _chosen(given: Mapping[str, str], name: str, default: Choice) -> Choice:
    """Option `name`'s value as a member of `default`'s enum (matched without case), `default`
    when not given; another value is refused naming the enum's values."""
    values = type(default)
    if name not in given:
        return default
    try:
        return values(given[name].strip().lower())
    except ValueError:
        raise OutboxSourceError(f"option {name}: expected {choices(values)}, not {given[name]!r}") from None


def _positive(name: str, value: str) -> int:
    return positive_option(name, value, OutboxSourceError)


def _bool(name: str, value: str) -> bool:
    return bool_option(name, value, OutboxSourceError)
