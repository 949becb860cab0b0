"""The Spark jobs' planning and setup, without Spark: position ranges, the old JDBC reader's
predicates and URLs (benchmarks/jdbc_reader.py), driver discovery and the Java check (with fake
jars and a fake java)."""

from __future__ import annotations

import logging
import os
import stat
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

from benchmarks.jdbc_reader import MIN_POSITIONS_PER_SPLIT, JdbcSource, auto_splits, predicates, split_range
from spark_jobs.errors import DataLossError, JavaNotFound, JdbcDriverNotFound, OutboxSourceError, SparkJobError
from spark_jobs.jars import (
    check_java,
    parse_java_major,
    required_java_major,
    resolve_jdbc_jars,
)
from spark_jobs.common.positions import (
    DataLoss,
    PositionRange,
    batch_ranges,
    deleted_while_reading,
    report_data_loss,
    start_positions,
)
from spark_jobs.common.positions import TopicRange
from spark_jobs.reader.options import Database
from app.reader_relations import VIEW, partition_view
from spark_jobs.reader.planning import Split, relations
from spark_jobs.reader.statement import positions_predicate, select_statement
from spark_jobs.session import check_submitted_jars

# --- positions and predicates ---------------------------------------------------------------


def test_split_range_is_contiguous_bounded_and_even() -> None:
    parts = split_range(PositionRange(0, 10, 110), 3)
    assert parts == [(10, 43), (43, 76), (76, 110)]
    assert split_range(PositionRange(0, 5, 7), 4) == [(5, 6), (6, 7)]  # never an empty range
    assert split_range(PositionRange(0, 7, 7), 4) == []
    sizes = [hi - lo for lo, hi in split_range(PositionRange(0, 0, 1_000_003), 8)]
    assert max(sizes) - min(sizes) <= 1 and sum(sizes) == 1_000_003


def test_a_range_of_positions_bounds_the_batch_position_up_to_the_first_batch_at_or_past_its_end() -> None:
    # Looked for within NEXT_BATCH_WINDOW (1,000) positions of the end first, then past them.
    probe = ("SELECT batch_position FROM committed_records WHERE topic_id = "
             "(SELECT topic_id FROM topics WHERE name = 'it''s') AND \"partition\" = 2 AND {} "
             "ORDER BY batch_position LIMIT 1")
    assert positions_predicate("it's", 2, 10, 20, "postgresql") == [
        "topic = 'it''s' AND \"partition\" = 2",
        "batch_position >= 10",
        f"batch_position <= COALESCE(({probe.format('batch_position >= 20 AND batch_position < 1020')}), "
        f"({probe.format('batch_position >= 1020')}), 19)",
        "commit_position >= 10",
        "commit_position < 20",
    ]


def test_a_split_of_a_partitions_view_reads_it_and_finds_its_end_in_it() -> None:
    split = Split(TopicRange("t", 2, 10, 20), relation=partition_view(7, 2))
    statement = select_statement(split, "postgresql", include_headers=True)
    assert statement.startswith('SELECT "offset", commit_position, timestamp_ms, key, value, headers '
                                "FROM committed_records.partition_7_2 WHERE ")
    assert "(SELECT batch_position FROM committed_records.partition_7_2 WHERE topic_id = " in statement
    assert " committed_records " not in statement.replace("committed_records.partition_7_2", "")


def test_on_sqlite_every_split_reads_the_view_of_every_partition() -> None:
    of = relations(Database("sqlite", "/nowhere.db"), {"t"})
    assert of("t", 0) == VIEW


def test_predicates_bound_each_sub_range_as_a_range_of_positions() -> None:
    ranges = [PositionRange(0, 0, 4), PositionRange(1, 3, 3), PositionRange(2, 10, 12)]
    preds = predicates("it's", ranges, 2, "postgresql")
    assert preds == [" AND ".join(positions_predicate("it's", p, lo, hi, "postgresql"))
                     for p, lo, hi in [(0, 0, 2), (0, 2, 4), (2, 10, 11), (2, 11, 12)]]


