"""A read's checks of the outside world, on the driver, before any task: the database answers
and holds the view committed_records, the service answers with the credentials given, and the
database is the service's own (not behind it). Each is an OutboxSourceError of one line."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from app.client.errors import ClientError
from app.reader_relations import VIEW
from spark_jobs.common.options import PostgresDriver
from spark_jobs.common.positions import LogBounds, TopicPartition, log_bounds
from spark_jobs.common.service import PROBE_TIMEOUT_S, list_topics, service_session
from spark_jobs.errors import OutboxSourceError
from spark_jobs.reader.options import Database, SourceOptions


def check_database(database: Database, driver: PostgresDriver | str = PostgresDriver.ADBC) -> None:
    """The database answers and has the committed_records view with its batch_position column
    (migration 0020 or later): every split of the read is bounded by batch positions. `driver`:
    for PostgreSQL, the ADBC PostgreSQL driver or psycopg, the member or its value."""
    # By value: a plain "adbc" is not the member `is` compares with, and would be read as psycopg.
    driver = PostgresDriver(driver)
    probe = f"SELECT batch_position FROM {VIEW} WHERE 1 = 0"
    if database.kind == "sqlite":
        import sqlite3

        if not Path(database.target).is_file():
            raise OutboxSourceError(f"option databaseUrl: no SQLite database at {database.target}: "
                                    "name the service's OUTBOX_DATABASE_URL")
        try:
            with sqlite3.connect(f"file:{database.target}?mode=ro", uri=True, timeout=PROBE_TIMEOUT_S) as conn:
                conn.execute(probe).fetchall()
        except sqlite3.Error as e:
            if "no such table" in str(e) or "no such column" in str(e):
                raise OutboxSourceError(_not_migrated(database)) from None
            raise OutboxSourceError(f"cannot read the SQLite database {database.target}: {e}") from None
        return
    if database.kind == "postgresql" and driver is PostgresDriver.ADBC:
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
            # Asked of the catalogue, not by reading the view: since migration 0035 a plan of
            # the view of every partition holds and locks every leaf of `records`, even for no
            # row (2,013 locks and 0.2 s at 1,000 leaves).
            readable = conn.execute(
                "SELECT has_column_privilege(to_regclass(%s), 'batch_position', 'SELECT')", (VIEW,)).fetchone()
            if readable is None or readable[0] is None:
                raise OutboxSourceError(_not_migrated(database))
            if not readable[0]:
                raise OutboxSourceError(f"cannot read the database {database.display}: permission denied for view "
                                        f"{VIEW} (run outbox grant-reader for the role)")
    except (psycopg.errors.UndefinedTable, psycopg.errors.UndefinedColumn):
        raise OutboxSourceError(_not_migrated(database)) from None
    except psycopg.Error as e:
        # libpq's message spans lines (the failure, then a hint): one line here
        said = " ".join(line.strip() for line in str(e).splitlines() if line.strip()) or type(e).__name__
        raise OutboxSourceError(f"cannot read the database {database.display}: {said}") from None


def _not_migrated(database: Database) -> str:
    return (f"the database {database.display} has no committed_records view with batch_position: it is not "
            "an outbox database migrated to 0020 or later (run outbox migrate, or start outbox serve on it)")


def check_same_database(options: SourceOptions, bounds: Mapping[TopicPartition, LogBounds]) -> None:
    """The database is not behind the service: every partition of `bounds` (the service's log
    bounds of the read's topics, just described) is in it, its next offset at or past the
    service's high watermark. The positions come from the service and the records from the database;
    read from another database (an empty one named by mistake, a copy, a replica that lags), a
    job would read nothing, or too little, and commit the service's positions as consumed. A
    database that is ahead (another, busier one) is not told apart: name the service's own,
    its primary."""
    import sqlite3

    if not bounds:
        return
    try:
        stored = _stored_next_offsets(options.database, sorted({tp.topic for tp in bounds}))
    except sqlite3.Error as e:
        raise OutboxSourceError(f"cannot compare the database {options.database.display} with the service at "
                                f"{options.url}: {type(e).__name__}: {' '.join(str(e).split())}") from None
    if stored is None:
        # Every read looks its topics' ids up in topics (spark_jobs.reader.statement.positions_predicate).
        raise OutboxSourceError(f"option databaseUrl: the role of {options.database.display} may not read the topics' "
                                "names and the partitions' next offsets, which a read needs: run outbox grant-reader "
                                "for the role again")
    behind = sorted(tp for tp, b in bounds.items() if stored.get((tp.topic, tp.partition), -1) < b.high_watermark)
    if behind:
        tp = behind[0]
        have = stored.get((tp.topic, tp.partition))
        raise OutboxSourceError(
            f"option databaseUrl: {options.database.display} is not the database of the service at {options.url}: "
            f"the service's {tp} ends at {bounds[tp].high_watermark}, "
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
    """What Spark's load() checks (OutboxDataSource.schema()): the database answers and has the
    view, the service answers with these credentials, and the database is the service's own
    (compared on the read's topics that exist now; one that does not is the planning's error)."""
    check_database(options.database, options.driver)
    listed = list_topics(options.url, options.api_key, OutboxSourceError)
    bounds: dict[TopicPartition, LogBounds] = {}
    with service_session(options.url, options.api_key) as session:
        for topic in sorted(t["name"] for t in listed if options.wants_topic(t["name"])):
            try:
                described = log_bounds(session, topic, deadline_s=PROBE_TIMEOUT_S)
            except ClientError as e:
                if e.status is None:  # the service stopped answering
                    raise OutboxSourceError(f"cannot compare the database {options.database.display} with the "
                                            f"service at {options.url}: {e}") from None
                continue  # deleted meanwhile, or not the caller's to describe: the read says so
            bounds.update({TopicPartition(topic, p): b for p, b in described.items()})
    check_same_database(options, bounds)
