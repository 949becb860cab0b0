"""Upgrading to 0035 (PostgreSQL's `records` partitioned by log partition, a leaf per topic and
partition) and back, with a log in place: every record lands in its partition's leaf, in offset
order, columns as they were; the committed_records view reads the same rows and keeps its
readers; a deleted topic's records not purged yet get leaves too; the publishing function plans
each call for its own partition; new log partitions get their leaves. On SQLite the revision
changes nothing."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
import uuid

import psycopg
import pytest
from alembic import command
from sqlalchemy import text

from tests.migration_helpers import at_revision, attached_record_leaves, connected, topic_t, write

# Written at 0034: topic 1 "t" with two partitions (a plain batch, a committed transactional
# batch and its COMMIT marker, an open one not visible; a message id), and topic 2, deleted,
# whose records the cleaner has not purged (no `partitions` rows, a deleted_topics row).
_SEED = [
    topic_t(2),
    'INSERT INTO partitions (topic_id, "partition", next_offset, log_start_offset) VALUES (1, 0, 6, 0), (1, 1, 3, 0)',
    "INSERT INTO deleted_topics (topic_id, name, deleted_ms) VALUES (2, 'gone', 1)",
    'INSERT INTO records (topic_id, "partition", "offset", timestamp_ms, key, value, headers, control_type, '
    "key_bytes, value_bytes) VALUES "
    "(1, 0, 0, 10, 'k0', '0', NULL, NULL, NULL, NULL), (1, 0, 1, 11, NULL, '1', '[[\"h\",\"v\"]]', NULL, NULL, NULL), "
    "(1, 0, 2, 12, NULL, '2', NULL, NULL, NULL, NULL), (1, 0, 3, 13, NULL, NULL, NULL, 'COMMIT', NULL, NULL), "
    "(1, 0, 4, 14, NULL, '4', NULL, NULL, NULL, NULL), (1, 0, 5, 15, NULL, '5', NULL, NULL, NULL, NULL), "
    "(1, 1, 0, 20, NULL, NULL, NULL, NULL, '\\x00ff', '\\x0102'), (1, 1, 1, 21, NULL, '1', NULL, NULL, NULL, NULL), "
    "(1, 1, 2, 22, NULL, '2', NULL, NULL, NULL, NULL), "
    "(2, 0, 0, 30, NULL, 'gone', NULL, NULL, NULL, NULL), (2, 3, 0, 31, NULL, 'gone', NULL, NULL, NULL, NULL)",
    'INSERT INTO record_batches (topic_id, "partition", base_offset, record_count, producer_id, txn_id, '
    "control_type, state, commit_position) VALUES "
    "(1, 0, 0, 2, NULL, NULL, NULL, 'committed', 1), (1, 0, 2, 1, 7, 70, NULL, 'committed', 3), "
    "(1, 0, 3, 1, 7, 70, 'COMMIT', NULL, NULL), (1, 0, 4, 2, 8, 80, NULL, 'open', NULL), "
    "(1, 1, 0, 3, NULL, NULL, NULL, 'committed', 2), (2, 0, 0, 1, NULL, NULL, NULL, 'committed', 0), "
    "(2, 3, 0, 1, NULL, NULL, NULL, 'committed', 0)",
    'INSERT INTO record_message_ids (topic_id, message_id, "partition", "offset") VALUES (1, \'m\', 1, 1)',
]
_LEAVES = {"records_1_0", "records_1_1", "records_2_0", "records_2_3"}


def _records(conn) -> list[tuple]:  # type: ignore[no-untyped-def]
    return [tuple(r) for r in conn.execute(text(
        'SELECT * FROM records ORDER BY topic_id, "partition", "offset"'))]


def _view(conn) -> list[tuple]:  # type: ignore[no-untyped-def]
    return [tuple(r) for r in conn.execute(text(
        'SELECT topic, "partition", "offset", commit_position, value FROM committed_records '
        'ORDER BY topic, "partition", "offset"'))]


def _leaves(conn) -> dict[str, list[int]]:  # type: ignore[no-untyped-def]
    """Each leaf of `records` and the offsets it holds, in its heap's order."""
    names = attached_record_leaves(conn)
    return {name: list(conn.execute(text(f'SELECT "offset" FROM "{name}" ORDER BY ctid')).scalars())
            for name in names}