def test_auto_splits_aims_at_the_task_slots_but_not_at_tiny_ranges() -> None:
    big = [PositionRange(p, 0, 10 * MIN_POSITIONS_PER_SPLIT) for p in range(2)]
    assert auto_splits(big, parallelism=8) == 4
    assert auto_splits([PositionRange(0, 0, 100)], parallelism=8) == 1
    assert auto_splits([PositionRange(0, 5, 5)], parallelism=8) == 1


def test_batch_ranges_start_at_committed_offsets_and_stop_at_the_snapshot() -> None:
    ranges = batch_ranges({0: 4}, {0: 10, 1: 7}, max_positions=5)
    assert ranges == [PositionRange(0, 4, 9), PositionRange(1, 0, 5)]


def test_a_committed_offset_past_the_snapshot_reads_nothing_and_keeps_its_position() -> None:
    """An HTTP consumer may commit a position past the high watermark (the commit points past
    it are handed out while a transaction whose Sends are not durable yet holds it back): the
    batch reads nothing there, and its end, committed as the group's offset, does not go back."""
    assert batch_ranges({0: 11, 1: 3}, {0: 10, 1: 10}) == [PositionRange(0, 11, 11), PositionRange(1, 3, 10)]


def test_start_positions_are_committed_offsets_clamped_to_the_log_start() -> None:
    starts, lost = start_positions({0: 5, 1: 9, 2: 8}, {0: 8, 1: 8, 2: 8, 3: 4})
    # 0: committed below the log start (a loss); 1, 2: at or above it; 3: never committed.
    assert starts == {0: 8, 1: 9, 2: 8, 3: 4}
    assert lost == [DataLoss(0, 5, 8)]


def test_a_range_whose_start_the_log_start_passed_while_reading_is_a_loss() -> None:
    ranges = [PositionRange(0, 8, 12), PositionRange(1, 3, 3), PositionRange(2, 5, 9)]
    assert deleted_while_reading(ranges, {0: 10, 1: 4, 2: 5}) == [DataLoss(0, 8, 10, while_reading=True)]


def test_data_loss_is_a_warning_per_partition_by_default(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="spark_jobs.common.positions")
    report_data_loss([DataLoss(0, 5, 8), DataLoss(1, 2, 6, while_reading=True)],
                     group="g", topic="orders", fail_on_data_loss=False)
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        ("WARNING", "data loss for group g: orders/0: committed position 5 is below the log start 8, so records "
                    "in [5, 8) were deleted before the group read them; starting at the log start"),
        ("WARNING", "data loss for group g: orders/1: the log start moved to 6 while the batch read from 2, so "
                    "records below 6 may be missing from it; the batch goes on without them"),
    ]


def test_fail_on_data_loss_raises_one_line_naming_every_partition(caplog: pytest.LogCaptureFixture) -> None:
    with pytest.raises(DataLossError) as raised:
        report_data_loss([DataLoss(0, 5, 8), DataLoss(1, 0, 3)], group="g", topic="orders", fail_on_data_loss=True)
    assert str(raised.value) == (
        "data loss for group 'g': orders/0: committed position 5 is below the log start 8, so records in [5, 8) "
        "were deleted before the group read them; orders/1: committed position 0 is below the log start 3, so "
        "records in [0, 3) were deleted before the group read them (without fail-on-data-loss the job goes on "
        "without them)")
    assert caplog.records == []
    report_data_loss([], group="g", topic="orders", fail_on_data_loss=True)  # nothing lost: nothing raised


# --- JDBC URLs --------------------------------------------------------------------------------


