"""PostgreSQL's `records` is partitioned by log partition (migration 0035): each log partition's
records live in a leaf table of their own, records_<topic_id>_<partition>, which comes with the
partition's creation (app/storage/sql/record_leaves.postgresql.sql) and goes with its topic's
purge (app.storage.record_leaves.drop_record_leaves); every statement the service runs is planned for
its own partition, so that it reads and locks that leaf only."""

from __future__ import annotations

import threading

import psycopg
import pytest
from sqlalchemy import text

from app import in_database
from app.in_database import OutboxRecord
from app.reader_relations import partition_view
from app.services.log_cleaner import LogCleaner
from app.storage import cleaning, read_committed
from app.storage.tables import record_leaf_pattern
from app.storage.turns import Turn
from tests.helpers import batch, begin, create_topic, ident, init_producer, send
from tests.migration_helpers import attached_record_leaves, connected

pytestmark = pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)


def leaves(db_url: str) -> set[str]:
    with connected(db_url) as conn:
        return set(attached_record_leaves(conn))


def leaf_tables(db_url: str) -> set[str]:
    """Every table named as a leaf, attached or not."""
    with connected(db_url) as conn:
        return set(conn.execute(text("SELECT relname FROM pg_class WHERE relname ~ :leaf AND relkind = 'r'"),
                                {"leaf": record_leaf_pattern()}).scalars())


def topic_id(db_url: str, name: str) -> int:
    with connected(db_url) as conn:
        return conn.execute(text("SELECT topic_id FROM topics WHERE name = :n"), {"n": name}).scalar_one()


def produce(client, topic: str, partition: int, values: list[int]) -> None:  # type: ignore[no-untyped-def]
    r = client.post("/v1/records", json={"batches": [{"topic": topic, "partition": partition,
                                                      "records": [{"value": v} for v in values]}]})
    assert r.status_code == 200, r.text


def holders(db_url: str) -> dict[tuple[int, int], set[str]]:
    """The leaf each partition's records are in."""
    out: dict[tuple[int, int], set[str]] = {}
    with connected(db_url) as conn:
        for t, p, leaf in conn.execute(text('SELECT topic_id, "partition", tableoid::regclass::text FROM records')):
            out.setdefault((t, p), set()).add(leaf)
    return out


def test_a_topics_partitions_each_get_a_leaf_that_holds_their_records(client, db_url) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "a", 3)
    create_topic(client, "b", 1)
    a, b = topic_id(db_url, "a"), topic_id(db_url, "b")
    for p in range(3):
        produce(client, "a", p, [p, p])
    produce(client, "b", 0, [9])

    assert {f"records_{a}_{p}" for p in range(3)} | {f"records_{b}_0"} <= leaves(db_url)
    assert holders(db_url) == {(a, 0): {f"records_{a}_0"}, (a, 1): {f"records_{a}_1"},
                               (a, 2): {f"records_{a}_2"}, (b, 0): {f"records_{b}_0"}}


def test_create_partitions_gives_the_new_partitions_their_leaves(client, db_url) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "a", 1)
    r = client.post("/v1/topics/a/partitions", json={"partition_count": 3})
    assert r.status_code == 200, r.text
    produce(client, "a", 2, [1])

    a = topic_id(db_url, "a")
    assert {f"records_{a}_0", f"records_{a}_1", f"records_{a}_2"} <= leaves(db_url)
    assert holders(db_url) == {(a, 2): {f"records_{a}_2"}}


def test_a_topic_whose_creation_rolls_back_leaves_no_leaf(db_url) -> None:  # type: ignore[no-untyped-def]
    before = leaf_tables(db_url)
    with connected(db_url) as conn:
        with conn.begin() as tx:
            conn.execute(text("INSERT INTO topics (topic_id, name, partition_count, cleanup_policy, retention_ms, "
                              "check_expected_offsets, created_ms) VALUES (900, 'x', 2, 'delete', -1, FALSE, 1)"))
            conn.execute(text('INSERT INTO partitions (topic_id, "partition", next_offset, log_start_offset) '
                              "VALUES (900, 0, 0, 0), (900, 1, 0, 0)"))
            assert {"records_900_0", "records_900_1"} <= {
                name for name in conn.execute(text("SELECT relname FROM pg_class WHERE relname LIKE 'records_900_%'"))
                .scalars()}
            tx.rollback()
    assert leaf_tables(db_url) == before