def _partitioned(conn) -> bool:  # type: ignore[no-untyped-def]
    return conn.execute(text("SELECT relkind = 'p' FROM pg_class WHERE oid = 'records'::regclass")).scalar_one()


def _settings(conn, function: str) -> list[str]:  # type: ignore[no-untyped-def]
    return conn.execute(text(f"SELECT proconfig FROM pg_proc WHERE oid = '{function}'::regproc")).scalar_one()


def _reads_view(url: str, role: str, view: str = "committed_records") -> int:
    with psycopg.connect(url.replace("postgresql+psycopg", "postgresql")) as conn:
        conn.execute(f'SET ROLE "{role}"')
        return conn.execute(f"SELECT count(*) FROM {view}").fetchone()[0]


def _partition_views(conn) -> dict[str, list[tuple]]:  # type: ignore[no-untyped-def]
    """Each log partition's view and what it reads, as _view reads it."""
    names = conn.execute(text("SELECT table_name FROM information_schema.views WHERE table_schema = 'committed_records' "
                              "ORDER BY table_name")).scalars().all()
    return {name: [tuple(r) for r in conn.execute(text(
        f'SELECT topic, "partition", "offset", commit_position, value FROM committed_records.{name} '
        'ORDER BY "offset"'))] for name in names}


def _append(url: str) -> tuple[bool, str]:
    """outbox.append of one record to t/1, committed; whether it was appended, and the leaf
    that holds t/1's record at offset 3."""
    with psycopg.connect(url.replace("postgresql+psycopg", "postgresql")) as conn:
        appended = conn.execute("SELECT outbox.append('t', 1, NULL, '9'::json, NULL, 'n')").fetchone()
        conn.commit()
        leaf = conn.execute('SELECT tableoid::regclass::text FROM records WHERE topic_id = 1 AND "partition" = 1 '
                            'AND "offset" = 3').fetchone()
    assert appended is not None and leaf is not None
    return bool(appended[0]), leaf[0]


@pytest.mark.parametrize("empty_url", ["postgresql"], indirect=True)
def test_0035_moves_every_record_into_its_partitions_leaf_and_the_downgrade_back(empty_url: str) -> None:
    config = at_revision(empty_url, "0034", *_SEED)
    reader = f"reader_{uuid.uuid4().hex[:8]}"
    with connected(empty_url) as conn, conn.begin():
        conn.execute(text(f'CREATE ROLE "{reader}"'))
        conn.execute(text(f'GRANT SELECT ON committed_records TO "{reader}"'))
    try:
        with connected(empty_url) as conn:
            records_before, view_before = _records(conn), _view(conn)
        assert [row[2] for row in view_before] == [0, 1, 2, 0, 1, 2]  # not the open batch, not a deleted topic's
        assert _reads_view(empty_url, reader) == 6

        command.upgrade(config, "0035")
        with connected(empty_url) as conn:
            assert _partitioned(conn)
            assert _leaves(conn) == {"records_1_0": [0, 1, 2, 3, 4, 5], "records_1_1": [0, 1, 2],
                                     "records_2_0": [0], "records_2_3": [0]}
            assert _records(conn) == records_before
            assert _view(conn) == view_before
            # Each log partition's view reads what the view of every partition reads of it (a
            # deleted topic's partition, whose `partitions` row is gone, has none).
            assert _partition_views(conn) == {
                "partition_1_0": [row for row in view_before if row[:2] == ("t", 0)],
                "partition_1_1": [row for row in view_before if row[:2] == ("t", 1)]}
            assert _settings(conn, "outbox.append") == ["search_path=pg_catalog, public, pg_temp"]
            assert "plan_cache_mode=force_custom_plan" in _settings(conn, "outbox.publish_pending")
        assert _reads_view(empty_url, reader) == 6
        # The view's readers read each partition's view, and those of partitions created later.
        assert _reads_view(empty_url, reader, "committed_records.partition_1_0") == 3
        # A record appended in an application's transaction lands in its partition's leaf.
        assert _append(empty_url) == (True, "records_1_1")
        with connected(empty_url) as conn, conn.begin():
            # A new log partition gets its leaf with its `partitions` row.
            conn.execute(text('INSERT INTO partitions (topic_id, "partition", next_offset, log_start_offset) '
                              "VALUES (1, 2, 0, 0)"))
            conn.execute(text("UPDATE topics SET partition_count = 3 WHERE topic_id = 1"))
        with connected(empty_url) as conn:
            assert set(_leaves(conn)) == _LEAVES | {"records_1_2"}
            assert set(_partition_views(conn)) == {"partition_1_0", "partition_1_1", "partition_1_2"}
            records_after = _records(conn)
            view_after = _view(conn)
        assert _reads_view(empty_url, reader, "committed_records.partition_1_2") == 0

        command.downgrade(config, "0034")
        with connected(empty_url) as conn:
            assert not _partitioned(conn)
            assert _records(conn) == records_after
            assert _view(conn) == view_after
            assert _settings(conn, "outbox.append") == ["search_path=pg_catalog, public, pg_temp"]
            assert conn.execute(text("SELECT to_regproc('outbox.create_record_leaf')")).scalar_one() is None
            assert conn.execute(text("SELECT count(*) FROM pg_trigger WHERE tgname = 'attach_record_leaf'")).scalar_one() == 0
            assert conn.execute(text("SELECT count(*) FROM pg_class WHERE relname ~ '^records_[0-9]'")).scalar_one() == 0
            assert conn.execute(text("SELECT to_regnamespace('committed_records')")).scalar_one() is None
        assert _reads_view(empty_url, reader) == len(view_after)

        command.upgrade(config, "0035")
        with connected(empty_url) as conn:
            assert set(_leaves(conn)) == _LEAVES | {"records_1_2"}
            assert _records(conn) == records_after
            assert set(_partition_views(conn)) == {"partition_1_0", "partition_1_1", "partition_1_2"}
        assert _reads_view(empty_url, reader, "committed_records.partition_1_1") == 4  # with the append above
    finally:
        with connected(empty_url) as conn, conn.begin():
            conn.execute(text(f'DROP OWNED BY "{reader}"'))
            conn.execute(text(f'DROP ROLE "{reader}"'))