def test_database_urls_become_jdbc_urls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    s = JdbcSource.from_url("sqlite:///./outbox.db")
    assert (s.database, s.url) == ("sqlite", f"jdbc:sqlite:{tmp_path / 'outbox.db'}")
    assert JdbcSource.from_url("sqlite:////var/db/o.db").url == "jdbc:sqlite:/var/db/o.db"
    pg = JdbcSource.from_url("postgresql+psycopg://app:s%40cret@db.example:6432/outbox?sslmode=require")
    assert pg.url == "jdbc:postgresql://db.example:6432/outbox?sslmode=require"
    assert pg.properties(fetchsize=500) == {
        "driver": "org.postgresql.Driver", "fetchsize": "500", "user": "app", "password": "s@cret"}
    assert "s@cret" not in repr(pg)
    assert JdbcSource.from_url("postgresql://u@h/d").url == "jdbc:postgresql://h:5432/d"
    assert JdbcSource.from_url("jdbc:postgresql://h/d", user="x").user == "x"


@pytest.mark.parametrize("url", [
    "postgresql://app@db.example/outbox?sslmode=require&password=s3cr3t&sslpassword=k3y",
    "jdbc:postgresql://db.example:5432/outbox?sslmode=require&password=s3cr3t&sslpassword=k3y",
])
def test_a_password_in_the_query_goes_to_the_connection_properties_never_the_jdbc_url(url: str) -> None:
    source = JdbcSource.from_url(url, user="app")
    assert source.url == "jdbc:postgresql://db.example:5432/outbox?sslmode=require"
    assert source.properties(fetchsize=10) == {"driver": "org.postgresql.Driver", "fetchsize": "10", "user": "app",
                                               "password": "s3cr3t", "sslpassword": "k3y"}
    assert "s3cr3t" not in repr(source) and "k3y" not in repr(source)


def test_a_password_given_wins_over_the_querys() -> None:
    source = JdbcSource.from_url("postgresql://app@h/d?password=old", password="new")
    assert (source.url, source.password) == ("jdbc:postgresql://h:5432/d", "new")


def test_postgres_urls_are_read_as_postgresql_ones_the_service_takes_them() -> None:
    pg = JdbcSource.from_url("postgres://app:pw@db.example:6432/outbox")
    assert (pg.database, pg.url, pg.user, pg.password) == ("postgresql", "jdbc:postgresql://db.example:6432/outbox",
                                                           "app", "pw")
    database = Database.from_url("postgres://app:pw@db.example/outbox")
    assert (database.kind, database.target) == ("postgresql", "postgresql://app:pw@db.example/outbox")


# Both Spark readers of a service database URL: the JVM read's and the data source's.
READERS = pytest.mark.parametrize("reader", [JdbcSource.from_url, Database.from_url], ids=["jdbc", "data source"])

# A password written after user:, as a password parameter, and holding an '@' as it is (which
# a parse ends at its first '@'): each shown as ***, whole.
UNSUPPORTED = [
    ("mysql://u:hunter2@h/d", "'mysql://u:***@h/d'"),
    ("mysql://u@h/d?password=hunter2", "'mysql://u@h/d?password=***'"),
    ("mysql://u:p@ss@h/d", "'mysql://u:***@h/d'"),
]


@pytest.mark.parametrize(("url", "shown"), UNSUPPORTED)
@READERS
def test_the_spark_readers_refuse_an_unsupported_database_url_without_its_password(
        reader: Callable[[str], object], url: str, shown: str) -> None:
    with pytest.raises(OutboxSourceError) as caught:
        reader(url)
    assert str(caught.value) == (f"option databaseUrl: unsupported database URL {shown}: the service takes "
                                 "sqlite:///… or postgresql[+psycopg]://… only")


def test_an_unparsable_database_url_is_refused_without_repeating_it() -> None:
    with pytest.raises(OutboxSourceError) as caught:
        Database.from_url("u:hunter2@not a url")
    assert str(caught.value) == ("option databaseUrl is not a database URL "
                                 "(sqlite:///path/outbox.db or postgresql://user@host:5432/outbox)")