def test_a_leaf_is_taken_over_only_while_it_is_an_empty_leaf_of_records(client, db_url) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "full", 1)
    create_topic(client, "empty", 1)
    produce(client, "full", 0, [1])
    full, empty = topic_id(db_url, "full"), topic_id(db_url, "empty")
    with connected(db_url) as conn:
        # An empty leaf of records: the test suite's reset starts topic ids again and reuses it.
        conn.execute(text("SELECT outbox.create_record_leaf('records', :t, 0)"), {"t": empty})
        conn.rollback()
        with pytest.raises(Exception, match=f"the leaf records_{full}_0 of records holds records"):
            conn.execute(text("SELECT outbox.create_record_leaf('records', :t, 0)"), {"t": full})
        conn.rollback()
        conn.execute(text("CREATE TABLE records_901_0 (x integer)"))
        with pytest.raises(Exception, match="a table records_901_0 exists and is not a leaf of records:"):
            conn.execute(text("SELECT outbox.create_record_leaf('records', 901, 0)"))
        conn.rollback()
    assert holders(db_url) == {(full, 0): {f"records_{full}_0"}}


def test_a_deleted_topics_purge_drops_its_leaves_with_their_records_ids_and_batches(  # type: ignore[no-untyped-def]
        client, services, clock, db_url) -> None:
    create_topic(client, "gone", 2)
    create_topic(client, "kept", 1)
    gone, kept = topic_id(db_url, "gone"), topic_id(db_url, "kept")
    produce(client, "gone", 0, [1, 2, 3])
    produce(client, "kept", 0, [4])
    with connected(db_url) as conn:
        in_database.append(conn, "gone", 1, [OutboxRecord(5, message_id="m")])
        in_database.append(conn, "kept", 0, [OutboxRecord(6, message_id="m")])
        conn.commit()
    assert client.delete("/v1/topics/gone").status_code == 204

    result = LogCleaner(services.db, services.settings, clock).run_once()

    assert result.topics_purged == 4
    assert {f"records_{gone}_0", f"records_{gone}_1"}.isdisjoint(leaf_tables(db_url))
    assert f"records_{kept}_0" in leaves(db_url)
    with connected(db_url) as conn:
        assert conn.execute(text("SELECT DISTINCT topic_id FROM record_batches")).scalars().all() == [kept]
        assert conn.execute(text("SELECT topic_id, message_id FROM record_message_ids")).all() == [(kept, "m")]
        assert conn.execute(text("SELECT count(*) FROM deleted_topics")).scalar_one() == 0
    assert holders(db_url) == {(kept, 0): {f"records_{kept}_0"}}


def test_a_deleted_topics_batch_rows_are_forgotten_a_chunk_at_a_time(  # type: ignore[no-untyped-def]
        client, services, clock, db_url, monkeypatch) -> None:
    """Its leaves go whole, but its batch rows go as every other chunk of the cleaner does: a
    topic's rows in one transaction would hold it as long as the topic is large."""
    create_topic(client, "gone", 1)
    for v in range(7):
        produce(client, "gone", 0, [v])
    assert client.delete("/v1/topics/gone").status_code == 204
    left_before_each_chunk = []
    forget = cleaning.forget_deleted_topic

    def counted(conn, topic_id, limit):  # type: ignore[no-untyped-def]
        left_before_each_chunk.append(conn.execute(
            text("SELECT count(*) FROM record_batches WHERE topic_id = :t"), {"t": topic_id}).scalar_one())
        return forget(conn, topic_id, limit)

    monkeypatch.setattr(cleaning, "forget_deleted_topic", counted)

    result = LogCleaner(services.db, services.settings, clock, chunk_rows=3).run_once()

    assert result.topics_purged == 7
    assert left_before_each_chunk == [7, 4, 1, 0]
    with connected(db_url) as conn:
        assert conn.execute(text("SELECT count(*) FROM deleted_topics")).scalar_one() == 0