@pytest.mark.parametrize("empty_url", ["sqlite"], indirect=True)
def test_0035_changes_nothing_on_sqlite(empty_url: str) -> None:
    config = at_revision(empty_url, "0034", *_SEED)
    with connected(empty_url) as conn:
        records_before, view_before = _records(conn), _view(conn)
        schema_before = conn.execute(text("SELECT sql FROM sqlite_master ORDER BY name")).scalars().all()

    command.upgrade(config, "0035")
    with connected(empty_url) as conn:
        assert (_records(conn), _view(conn)) == (records_before, view_before)
        assert conn.execute(text("SELECT sql FROM sqlite_master ORDER BY name")).scalars().all() == schema_before


# --- online: the upgrade while the log is written, cleaned and extended ---------------------

_PARTITIONS = 4
_SEEDED = 45_000  # offsets per partition at 0034: a few backfill chunks each


def _writer(url: str, stop: threading.Event, errors: list[BaseException]) -> None:
    """Appends as a process of revision 0034 appends (the partition row locked for its
    offsets, then the records and their batch row), ten records a transaction, round the
    partitions, until told to stop; then once more to each partition."""
    try:
        with psycopg.connect(url.replace("postgresql+psycopg", "postgresql")) as conn:
            n = 0
            while not stop.is_set() or n % _PARTITIONS:
                p = n % _PARTITIONS
                with conn.transaction():
                    base = conn.execute('SELECT next_offset FROM partitions WHERE topic_id = 1 AND "partition" = %s '
                                        "FOR UPDATE", (p,)).fetchone()[0]
                    conn.execute('INSERT INTO records (topic_id, "partition", "offset", timestamp_ms, value) '
                                 "SELECT 1, %s, o, 1, '1' FROM generate_series(%s, %s) o", (p, base, base + 9))
                    conn.execute('INSERT INTO record_batches (topic_id, "partition", base_offset, record_count, state, '
                                 "commit_position) VALUES (1, %s, %s, 10, 'committed', %s)", (p, base, base + 9))
                    conn.execute('UPDATE partitions SET next_offset = %s WHERE topic_id = 1 AND "partition" = %s',
                                 (base + 10, p))
                n += 1
    except BaseException as e:  # noqa: BLE001 - reported by the test
        errors.append(e)