def test_an_unsupported_jdbc_url_is_refused_naming_its_subprotocol_only() -> None:
    with pytest.raises(SparkJobError) as caught:
        JdbcSource.from_url("jdbc:mysql://h/d?user=u&password=hunter2")
    assert str(caught.value) == "unsupported JDBC URL (jdbc:mysql:…): use jdbc:postgresql: or jdbc:sqlite:"


def test_a_postgresql_password_holding_an_at_sign_as_it_is_is_refused_as_the_service_refuses_it() -> None:
    with pytest.raises(OutboxSourceError) as caught:
        Database.from_url("postgresql://u:p@ss@h/d")
    assert str(caught.value) == ("option databaseUrl: 'postgresql://u:***@h/d': the user, password or database "
                                 "holds an '@' as it is: write it %40")


@pytest.mark.parametrize(("url", "shown"), [
    ("postgresql://app:hunter2@db.example/outbox", "postgresql://app:***@db.example/outbox"),
    ("postgresql://app@db.example/outbox?password=hunter2", "postgresql://app@db.example/outbox?password=***"),
    ("postgresql://app:hunter2%40x@db.example/outbox", "postgresql://app:***@db.example/outbox"),
])
def test_the_data_source_shows_its_postgresql_database_without_the_password(url: str, shown: str) -> None:
    assert Database.from_url(url).display == shown


def test_a_database_that_does_not_answer_is_named_without_the_password() -> None:
    from spark_jobs.reader.checks import check_database

    with pytest.raises(OutboxSourceError) as caught:
        check_database(Database.from_url("postgresql://postgres@127.0.0.1:1/x?password=hunter2"), "psycopg")
    assert str(caught.value).startswith("cannot read the database postgresql://postgres@127.0.0.1:1/x?password=***: ")
    assert "hunter2" not in str(caught.value)


@pytest.mark.parametrize("url", ["sqlite://", "sqlite:///:memory:", "sqlite:///file::memory:?uri=true",
                                 "sqlite:///file:x?mode=memory&uri=true"])
@READERS
def test_an_in_memory_sqlite_url_is_refused_as_the_service_refuses_it(reader: Callable[[str], object], url: str) -> None:
    from pydantic import ValidationError

    from app.settings import Settings

    with pytest.raises(ValidationError, match="in-memory database"):
        Settings(database_url=url)
    with pytest.raises(OutboxSourceError, match="is an in-memory SQLite database; the service's database file is needed"):
        reader(url)


# --- JDBC driver discovery --------------------------------------------------------------------


def _jar(path: Path, *classes: str) -> Path:
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\n")
        for c in classes:
            z.writestr(c.replace(".", "/") + ".class", b"\xca\xfe\xba\xbe")
    return path


def test_explicit_jars_come_first_then_the_debian_directory(tmp_path: Path) -> None:
    explicit = _jar(tmp_path / "my-pg.jar", "org.postgresql.Driver")
    debian = tmp_path / "java"
    debian.mkdir()
    _jar(debian / "postgresql.jar", "org.postgresql.Driver")
    _jar(debian / "sqlite-jdbc.jar", "org.sqlite.JDBC")
    env = {"OUTBOX_SPARK_JDBC_JARS": str(explicit), "OUTBOX_SPARK_JDBC_DIR": str(debian)}
    r = resolve_jdbc_jars(["postgresql", "sqlite"], env=env, maven_reachable=False)
    assert r.jars == [str(explicit), str(debian / "sqlite-jdbc.jar")]
    assert r.sources["postgresql"].startswith("explicit") and r.sources["sqlite"].startswith(str(debian))
    assert r.spark_conf() == {"spark.jars": f"{explicit},{debian / 'sqlite-jdbc.jar'}"}


