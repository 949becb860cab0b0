"""The options of the `outbox` data source, checked before Spark runs anything.

    spark.read.format("outbox")
        .option("url", "http://127.0.0.1:8000")          # the service: topics, log bounds, groups
        .option("databaseUrl", "postgresql://…/outbox")  # its database: the records
        .option("topics", "orders,refunds")              # or topicPattern
        .option("startingPositions", "earliest")         # latest, group, or JSON per partition
        .option("endingPositions", "latest")             # or JSON per partition
        .load()

Every option is read here, once, into `SourceOptions`; an unknown option or a malformed value
is an OutboxSourceError of one line naming it. The checks that need the outside world (the
database answers and is migrated, the service answers, the database is the service's own)
are `check_reachable`.
"""

from __future__ import annotations

import logging
import os
import re
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from spark_jobs.errors import OutboxSourceError, SparkJobError
from spark_jobs.positions import EARLIEST, LATEST, TopicPartition, positions_from_json

logger = logging.getLogger(__name__)

# Option name (as Spark users write it) → what it means. Spark hands options over with their
# keys lower-cased or as typed, depending on the API used, so they are matched without case.
OPTIONS: dict[str, str] = {
    "url": "the outbox service's URL (topics, log bounds and group offsets come from its API)",
    "databaseUrl": "the service's database, as OUTBOX_DATABASE_URL (sqlite:///… or postgresql://…)",
    "apiKey": "the service's API key, when its authentication is on (default: $OUTBOX_API_KEY)",
    "topics": "comma-separated topic names",
    "topicPattern": "a regular expression that whole topic names match",
    "startingPositions": "earliest (default), latest, group, or JSON per partition "
                         '({"orders": {"0": 23, "1": -2}}; -2 earliest, -1 latest)',
    "group": "with startingPositions=group: the consumer group whose committed offsets to start at",
    "endingPositions": "latest (default: the log end when the read is planned), or JSON per partition",
    "failOnDataLoss": "true (default): a start below the log start is an error; false: start at the log start",
    "valueSchema": "a DDL schema (\"order_id BIGINT, meal STRING\"): value becomes a struct parsed from its JSON",
    "includeHeaders": "true (default); false leaves the headers column out",
    "driver": "PostgreSQL only: adbc (default: the ADBC PostgreSQL driver, in the spark extra) or psycopg",
    "positionsPerSplit": "positions of a partition per Spark task (default 250000)",
    "queryLog": "a file to which every task appends the SQL it ran, one JSON line each (for tests and debugging)",
    "maxOffsetsPerTrigger": "streaming: at most this many positions per micro-batch, over all partitions "
                            "(default: no limit; docs/SPARK.md, Streaming)",
    "commitGroup": "streaming: a consumer group to which each finished micro-batch's end positions are "
                   "committed, for operators to see the query's lag (Spark's checkpoint stays the truth)",
}

# Old option name → its new name: still read, with a DeprecationWarning, and not listed as known.
# maxRecordsPerTrigger counted positions, not records; the Kafka source names that limit
# maxOffsetsPerTrigger.
DEPRECATED_OPTIONS: dict[str, str] = {"maxRecordsPerTrigger": "maxOffsetsPerTrigger"}

DEFAULT_POSITIONS_PER_SPLIT = 250_000