def _cleaner(url: str, stop: threading.Event, errors: list[BaseException]) -> None:
    """Deletes each partition's oldest records as the cleaner deletes a prefix below a moved
    log start, 200 offsets at a time (never past the log end), round the partitions, until told
    to stop."""
    try:
        with psycopg.connect(url.replace("postgresql+psycopg", "postgresql")) as conn:
            n = 0
            while not stop.is_set():
                p = n % _PARTITIONS
                with conn.transaction():
                    start, end = conn.execute('SELECT log_start_offset, next_offset FROM partitions '
                                              'WHERE topic_id = 1 AND "partition" = %s', (p,)).fetchone()
                    bound = min(start + 200, end)
                    conn.execute('DELETE FROM records WHERE topic_id = 1 AND "partition" = %s AND "offset" < %s',
                                 (p, bound))
                    conn.execute('UPDATE partitions SET log_start_offset = %s WHERE topic_id = 1 AND "partition" = %s',
                                 (bound, p))
                n += 1
                time.sleep(0.002)
    except BaseException as e:  # noqa: BLE001 - reported by the test
        errors.append(e)


def _offsets(conn, partition: int) -> list[int]:  # type: ignore[no-untyped-def]
    return conn.execute(text('SELECT "offset" FROM records WHERE topic_id = 1 AND "partition" = :p ORDER BY "offset"'),
                        {"p": partition}).scalars().all()


@pytest.mark.parametrize("empty_url", ["postgresql"], indirect=True)
def test_0035_runs_while_records_are_appended_and_deleted_and_keeps_exactly_the_log(empty_url: str) -> None:
    """An appender and a cleaner of revision 0034 run through the whole upgrade, and a topic is
    created during its backfill: afterwards each partition holds exactly its offsets from its
    log start to its log end, every one appended and none deleted (a row copied after its
    deletion, or an append missed by the copy, would show), and the new topic has its leaf."""
    config = at_revision(
        empty_url, "0034", topic_t(_PARTITIONS),
        'INSERT INTO partitions (topic_id, "partition", next_offset, log_start_offset) '
        f"SELECT 1, p, {_SEEDED}, 0 FROM generate_series(0, {_PARTITIONS - 1}) p",
        'INSERT INTO records (topic_id, "partition", "offset", timestamp_ms, value) '
        f"SELECT 1, p, o, 1, '0' FROM generate_series(0, {_PARTITIONS - 1}) p, generate_series(0, {_SEEDED - 1}) o")
    stop, errors = threading.Event(), []
    workers = [threading.Thread(target=_writer, args=(empty_url, stop, errors)),
               threading.Thread(target=_cleaner, args=(empty_url, stop, errors))]
    for worker in workers:
        worker.start()
    try:
        # A topic created while the upgrade runs: its partition's leaf is made for the new table.
        creator = threading.Timer(0.5, write, args=(empty_url,
            "INSERT INTO topics (topic_id, name, partition_count, cleanup_policy, retention_ms, check_expected_offsets, "
            "created_ms) VALUES (2, 'u', 1, 'delete', -1, FALSE, 1)",
            'INSERT INTO partitions (topic_id, "partition", next_offset, log_start_offset) VALUES (2, 0, 1, 0)',
            'INSERT INTO records (topic_id, "partition", "offset", timestamp_ms, value) VALUES (2, 0, 0, 1, \'u\')'))
        creator.start()
        command.upgrade(config, "0035")
        creator.join()
    finally:
        stop.set()
        for worker in workers:
            worker.join(60)
    assert errors == []

    with connected(empty_url) as conn:
        assert _partitioned(conn)
        ends = dict(conn.execute(text('SELECT "partition", next_offset FROM partitions WHERE topic_id = 1')).all())
        starts = dict(conn.execute(text('SELECT "partition", log_start_offset FROM partitions WHERE topic_id = 1')).all())
        assert all(ends[p] > _SEEDED for p in range(_PARTITIONS)), ends  # appended during the upgrade
        assert any(starts[p] > 0 for p in range(_PARTITIONS)), starts  # and cleaned
        for p in range(_PARTITIONS):
            assert _offsets(conn, p) == list(range(starts[p], ends[p])), p
        assert set(_leaves(conn)) == {f"records_1_{p}" for p in range(_PARTITIONS)} | {"records_2_0"}
        assert conn.execute(text("SELECT value FROM records WHERE topic_id = 2")).scalars().all() == ["u"]
        assert conn.execute(text("SELECT to_regclass('records_next'), to_regproc('outbox.mirror_records')")).one() == (None, None)