def test_maven_coordinates_only_when_maven_answers(tmp_path: Path) -> None:
    env = {"OUTBOX_SPARK_JDBC_DIR": str(tmp_path)}
    r = resolve_jdbc_jars(["postgresql"], env=env, maven_reachable=True)
    assert r.jars == [] and r.spark_conf() == {"spark.jars.packages": "org.postgresql:postgresql:42.7.4"}
    with pytest.raises(JdbcDriverNotFound) as e:
        resolve_jdbc_jars(["postgresql", "sqlite"], env=env, maven_reachable=False)
    message = str(e.value)
    assert "apt-get install -y libpostgresql-jdbc-java libxerial-sqlite-jdbc-java" in message
    assert "OUTBOX_SPARK_JDBC_JARS=" in message and "did not answer" in message
    with pytest.raises(JdbcDriverNotFound, match="OUTBOX_SPARK_JDBC_PACKAGES=auto"):
        resolve_jdbc_jars(["sqlite"], env={**env, "OUTBOX_SPARK_JDBC_PACKAGES": "never"}, maven_reachable=True)
    r = resolve_jdbc_jars(["sqlite"], env={**env, "OUTBOX_SPARK_JDBC_PACKAGES": "always"}, maven_reachable=False)
    assert r.packages == ["org.xerial:sqlite-jdbc:3.46.1.3"]


def test_a_maven_repository_set_is_where_spark_resolves_the_packages_not_only_what_is_probed(tmp_path: Path) -> None:
    # Probed alone, a mirror that answers would send Spark to Maven Central for the packages,
    # the repository that may well be the one out of reach.
    mirror = "https://maven.example.org/maven2/"
    env = {"OUTBOX_SPARK_JDBC_DIR": str(tmp_path), "OUTBOX_SPARK_MAVEN_REPOSITORY": mirror}
    r = resolve_jdbc_jars(["postgresql"], env=env, maven_reachable=True)
    assert r.spark_conf() == {"spark.jars.packages": "org.postgresql:postgresql:42.7.4",
                              "spark.jars.repositories": mirror}
    r = resolve_jdbc_jars(["postgresql"], env={**env, "OUTBOX_SPARK_JDBC_PACKAGES": "always"}, maven_reachable=False)
    assert r.spark_conf()["spark.jars.repositories"] == mirror
    # No package to resolve, or Maven Central itself: nothing to add.
    assert "spark.jars.repositories" not in resolve_jdbc_jars(
        ["postgresql"], env={"OUTBOX_SPARK_JDBC_DIR": str(tmp_path)}, maven_reachable=True).spark_conf()
    _jar(tmp_path / "postgresql.jar", "org.postgresql.Driver")
    assert "spark.jars.repositories" not in resolve_jdbc_jars(["postgresql"], env=env, maven_reachable=True).spark_conf()


def test_a_jdbc_packages_mode_that_is_none_of_the_three_is_refused_even_with_every_driver_found(tmp_path: Path) -> None:
    _jar(tmp_path / "postgresql.jar", "org.postgresql.Driver")
    with pytest.raises(SparkJobError, match="OUTBOX_SPARK_JDBC_PACKAGES must be auto, always or never"):
        resolve_jdbc_jars(["postgresql"], env={"OUTBOX_SPARK_JDBC_DIR": str(tmp_path),
                                               "OUTBOX_SPARK_JDBC_PACKAGES": "alwayz"}, maven_reachable=True)


def test_an_explicit_jar_that_is_missing_or_no_driver_is_an_error(tmp_path: Path) -> None:
    env = {"OUTBOX_SPARK_JDBC_DIR": str(tmp_path)}
    with pytest.raises(JdbcDriverNotFound, match="does not exist"):
        resolve_jdbc_jars(["sqlite"], jdbc_jars=[str(tmp_path / "nope.jar")], env=env, maven_reachable=False)
    other = _jar(tmp_path / "guava.jar", "com.google.common.base.Strings")
    with pytest.raises(JdbcDriverNotFound, match="holds none of the JDBC drivers"):
        resolve_jdbc_jars(["sqlite"], jdbc_jars=[str(other)], env=env, maven_reachable=False)