@dataclass(frozen=True, slots=True)
class Database:
    """Where the records are read: the service's database, for the Python driver of its kind."""

    kind: str  # "postgresql" or "sqlite"
    target: str = field(repr=False)  # a libpq connection URI, or the SQLite file's path
    display: str = ""  # the target without its password, for messages

    @classmethod
    def from_url(cls, url: str) -> Database:
        from sqlalchemy.engine import make_url
        from sqlalchemy.exc import ArgumentError

        try:
            u = make_url(url)
        except ArgumentError:
            raise OutboxSourceError(f"option databaseUrl: {url!r} is not a database URL "
                                    "(sqlite:///path/outbox.db or postgresql://user@host:5432/outbox)") from None
        backend = u.get_backend_name()
        if backend == "sqlite":
            if not u.database or u.database == ":memory:":
                raise OutboxSourceError(f"option databaseUrl: {url!r} is an in-memory SQLite database; "
                                        "the service's database file is needed")
            path = str(Path(u.database).resolve())
            return cls("sqlite", path, path)
        if backend == "postgresql":
            # libpq takes the URI with the driver name dropped (postgresql+psycopg:// → postgresql://).
            plain = u.set(drivername="postgresql")
            return cls("postgresql", plain.render_as_string(hide_password=False), plain.render_as_string())
        raise OutboxSourceError(f"option databaseUrl: {backend!r} databases are not supported; "
                                "use sqlite:///… or postgresql://…")


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
    positions_per_split: int = DEFAULT_POSITIONS_PER_SPLIT
    query_log: str | None = None
    # PostgreSQL's reader: ADBC used less CPU per row than psycopg and read faster in every
    # round of benchmarks/spark_source.py (docs/SPARK.md, "The data source's throughput")
    driver: str = "adbc"
    # Streaming only: positions per micro-batch (None: all there are), and the group to which
    # finished micro-batches' end positions are committed.
    max_offsets_per_trigger: int | None = None
    commit_group: str | None = None

    def wants_topic(self, topic: str) -> bool:
        if self.topic_pattern is not None:
            return re.fullmatch(self.topic_pattern, topic) is not None
        return topic in self.topics