@pytest.mark.parametrize("empty_url", ["postgresql"], indirect=True)
def test_0035_killed_during_its_backfill_goes_on_when_run_again(empty_url: str) -> None:
    """The upgrading process is killed (SIGKILL) once the backfill has committed a range: the
    database is still at 0034, with the table being filled and its triggers in place; an
    append meanwhile reaches both; the upgrade run again finishes, with every row exactly once."""
    config = at_revision(
        empty_url, "0034", topic_t(_PARTITIONS),
        'INSERT INTO partitions (topic_id, "partition", next_offset, log_start_offset) '
        f"SELECT 1, p, {_SEEDED}, 0 FROM generate_series(0, {_PARTITIONS - 1}) p",
        'INSERT INTO records (topic_id, "partition", "offset", timestamp_ms, value) '
        f"SELECT 1, p, o, 1, '0' FROM generate_series(0, {_PARTITIONS - 1}) p, generate_series(0, {_SEEDED - 1}) o")
    upgrading = subprocess.Popen([sys.executable, "-c", "import sys; from app.storage import migrate; "
                                  "migrate.upgrade(sys.argv[1], '0035')", empty_url])
    try:
        with psycopg.connect(empty_url.replace("postgresql+psycopg", "postgresql"), autocommit=True) as watcher:
            deadline = time.monotonic() + 60
            while not (watcher.execute("SELECT to_regclass('records_next') IS NOT NULL").fetchone()[0]
                       and watcher.execute("SELECT EXISTS (SELECT FROM records_next)").fetchone()[0]):
                assert upgrading.poll() is None and time.monotonic() < deadline, "the backfill never began"
                time.sleep(0.01)
    finally:
        upgrading.send_signal(signal.SIGKILL)
        upgrading.wait()
    with connected(empty_url) as conn:
        assert conn.execute(text("SELECT version_num FROM alembic_version")).scalar_one() == "0034"
        assert not _partitioned(conn)
        copied = conn.execute(text("SELECT count(*) FROM records_next")).scalar_one()
        assert 0 < copied < _PARTITIONS * _SEEDED
    write(empty_url, 'INSERT INTO records (topic_id, "partition", "offset", timestamp_ms, value) '
                     f"VALUES (1, 3, {_SEEDED}, 1, 'after')",
          f'UPDATE partitions SET next_offset = {_SEEDED + 1} WHERE topic_id = 1 AND "partition" = 3')

    command.upgrade(config, "0035")
    with connected(empty_url) as conn:
        assert _partitioned(conn)
        for p in range(_PARTITIONS):
            assert _offsets(conn, p) == list(range(_SEEDED + (p == 3))), p
        assert conn.execute(text('SELECT value FROM records WHERE "offset" = :o'), {"o": _SEEDED}).scalar_one() == "after"


@pytest.mark.parametrize("empty_url", ["postgresql"], indirect=True)
def test_0035_waits_for_a_reader_whose_snapshot_is_older_than_its_copy_before_the_swap(empty_url: str) -> None:
    """A read_committed Fetch in REPEATABLE READ reads `topics` first, which the swap's lock does
    not wait for: had the swap gone ahead, its later read of `records` would find the new table
    without the rows copied after its snapshot, and move past committed records. The upgrade
    waits for it; the reader sees every record both before and after."""
    config = at_revision(empty_url, "0034", *_SEED)
    failed: list[BaseException] = []

    def upgrade() -> None:
        try:
            command.upgrade(config, "0035")
        except BaseException as e:  # noqa: BLE001 - said by the test's thread
            failed.append(e)

    with psycopg.connect(empty_url.replace("postgresql+psycopg", "postgresql")) as reader:
        reader.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        assert reader.execute("SELECT name FROM topics WHERE topic_id = 1").fetchone() == ("t",)
        upgrading = threading.Thread(target=upgrade)
        upgrading.start()
        try:
            with psycopg.connect(empty_url.replace("postgresql+psycopg", "postgresql"), autocommit=True) as watcher:
                deadline = time.monotonic() + 30
                while not watcher.execute("SELECT to_regclass('records_next') IS NOT NULL").fetchone()[0]:
                    assert time.monotonic() < deadline, "the upgrade never began"
                    time.sleep(0.01)
            upgrading.join(2)
            assert upgrading.is_alive() and not failed, failed
            assert reader.execute("SELECT count(*) FROM records WHERE topic_id = 1").fetchone() == (9,)
        finally:
            reader.execute("COMMIT")
            upgrading.join(60)
    assert not upgrading.is_alive() and not failed, failed
    with connected(empty_url) as conn:
        assert _partitioned(conn)
        assert conn.execute(text("SELECT count(*) FROM records WHERE topic_id = 1")).scalar_one() == 9