def test_under_spark_submit_a_missing_driver_names_the_jars_flag(tmp_path: Path) -> None:
    pg = _jar(tmp_path / "postgresql.jar", "org.postgresql.Driver")
    r = check_submitted_jars(["postgresql"], f"file://{pg}")
    assert r.sources == {"postgresql": f"spark-submit: file://{pg}"}
    with pytest.raises(JdbcDriverNotFound, match="spark-submit was started without a JDBC driver for sqlite"):
        check_submitted_jars(["postgresql", "sqlite"], f"file://{pg}")


# --- Java ---------------------------------------------------------------------------------------


def test_java_versions_are_read_from_java_version_output() -> None:
    assert parse_java_major('openjdk version "17.0.15" 2025-04-15') == 17
    assert parse_java_major('java version "1.8.0_392"') == 8
    assert parse_java_major('openjdk version "21" 2023-09-19') == 21
    assert required_java_major("4.3.0") == 17 and required_java_major("3.5.1") == 8


def _fake_java(home: Path, version: str) -> None:
    (home / "bin").mkdir(parents=True)
    java = home / "bin" / "java"
    java.write_text(f'#!/bin/sh\necho \'openjdk version "{version}" 2020-01-01\' >&2\n')
    java.chmod(java.stat().st_mode | stat.S_IEXEC)


def test_missing_or_old_java_is_an_error_that_names_the_fix(tmp_path: Path) -> None:
    with pytest.raises(JavaNotFound, match="Java not found.*no java on PATH.*openjdk-17-jre-headless"):
        check_java(17, env={"PATH": str(tmp_path)})
    with pytest.raises(JavaNotFound, match="has no bin/java"):
        check_java(17, env={"JAVA_HOME": str(tmp_path / "nothing"), "PATH": os.environ.get("PATH", "")})
    _fake_java(tmp_path / "jdk11", "11.0.2")
    with pytest.raises(JavaNotFound, match="is Java 11, this PySpark needs Java 17 or newer"):
        check_java(17, env={"JAVA_HOME": str(tmp_path / "jdk11")})
    _fake_java(tmp_path / "jdk21", "21.0.1")
    assert check_java(17, env={"JAVA_HOME": str(tmp_path / "jdk21")}) == (str(tmp_path / "jdk21" / "bin" / "java"), 21)


# --- The data source's value parsing (spark_jobs.reader.split), as from_json reads ---------------


def test_a_value_schema_with_a_decimal_reads_numbers_with_a_fraction_exactly() -> None:
    pa = pytest.importorskip("pyarrow")
    from decimal import Decimal

    from spark_jobs.reader.split import parse_values

    order = pa.struct([("order_id", pa.int64()), ("meal", pa.string()), ("value", pa.decimal128(18, 2))])
    texts = pa.array(['{"order_id": 1, "meal": "Pizza", "value": 1.25}', '{"order_id": 2, "value": 7}',
                      '{"order_id": 3, "value": 0.1}', "not json", None])

    assert parse_values(texts, order).to_pylist() == [
        {"order_id": 1, "meal": "Pizza", "value": Decimal("1.25")},
        {"order_id": 2, "meal": None, "value": Decimal("7.00")},
        {"order_id": 3, "meal": None, "value": Decimal("0.10")},
        {"order_id": None, "meal": None, "value": None},
        None,
    ]