def test_a_purge_waits_its_turn_while_another_process_purges(client, services, clock, db_url) -> None:  # type: ignore[no-untyped-def]
    # Two serve processes' cleaners once detached the same leaf at once: the second failed its pass.
    create_topic(client, "gone", 1)
    gone = topic_id(db_url, "gone")
    produce(client, "gone", 0, [1, 2])
    assert client.delete("/v1/topics/gone").status_code == 204
    cleaner = LogCleaner(services.db, services.settings, clock)
    with connected(db_url) as other:
        other.execute(text("SELECT pg_advisory_lock(:key)"), {"key": int(Turn.PURGE)})
        assert cleaner.run_once().topics_purged == 0
        assert f"records_{gone}_0" in leaves(db_url)
        other.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": int(Turn.PURGE)})
    assert cleaner.run_once().topics_purged == 2
    assert f"records_{gone}_0" not in leaf_tables(db_url)


def test_the_purge_finishes_a_detach_left_halfway_and_drops_a_leaf_left_detached(  # type: ignore[no-untyped-def]
        client, services, clock, db_url) -> None:
    create_topic(client, "gone", 2)
    gone = topic_id(db_url, "gone")
    produce(client, "gone", 0, [1])
    produce(client, "gone", 1, [2, 3])
    assert client.delete("/v1/topics/gone").status_code == 204
    dsn = db_url.replace("postgresql+psycopg", "postgresql")
    with psycopg.connect(dsn, autocommit=True) as admin:
        # Left detached: a purge stopped between the DETACH and the DROP.
        admin.execute(f"ALTER TABLE records DETACH PARTITION records_{gone}_0")
        # Left "detach pending": DETACH … CONCURRENTLY interrupted while it waits for a reader
        # that holds a snapshot of `records`.
        with psycopg.connect(dsn) as reader:
            reader.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
            reader.execute("SELECT count(*) FROM records")
            admin.execute("SET statement_timeout = '500ms'")
            with pytest.raises(psycopg.errors.QueryCanceled):
                admin.execute(f"ALTER TABLE records DETACH PARTITION records_{gone}_1 CONCURRENTLY")
            admin.execute("RESET statement_timeout")
            reader.rollback()
        assert admin.execute("SELECT inhdetachpending FROM pg_inherits "
                             f"WHERE inhrelid = 'records_{gone}_1'::regclass").fetchone() == (True,)

    assert LogCleaner(services.db, services.settings, clock).run_once().topics_purged == 3
    assert {f"records_{gone}_0", f"records_{gone}_1"}.isdisjoint(leaf_tables(db_url))


def test_a_statement_run_again_and_again_locks_only_its_own_partitions_leaf(client, services, db_url) -> None:  # type: ignore[no-untyped-def]
    """psycopg prepares a statement once it has run it five times, and PostgreSQL may then plan
    it once for any parameters: a generic plan locks every leaf of `records` before it runs. The
    service's connections plan each execution for its own parameters."""
    for name in ("a", "b", "c"):
        create_topic(client, name, 2)
    a = topic_id(db_url, "a")
    statement = text('SELECT count(*) FROM records WHERE topic_id = :t AND "partition" = :p AND "offset" >= :o')
    with services.db.engine.connect() as conn:
        for _ in range(12):
            conn.execute(statement, {"t": a, "p": 1, "o": 0}).scalar_one()
        locked = set(conn.execute(text(
            "SELECT c.relname FROM pg_locks l JOIN pg_class c ON c.oid = l.relation "
            "WHERE l.pid = pg_backend_pid() AND c.relname ~ '^records_[0-9]+_[0-9]+$'")).scalars())
        conn.rollback()
    assert locked == {f"records_{a}_1"}


def test_a_statement_that_does_not_name_records_is_still_prepared(client, services, db_url) -> None:  # type: ignore[no-untyped-def]
    """Only statements on `records` give up psycopg's prepared statements: every other one keeps
    its plan across executions, as a Commit's statements on `partitions` and `transactions`
    need to stay cheap. A statement on `records` run as often is never prepared."""
    create_topic(client, "a", 2)
    a = topic_id(db_url, "a")
    on_partitions = text('SELECT next_offset FROM partitions WHERE topic_id = :t AND "partition" = :p')
    on_records = text('SELECT count(*) FROM records WHERE topic_id = :t AND "partition" = :p')
    with services.db.engine.connect() as conn:
        for _ in range(12):
            conn.execute(on_partitions, {"t": a, "p": 1})
            conn.execute(on_records, {"t": a, "p": 1})
        prepared = list(conn.execute(text("SELECT statement FROM pg_prepared_statements")).scalars())
        conn.rollback()
    assert [s for s in prepared if "FROM partitions" in s] != []
    assert [s for s in prepared if "FROM records" in s] == []