@pytest.mark.parametrize("empty_url", ["postgresql"], indirect=True)
def test_the_downgrade_drops_a_leaf_a_purge_left_detached(empty_url: str) -> None:
    config = at_revision(empty_url, "0034", *_SEED)
    command.upgrade(config, "0035")
    write(empty_url, "ALTER TABLE records DETACH PARTITION records_2_0")  # a purge stopped before its DROP
    command.downgrade(config, "0034")
    with connected(empty_url) as conn:
        assert conn.execute(text("SELECT count(*) FROM pg_class WHERE relname ~ '^records_[0-9]'")).scalar_one() == 0
        assert conn.execute(text('SELECT DISTINCT topic_id, "partition" FROM records ORDER BY 1, 2')).all() == [
            (1, 0), (1, 1), (2, 3)]


@pytest.mark.parametrize("empty_url", ["postgresql"], indirect=True)
def test_0035_sees_the_snapshot_of_another_roles_reader_when_it_is_no_superuser(empty_url: str) -> None:
    """A migration run as the service's owner role, which PostgreSQL does not let see another
    role's `backend_type` or `xact_start`, still finds that role's REPEATABLE READ reader among
    the transactions it waits for."""
    import importlib.util
    from pathlib import Path

    path = next((Path(__file__).resolve().parents[2] / "migrations" / "versions").glob("0035_*.py"))
    spec = importlib.util.spec_from_file_location("migration_0035", path)
    migration = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(migration)  # type: ignore[union-attr]
    at_revision(empty_url, "0034", *_SEED)
    suffix = uuid.uuid4().hex[:8]
    migrator, reader = f"mig_{suffix}", f"rdr_{suffix}"
    dsn = empty_url.replace("postgresql+psycopg", "postgresql")
    write(empty_url, f'CREATE ROLE "{migrator}"', f'CREATE ROLE "{reader}" LOGIN',
          f'GRANT SELECT ON topics TO "{reader}"')
    try:
        with psycopg.connect(dsn, user=reader) as reading, psycopg.connect(dsn, autocommit=True) as migrating:
            reading.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
            reading.execute("SELECT name FROM topics")
            migrating.execute(f'SET ROLE "{migrator}"')
            assert migrating.execute("SELECT backend_type FROM pg_stat_activity WHERE pid = %s",
                                     (reading.info.backend_pid,)).fetchone() == (None,)  # hidden from it
            holders = [pid for _, pid, _ in migrating.execute(migration._SNAPSHOT_HOLDERS).fetchall()]
            assert reading.info.backend_pid in holders
            reading.rollback()
            assert reading.info.backend_pid not in [
                pid for _, pid, _ in migrating.execute(migration._SNAPSHOT_HOLDERS).fetchall()]
    finally:
        write(empty_url, f'REVOKE ALL ON topics FROM "{reader}"', f'DROP ROLE "{reader}"', f'DROP ROLE "{migrator}"')


@pytest.mark.parametrize("empty_url", ["postgresql"], indirect=True)
def test_0035_keeps_a_grant_of_the_view_to_public_and_gives_it_each_partitions_view(empty_url: str) -> None:
    config = at_revision(empty_url, "0034", *_SEED, "GRANT SELECT ON committed_records TO PUBLIC")
    anyone = f"anyone_{uuid.uuid4().hex[:8]}"
    write(empty_url, f'CREATE ROLE "{anyone}"')
    try:
        command.upgrade(config, "0035")
        assert _reads_view(empty_url, anyone) == 6
        assert _reads_view(empty_url, anyone, "committed_records.partition_1_0") == 3
    finally:
        write(empty_url, "REVOKE SELECT ON committed_records FROM PUBLIC", f'DROP ROLE "{anyone}"')