@pytest.mark.parametrize(("driver", "reader"), [("adbc", "_read_postgresql_adbc"), ("psycopg", "_read_postgresql")])
def test_a_split_of_postgresql_is_read_with_the_driver_its_plain_value_names(
        monkeypatch: pytest.MonkeyPatch, driver: str, reader: str) -> None:
    pa = pytest.importorskip("pyarrow")
    from spark_jobs.common.positions import TopicRange
    from spark_jobs.reader import split as reading
    from spark_jobs.reader.planning import Split

    used: list[str] = []

    def reads_as(name: str):  # type: ignore[no-untyped-def]
        def read(conninfo: str, statement: str, include_headers: bool):  # type: ignore[no-untyped-def]
            used.append(name)
            return iter(())
        return read

    for name in ("_read_postgresql_adbc", "_read_postgresql"):
        monkeypatch.setattr(reading, name, reads_as(name))

    list(reading.read_split("postgresql", "postgresql://nowhere/outbox", Split(TopicRange("t", 0, 0, 1)),
                            pa.schema([pa.field("offset", pa.int64())]), value_type=None, query_log=None,
                            driver=driver))

    assert used == [reader]


# --- timestamps: the last instant a reader holds ------------------------------------------------


def test_the_readers_last_timestamp_is_the_last_a_record_may_have() -> None:
    # spark_jobs may not import the domain (the import contract spark-through-client): one number, held equal here.
    from app.domain.records import MAX_TIMESTAMP_MS
    from spark_jobs.reader.statement import LAST_TIMESTAMP_MS

    assert LAST_TIMESTAMP_MS == MAX_TIMESTAMP_MS == 253_402_300_799_999


def _stored_split(monkeypatch: pytest.MonkeyPatch, timestamps: list[int]) -> list[object]:
    """read_split of a SQLite split of t/3 whose stored rows (offsets 0, 1, …) are timestamped
    `timestamps`, the rows made here rather than read from a database."""
    import datetime

    pa = pytest.importorskip("pyarrow")
    from spark_jobs.common.positions import TopicRange
    from spark_jobs.reader import split as reading
    from spark_jobs.reader.planning import Split

    n = len(timestamps)
    stored = pa.record_batch([pa.array(range(n), pa.int64()), pa.array(range(1, n + 1), pa.int64()),
                              pa.array(timestamps, pa.int64()), pa.nulls(n, pa.string()), pa.array(["1"] * n)],
                             schema=reading._stored_schema(False))
    monkeypatch.setattr(reading, "_read_sqlite", lambda path, statement, include_headers: iter([stored]))
    schema = pa.schema([pa.field("offset", pa.int64()), pa.field("timestamp", pa.timestamp("us", tz="UTC"))])
    batches = reading.read_split("sqlite", "outbox.db", Split(TopicRange("t", 3, 0, n)), schema, value_type=None,
                                 query_log=None)
    return [t.astimezone(datetime.timezone.utc) for b in batches for t in b.column("timestamp").to_pylist()]


def test_the_data_source_reads_a_record_of_the_last_instant_a_record_may_have(monkeypatch: pytest.MonkeyPatch) -> None:
    from datetime import datetime, timezone

    assert _stored_split(monkeypatch, [0, 253_402_300_799_999]) == [
        datetime(1970, 1, 1, tzinfo=timezone.utc), datetime(9999, 12, 31, 23, 59, 59, 999_000, tzinfo=timezone.utc)]


@pytest.mark.parametrize("past", [253_402_300_800_000, 9_223_372_036_854_776, 2**63 - 1])
def test_the_data_source_stops_at_a_record_stored_past_the_last_instant_with_a_line_naming_it(
        monkeypatch: pytest.MonkeyPatch, past: int) -> None:
    """Stored before migration 0049, when every door took a timestamp up to 2**63 - 1: from
    9223372036854776 ms the Arrow cast overflowed (ArrowInvalid, naming no record), and below
    that a year past 9999 is no datetime of Python's."""
    with pytest.raises(OutboxSourceError) as caught:
        _stored_split(monkeypatch, [5, 253_402_300_799_999, past, past])
    assert str(caught.value) == (
        f"record 2 of t/3: timestamp_ms {past} is past 253402300799999 (9999-12-31T23:59:59.999Z), the last instant "
        "Spark's and Python's timestamps hold; it was stored before migration 0049, which refuses it")