def test_a_detach_left_halfway_for_one_topic_does_not_stop_another_topics_purge(  # type: ignore[no-untyped-def]
        client, services, clock, db_url) -> None:
    """PostgreSQL allows one detach pending per table: the purge finishes it first, whichever
    topic it belongs to, rather than failing every pass on the lower topic it tries first."""
    create_topic(client, "first", 1)
    create_topic(client, "second", 1)
    first, second = topic_id(db_url, "first"), topic_id(db_url, "second")
    produce(client, "first", 0, [1])
    produce(client, "second", 0, [2, 3])
    assert client.delete("/v1/topics/second").status_code == 204
    dsn = db_url.replace("postgresql+psycopg", "postgresql")
    with psycopg.connect(dsn, autocommit=True) as admin, psycopg.connect(dsn) as reader:
        reader.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        reader.execute("SELECT count(*) FROM records")
        admin.execute("SET statement_timeout = '500ms'")
        with pytest.raises(psycopg.errors.QueryCanceled):
            admin.execute(f"ALTER TABLE records DETACH PARTITION records_{second}_0 CONCURRENTLY")
        reader.rollback()
    assert client.delete("/v1/topics/first").status_code == 204  # the lower id, purged first

    assert LogCleaner(services.db, services.settings, clock).run_once().topics_purged == 3
    assert {f"records_{first}_0", f"records_{second}_0"}.isdisjoint(leaf_tables(db_url))


def test_a_purge_gives_up_a_detach_a_long_reader_holds_so_that_topics_are_still_created(  # type: ignore[no-untyped-def]
        client, services, clock, db_url) -> None:
    """A detach waiting for a reader of `records` holds the table in the mode a topic creation's
    ATTACH needs: the purge gives up after DETACH_PATIENCE, leaves the leaf detach pending, and
    finishes at the pass after the reader."""
    create_topic(client, "gone", 1)
    gone = topic_id(db_url, "gone")
    produce(client, "gone", 0, [1, 2])
    assert client.delete("/v1/topics/gone").status_code == 204
    cleaner = LogCleaner(services.db, services.settings, clock)
    passes: list[int] = []
    dsn = db_url.replace("postgresql+psycopg", "postgresql")
    with psycopg.connect(dsn) as reader:
        reader.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        reader.execute("SELECT count(*) FROM committed_records")
        purging = threading.Thread(target=lambda: passes.append(cleaner.run_once().topics_purged))
        purging.start()
        purging.join(60)
        try:
            assert not purging.is_alive(), "the purge still waits for the reader"
            assert passes == [0]
            create_topic(client, "new", 1)  # its leaf attached while the reader reads on
            with connected(db_url) as conn:
                assert conn.execute(text("SELECT inhdetachpending FROM pg_inherits WHERE inhrelid = "
                                         f"'records_{gone}_0'::regclass")).scalar_one() is True
                assert conn.execute(text("SELECT count(*) FROM deleted_topics")).scalar_one() == 1
        finally:
            reader.rollback()
            purging.join(60)
    assert f"records_{topic_id(db_url, 'new')}_0" in leaves(db_url)

    assert cleaner.run_once().topics_purged == 2
    assert f"records_{gone}_0" not in leaf_tables(db_url)


def test_the_leaves_of_a_topic_purged_without_them_are_dropped(client, services, clock, db_url) -> None:  # type: ignore[no-untyped-def]
    """A process of the revision before 0035 purges a deleted topic a chunk of records at a time
    and then forgets its row, leaving its leaves, empty: the next pass drops them."""
    create_topic(client, "gone", 2)
    create_topic(client, "kept", 1)
    gone, kept = topic_id(db_url, "gone"), topic_id(db_url, "kept")
    with connected(db_url) as conn, conn.begin():
        conn.execute(text("DELETE FROM partitions WHERE topic_id = :t"), {"t": gone})
        conn.execute(text("DELETE FROM topics WHERE topic_id = :t"), {"t": gone})

    LogCleaner(services.db, services.settings, clock).run_once()

    assert {f"records_{gone}_0", f"records_{gone}_1"}.isdisjoint(leaf_tables(db_url))
    assert f"records_{kept}_0" in leaves(db_url)


