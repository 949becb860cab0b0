"""The `outbox` data source's options, both directions, in one table, and how they are read.

A read (spark.read / spark.readStream .format("outbox")) and a write (df.write /
df.writeStream .format("outbox")) reach the same registered data source with their options;
each direction accepts the options of the table marked for it (OPTIONS), matched without case
(Spark hands keys over lower-cased or as typed, depending on the API used). An unknown option or
a malformed value is an error of one line naming it: spark_jobs.reader.options and
spark_jobs.writer.options build each direction's options from `given_options`.
"""

from __future__ import annotations

import enum
import re
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from spark_jobs.errors import SparkJobError

Direction = Literal["read", "write"]


class HeadersFormat(str, enum.Enum):
    """The form of a read's `headers` column (option headersFormat)."""

    # map<string,string>, parsed from the stored JSON object (the default)
    MAP = "map"
    # the stored JSON object's text, a string, parsed by no one unless the reader asks
    # (from_json(headers, "map<string,string>")): a read that only carries the headers along
    # is spared their parse on every row (docs/SPARK.md, "Headers as their JSON text")
    JSON = "json"


class PostgresDriver(str, enum.Enum):
    """The Python driver a read of PostgreSQL uses (option driver)."""

    # The ADBC PostgreSQL driver, in the spark extra (the default)
    ADBC = "adbc"
    PSYCOPG = "psycopg"


def choices(values: type[enum.Enum]) -> str:
    """An option's accepted values, as its meaning and its error list them."""
    return " or ".join(str(v.value) for v in values)


@dataclass(frozen=True, slots=True)
class Option:
    name: str  # as Spark users write it
    meaning: str
    read: bool = False
    write: bool = False


OPTIONS: tuple[Option, ...] = (
    Option("url", "the outbox service's URL (topics, log bounds and group offsets come from its API; "
                  "a write's transactions go through it)", read=True, write=True),
    Option("databaseUrl", "the service's database, as OUTBOX_DATABASE_URL (sqlite:///… or postgresql://…)",
           read=True),
    Option("apiKey", "the service's API key, when its authentication is on (default: $OUTBOX_API_KEY)",
           read=True, write=True),
    Option("topics", "comma-separated topic names", read=True),
    Option("topicPattern", "a regular expression that whole topic names match", read=True),
    Option("startingPositions", "earliest (default), latest, group, or JSON per partition "
                                '({"orders": {"0": 23, "1": -2}}; -2 earliest, -1 latest)', read=True),
    Option("group", "with startingPositions=group: the consumer group whose committed offsets to start at",
           read=True),
    Option("endingPositions", "latest (default: the high watermark when the read is planned), or JSON per partition",
           read=True),
    Option("failOnDataLoss", "true (default): a start below the log start is an error; false: start at the "
                             "log start", read=True),
    Option("valueSchema", "a DDL schema (\"order_id BIGINT, meal STRING\"): value becomes a struct parsed from "
                          "its JSON", read=True),
    Option("includeHeaders", "true (default); false leaves the headers column out",
           read=True),
    Option("headersFormat", f"the headers column's form: {choices(HeadersFormat)}; map (default) is "
                            "map<string,string>, json the stored JSON object's text (a string)", read=True),
    Option("driver", f"PostgreSQL only: {choices(PostgresDriver)}; adbc (default) is the ADBC PostgreSQL driver, "
                     "in the spark extra", read=True),
    Option("positionsPerSplit", "positions of a partition per Spark task (default 250000)", read=True),
    Option("queryLog", "a file to which every task appends the SQL it ran, one JSON line each (for tests and "
                       "debugging)", read=True),
    Option("maxOffsetsPerTrigger", "streaming: at most this many positions per micro-batch, over all partitions "
                                   "(default: no limit; docs/SPARK.md, Streaming)", read=True),
    Option("commitGroup", "streaming: a consumer group to which each finished micro-batch's end positions are "
                          "committed, for operators to see the query's lag (Spark's checkpoint stays the truth)",
           read=True),
    Option("topic", "the output topic of every row (wins over a topic column)", write=True),
    Option("sinkId", "names the sink's transactional ids (<sinkId> on the driver, <sinkId>.<partition> per task) "
                     "and its progress group <sinkId>; required for streaming", write=True),
    Option("batchRecords", "records per Send of a task (default 5000)", write=True),
    Option("transactionTimeoutMs", "a task's transaction timeout while it sends, before it is prepared "
                                   "(default 900000, the service's default maximum)", write=True),
    Option("consumerGroup", "a pipeline's consumer group: its offsets move to the positions the batch consumed "
                            "in the batch's commit (a streaming query's from its offset log; a batch write's: "
                            "consumedPositions)", write=True),
    Option("consumedPositions", "batch writes with consumerGroup: the positions read, as JSON per partition "
                                '({"orders": {"0": 120}}): the group\'s offsets once the batch commits', write=True),
    Option("consumedFrom", "batch writes with consumerGroup, optional: the group's offsets the read started from, "
                           "as JSON ({} when it had none); the commit is refused if they moved meanwhile", write=True),
    Option("checkpointLocation", "Spark's own, for a streaming write; with consumerGroup the sink reads the "
                                 "query's offset log there (a local or mounted path)", write=True),
)

# Old option name → its new name: still read, with a DeprecationWarning, and not listed as known.
# maxRecordsPerTrigger counted positions, not records; the Kafka source names that limit
# maxOffsetsPerTrigger.
DEPRECATED_OPTIONS: dict[str, str] = {"maxRecordsPerTrigger": "maxOffsetsPerTrigger"}


def known_options(direction: Direction) -> dict[str, str]:
    """Name → meaning of the options of one direction, in the table's order."""
    return {o.name: o.meaning for o in OPTIONS if (o.read if direction == "read" else o.write)}


def given_options(raw: Mapping[str, str], direction: Direction, error: type[SparkJobError], what: str,
                  passthrough: tuple[str, ...] = ()) -> dict[str, str]:
    """The options given, each under its name in the table (matched without case); one the
    direction does not know is `error`. Spark's own options named (lower-case) in `passthrough`
    are left out. A deprecated name of a known option (DEPRECATED_OPTIONS) is read as the new
    one, with a DeprecationWarning."""
    known = known_options(direction)
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


def service_url(given: Mapping[str, str], error: type[SparkJobError]) -> str:
    """The option url: required, http:// or https://, without a trailing slash."""
    if not given.get("url", "").strip():
        raise error(f"option url is required: {known_options('read')['url']}")
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


def bool_option(name: str, value: str, error: type[SparkJobError]) -> bool:
    lowered = value.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    raise error(f"option {name}: expected true or false, not {value!r}")