def _bool(name: str, value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    raise OutboxSourceError(f"option {name}: expected true or false, not {value!r}")


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


def given_options(raw: Mapping[str, str], known: Mapping[str, str], error: type[SparkJobError], what: str,
                  passthrough: tuple[str, ...] = ()) -> dict[str, str]:
    """The options given, each under its name in `known` (Spark hands keys over lower-cased or
    as typed: matched without case); an unknown one is `error`. Spark's own options named
    (lower-case) in `passthrough` are left out. A deprecated name of a known option
    (DEPRECATED_OPTIONS) is read as the new one, with a DeprecationWarning."""
    by_lower = {name.lower(): name for name in known}
    renamed = {old.lower(): (old, new) for old, new in DEPRECATED_OPTIONS.items() if new in known}
    given: dict[str, str] = {}
    for key, value in raw.items():
        name = by_lower.get(key.lower())
        if name is None and key.lower() in renamed:
            old, name = renamed[key.lower()]
            if any(k.lower() == name.lower() for k in raw):
                raise error(f"option {old} is the deprecated name of {name}: give only {name}")
            warnings.warn(f"option {old} of {what} is deprecated: it counts positions, and is now called {name}",
                          DeprecationWarning, stacklevel=2)
        if name is None:
            if key.lower() in passthrough:
                continue
            raise error(f"unknown option {key!r} for {what}; known: {', '.join(known)}")
        given[name] = str(value)
    return given


def service_url(given: Mapping[str, str], known: Mapping[str, str], error: type[SparkJobError]) -> str:
    """The option url: required, http:// or https://, without a trailing slash."""
    if not given.get("url", "").strip():
        raise error(f"option url is required: {known['url']}")
    url = given["url"].strip().rstrip("/")
    if not re.match(r"^https?://", url):
        raise error(f"option url: expected the service's http:// or https:// URL, not {url!r}")
    return url


def positive_option(name: str, value: str, error: type[SparkJobError]) -> int:
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number < 1:
        raise error(f"option {name}: expected a positive whole number, not {value!r}")
    return number


def parse_options(raw: Mapping[str, str], env: Mapping[str, str] | None = None) -> SourceOptions:
    """The options of one read, checked; OutboxSourceError (one line) for the first problem."""
    env = os.environ if env is None else env
    given = given_options(raw, OPTIONS, OutboxSourceError, "the outbox data source")
    url = service_url(given, OPTIONS, OutboxSourceError)
    if not given.get("databaseUrl", "").strip():
        raise OutboxSourceError(f"option databaseUrl is required: {OPTIONS['databaseUrl']}")

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
    driver = given.get("driver", "adbc").strip().lower()
    if driver not in ("psycopg", "adbc"):
        raise OutboxSourceError(f"option driver: expected psycopg or adbc, not {given['driver']!r}")

    return SourceOptions(
        url=url,
        database=Database.from_url(given["databaseUrl"].strip()),
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
        include_headers=_bool("includeHeaders", given.get("includeHeaders", "true")),
        positions_per_split=per_split,
        query_log=given.get("queryLog") or None,
        driver=driver,
        max_offsets_per_trigger=max_per_trigger,
        commit_group=given.get("commitGroup", "").strip() or None,
    )


def _positive(name: str, value: str) -> int:
    return positive_option(name, value, OutboxSourceError)


# --- The outside world ---------------------------------------------------------------------

PROBE_TIMEOUT_S = 5


def check_database(database: Database, driver: str = "adbc") -> None:
    """The database answers and has the committed_records view (migration 0003 or later)."""
    probe = "SELECT 1 FROM committed_records WHERE 1 = 0"
    if database.kind == "sqlite":
        import sqlite3

        if not Path(database.target).is_file():
            raise OutboxSourceError(f"option databaseUrl: no SQLite database at {database.target}: "
                                    "name the service's OUTBOX_DATABASE_URL")
        try:
            with sqlite3.connect(f"file:{database.target}?mode=ro", uri=True, timeout=PROBE_TIMEOUT_S) as conn:
                conn.execute(probe).fetchall()
        except sqlite3.Error as e:
            if "no such table" in str(e):
                raise OutboxSourceError(_not_migrated(database)) from None
            raise OutboxSourceError(f"cannot read the SQLite database {database.target}: {e}") from None
        return
    if database.kind == "postgresql" and driver == "adbc":
        try:
            import adbc_driver_postgresql  # noqa: F401
        except ImportError:
            raise OutboxSourceError("adbc-driver-postgresql is not installed: pip install 'outbox[spark]' "
                                    "(or adbc-driver-postgresql), or set the option driver=psycopg") from None
    try:
        import psycopg
    except ImportError:
        raise OutboxSourceError("psycopg is not installed: pip install 'psycopg[binary]' "
                                "(the data source reads PostgreSQL with it)") from None
    try:
        with psycopg.connect(database.target, connect_timeout=PROBE_TIMEOUT_S) as conn:
            conn.execute(probe).fetchall()
    except psycopg.errors.UndefinedTable:
        raise OutboxSourceError(_not_migrated(database)) from None
    except psycopg.Error as e:
        # libpq's message spans lines (the failure, then a hint): one line here
        said = " ".join(line.strip() for line in str(e).splitlines() if line.strip()) or type(e).__name__
        raise OutboxSourceError(f"cannot read the database {database.display}: {said}") from None


def _not_migrated(database: Database) -> str:
    return (f"the database {database.display} has no committed_records view: it is not an outbox database "
            "migrated to 0003 or later (run outbox migrate, or start outbox serve on it)")


def check_service(options: SourceOptions) -> list[dict]:
    """The service answers (GET /v1/topics), with the credentials given: its topics."""
    import httpx

    from app.client.http import credentials

    try:
        response = httpx.get(f"{options.url}/v1/topics", timeout=PROBE_TIMEOUT_S,
                             auth=credentials(options.api_key, None))
    except httpx.HTTPError as e:
        raise OutboxSourceError(f"cannot reach the outbox service at {options.url}: {e or type(e).__name__}") from None
    if response.status_code in (401, 403):
        raise OutboxSourceError(f"the outbox service at {options.url} refused the credentials "
                                f"(HTTP {response.status_code}): set the option apiKey (or OUTBOX_API_KEY)")
    if response.status_code != 200:
        raise OutboxSourceError(f"the outbox service at {options.url} answered GET /v1/topics "
                                f"with HTTP {response.status_code}: is it an outbox service?")
    try:
        return list(response.json()["topics"])
    except (ValueError, KeyError, TypeError):
        raise OutboxSourceError(f"the outbox service at {options.url} answered GET /v1/topics with no topic "
                                "list: is it an outbox service?") from None


def check_same_database(options: SourceOptions, listed: list[dict]) -> None:
    """The database is not behind the service: every partition of the wanted topics (of the
    service's `listed` ones) is in it, its next offset at or past the log end the service
    answered just before. The positions come
    from the service and the records from the database; read from another database (an empty
    one named by mistake, a copy, a replica that lags), a job would read nothing, or too little,
    and commit the service's positions as consumed. Checked when the read is planned; a
    database that is ahead (another, busier one) is not told apart: name the service's own, its
    primary."""
    import sqlite3

    import httpx

    from app.client.http import credentials

    auth = credentials(options.api_key, None)
    try:
        service: dict[tuple[str, int], int] = {}
        for topic in (t["name"] for t in listed if options.wants_topic(t["name"])):
            answer = httpx.get(f"{options.url}/v1/topics/{topic}", timeout=PROBE_TIMEOUT_S, auth=auth)
            if answer.status_code != 200:
                continue  # deleted meanwhile, or not the caller's to describe: the read says so
            service.update({(topic, p["partition"]): p["log_end_offset"] for p in answer.json()["partitions"]})
        if not service:
            return
        stored = _stored_next_offsets(options.database, sorted({t for t, _ in service}))
    except (httpx.HTTPError, ValueError, KeyError, sqlite3.Error) as e:
        raise OutboxSourceError(f"cannot compare the database {options.database.display} with the service at "
                                f"{options.url}: {type(e).__name__}: {' '.join(str(e).split())}") from None
    if stored is None:
        logger.warning("the role of %s may not read the partitions' next offsets: the check that it is the "
                       "service's own database is skipped (run outbox grant-reader for the role again)",
                       options.database.display)
        return
    behind = sorted(tp for tp, end in service.items() if stored.get(tp, -1) < end)
    if behind:
        topic, partition = behind[0]
        have = stored.get((topic, partition))
        raise OutboxSourceError(
            f"option databaseUrl: {options.database.display} is not the database of the service at {options.url}: "
            f"the service's {topic}/{partition} ends at {service[(topic, partition)]}, "
            + ("the database has no such partition" if have is None else f"the database's at {have}")
            + " (name the service's own OUTBOX_DATABASE_URL)")


def _stored_next_offsets(database: Database, topics: list[str]) -> dict[tuple[str, int], int] | None:
    """(topic, partition) → next_offset, as the database stores them; None if the role may not
    read them (one granted the view alone, before outbox grant-reader granted these columns)."""
    marks = ", ".join("?" if database.kind == "sqlite" else "%s" for _ in topics)
    sql = ('SELECT t.name, p."partition", p.next_offset FROM partitions p JOIN topics t ON t.topic_id = p.topic_id '
           f"WHERE t.name IN ({marks})")
    if database.kind == "sqlite":
        import sqlite3

        conn = sqlite3.connect(f"file:{database.target}?mode=ro", uri=True, timeout=PROBE_TIMEOUT_S)
        try:
            rows = conn.execute(sql, topics).fetchall()
        finally:
            conn.close()
    else:
        import psycopg

        try:
            with psycopg.connect(database.target, connect_timeout=PROBE_TIMEOUT_S) as conn:
                rows = conn.execute(sql, topics).fetchall()
        except psycopg.errors.InsufficientPrivilege:
            return None
    return {(name, partition): next_offset for name, partition, next_offset in rows}


def check_reachable(options: SourceOptions) -> None:
    check_database(options.database, options.driver)
    check_same_database(options, check_service(options))