# --- each log partition's view ---------------------------------------------------------------

_COLUMNS = ('topic, topic_id, "partition", "offset", commit_position, timestamp_ms, key, value, headers, '
            "producer_id, transactional, key_bytes, value_bytes, batch_position")


def write_every_kind_of_batch(client, topic: str, partition: int) -> None:  # type: ignore[no-untyped-def]
    """A plain batch, then a transaction committed, one aborted and one left open, each
    interleaved with plain records, in one partition."""
    produce(client, topic, partition, [1, 2])
    for tid, outcome in (("c", "commit"), ("a", "abort"), ("o", None)):
        p = init_producer(client, f"{tid}{partition}")
        begin(client, f"{tid}{partition}", p)
        assert send(client, [batch(topic, partition, [f"{tid}1", f"{tid}2"], 0)], p, f"{tid}{partition}").status_code == 200
        produce(client, topic, partition, [f"after {tid}"])
        if outcome:
            r = client.post(f"/v1/transactions/{tid}{partition}/{outcome}", json=ident(p))
            assert r.status_code == 200, r.text


def test_each_log_partition_has_a_view_that_reads_what_committed_records_reads_of_it(client, db_url) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "a", 2)
    a = topic_id(db_url, "a")
    for p in range(2):
        write_every_kind_of_batch(client, "a", p)
    with connected(db_url) as conn:
        for p in range(2):
            order = 'ORDER BY commit_position, "offset"'
            own = conn.execute(text(f"SELECT {_COLUMNS} FROM {partition_view(a, p)} {order}")).all()
            general = conn.execute(text(f'SELECT {_COLUMNS} FROM committed_records WHERE topic_id = :t '
                                        f'AND "partition" = :p {order}'), {"t": a, "p": p}).all()
            assert own == general
            # Offsets: 1, 2 at 0, 1; c1, c2 at 2, 3; "after c" 4; c's COMMIT marker 5; a1, a2
            # 6, 7; "after a" 8; a's ABORT marker 9; o1, o2 10, 11; "after o" 12. c1 and c2 are
            # seen at their marker's offset; a1, a2, o1 and o2 never.
            assert [(r.value, r.offset, r.commit_position) for r in own] == [
                ("1", 0, 0), ("2", 1, 1), ('"after c"', 4, 4), ('"c1"', 2, 5), ('"c2"', 3, 5),
                ('"after a"', 8, 8), ('"after o"', 12, 12)]


def test_a_partitions_view_locks_its_own_leaf_and_no_other(client, db_url) -> None:  # type: ignore[no-untyped-def]
    for name in ("a", "b", "c"):
        create_topic(client, name, 3)
    b = topic_id(db_url, "b")
    produce(client, "b", 1, [1, 2, 3])
    with connected(db_url) as conn:
        assert conn.execute(text(f'SELECT count(*) FROM {partition_view(b, 1)} WHERE "offset" >= 1')).scalar_one() == 2
        locked = set(conn.execute(text(
            "SELECT c.relname FROM pg_locks l JOIN pg_class c ON c.oid = l.relation "
            "WHERE l.pid = pg_backend_pid() AND c.relname ~ :leaf"), {"leaf": record_leaf_pattern()}).scalars())
        conn.rollback()
    assert locked == {f"records_{b}_1"}


def view_names(db_url: str) -> set[str]:
    with connected(db_url) as conn:
        return set(conn.execute(text("SELECT table_schema || '.' || table_name FROM information_schema.views "
                                     "WHERE table_schema = 'committed_records'")).scalars())


def test_create_partitions_gives_each_new_partition_its_view(client, db_url) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "a", 1)
    assert client.post("/v1/topics/a/partitions", json={"partition_count": 3}).status_code == 200
    produce(client, "a", 2, [7])
    a = topic_id(db_url, "a")
    assert {partition_view(a, p) for p in range(3)} <= view_names(db_url)
    with connected(db_url) as conn:
        assert conn.execute(text(f"SELECT value FROM {partition_view(a, 2)}")).scalars().all() == ["7"]


def test_a_topic_whose_creation_rolls_back_leaves_no_view(db_url) -> None:  # type: ignore[no-untyped-def]
    with connected(db_url) as conn:
        with conn.begin() as tx:
            conn.execute(text("INSERT INTO topics (topic_id, name, partition_count, cleanup_policy, retention_ms, "
                              "check_expected_offsets, created_ms) VALUES (902, 'x', 1, 'delete', -1, FALSE, 1)"))
            conn.execute(text('INSERT INTO partitions (topic_id, "partition", next_offset, log_start_offset) '
                              "VALUES (902, 0, 0, 0)"))
            assert partition_view(902, 0) in {
                f"committed_records.{n}" for n in conn.execute(text(
                    "SELECT table_name FROM information_schema.views WHERE table_schema = 'committed_records'")).scalars()}
            tx.rollback()
    assert partition_view(902, 0) not in view_names(db_url)


def test_a_deleted_topics_purge_drops_its_partitions_views(client, services, clock, db_url) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "gone", 2)
    create_topic(client, "kept", 1)
    gone, kept = topic_id(db_url, "gone"), topic_id(db_url, "kept")
    produce(client, "gone", 1, [1])
    assert client.delete("/v1/topics/gone").status_code == 204

    LogCleaner(services.db, services.settings, clock).run_once()

    assert {partition_view(gone, 0), partition_view(gone, 1)}.isdisjoint(view_names(db_url))
    assert partition_view(kept, 0) in view_names(db_url)


def test_a_groups_lag_locks_the_leaves_of_the_partitions_it_counts_and_no_other(client, services, db_url) -> None:  # type: ignore[no-untyped-def]
    for name in ("a", "b", "c"):
        create_topic(client, name, 3)
    b, c = topic_id(db_url, "b"), topic_id(db_url, "c")
    produce(client, "b", 1, [1, 2, 3])
    with connected(db_url) as conn, conn.begin():
        conn.execute(text("INSERT INTO group_offsets (group_id, topic_id, partition, committed_offset, metadata, "
                          "committed_ms) VALUES ('g', :b, 1, 1, NULL, 0), ('h', :c, 2, 0, NULL, 0)"), {"b": b, "c": c})
    with services.db.engine.connect() as conn:
        counted = read_committed.committed_between_for_groups(conn, 1_000, None)
        locked = set(conn.execute(text(
            "SELECT c.relname FROM pg_locks l JOIN pg_class c ON c.oid = l.relation "
            "WHERE l.pid = pg_backend_pid() AND c.relname ~ :leaf"), {"leaf": record_leaf_pattern()}).scalars())
        conn.rollback()
    assert [(g.group_id, g.topic_id, g.partition, g.count) for g in counted] == [("g", b, 1, 2), ("h", c, 2, 0)]
    assert locked == {f"records_{b}_1", f"records_{c}_2"}


def test_a_purge_gives_up_a_partitions_view_an_open_reader_holds_and_drops_it_at_the_next_pass(  # type: ignore[no-untyped-def]
        client, services, clock, db_url) -> None:
    """A reader's transaction left open after reading a partition's view holds the view: the
    purge's DROP VIEW waited for it, with the whole cleaner pass (retention and compaction of
    every partition), for as long as the reader kept it open. It gives up after
    DETACH_PATIENCE, as a detach does, and drops the view at the pass after the reader."""
    create_topic(client, "gone", 1)
    gone = topic_id(db_url, "gone")
    produce(client, "gone", 0, [1, 2])
    cleaner = LogCleaner(services.db, services.settings, clock)
    passes: list[int] = []
    dsn = db_url.replace("postgresql+psycopg", "postgresql")
    with psycopg.connect(dsn) as reader:
        reader.execute(f"SELECT count(*) FROM {partition_view(gone, 0)}")
        assert client.delete("/v1/topics/gone").status_code == 204
        purging = threading.Thread(target=lambda: passes.append(cleaner.run_once().topics_purged))
        purging.start()
        purging.join(60)
        try:
            assert not purging.is_alive(), "the purge still waits for the reader of the view"
            assert passes == [0]
            assert partition_view(gone, 0) in view_names(db_url)
            assert f"records_{gone}_0" in leaves(db_url)
        finally:
            reader.rollback()
            purging.join(60)

    assert cleaner.run_once().topics_purged == 2
    assert partition_view(gone, 0) not in view_names(db_url)
    assert f"records_{gone}_0" not in leaf_tables(db_url)
