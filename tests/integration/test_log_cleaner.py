"""The log cleaner (app.services.log_cleaner) on both databases: retention, compaction, the
rows below a log start, deleted topics. Each test states what stays, exactly."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import create_engine, func, insert, select, update

from app import in_database
from app.domain.log_cleaning import record_size
from app.in_database import OutboxRecord
from app.services import log_cleaner
from app.services.log_cleaner import CleanerPass, LogCleaner
from app.storage import cleaning
from app.storage.dialect import utf8_bytes
from app.storage.tables import deleted_topics, partitions, record_message_ids, records, topics
from tests.helpers import batch, begin, create_topic, fetch, ident, init_producer, read_all, read_in_offset_order, send

HOUR = 3_600_000


@pytest.fixture
def cleaner(services, clock) -> LogCleaner:  # type: ignore[no-untyped-def]
    # Small chunks, so that every test crosses chunk boundaries.
    return LogCleaner(services.db, services.settings, clock, chunk_rows=3)


def produce(client: Any, topic: str, values: list[Any], *, partition: int = 0, ts: int | None = None,
            keys: list[str | None] | None = None) -> None:
    recs = [{"value": v, **({"timestamp_ms": ts} if ts is not None else {})} for v in values]
    for r, k in zip(recs, keys or [None] * len(recs), strict=True):
        if k is not None:
            r["key"] = k
    r = client.post("/v1/records", json={"batches": [{"topic": topic, "partition": partition, "records": recs}]})
    assert r.status_code == 200, r.text


def txn(client: Any, tid: str, topic: str, values: list[Any], *, commit: bool | None = True,
        keys: list[str] | None = None, partition: int = 0) -> dict:
    p = init_producer(client, tid)
    begin(client, tid, p)
    b = batch(topic, partition, values, 0)
    if keys is not None:
        for r, k in zip(b["records"], keys, strict=True):
            r["key"] = k
    assert send(client, [b], p, tid).status_code == 200
    if commit is not None:
        r = client.post(f"/v1/transactions/{tid}/{'commit' if commit else 'abort'}", json=ident(p))
        assert r.status_code == 200, r.text
    return p


def described(client: Any, topic: str, partition: int = 0) -> dict:
    return client.get(f"/v1/topics/{topic}").json()["partitions"][partition]


def offsets_stored(db_url: str, topic: str, partition: int = 0) -> list[int]:
    engine = create_engine(db_url)
    with engine.connect() as conn:
        out = list(conn.execute(
            select(records.c.offset).join(topics, topics.c.topic_id == records.c.topic_id)
            .where(topics.c.name == topic, records.c.partition == partition).order_by(records.c.offset)
        ).scalars())
    engine.dispose()
    return out


def committed_values(client: Any, topic: str, start: int | None = None, partition: int = 0) -> list[Any]:
    offset = described(client, topic, partition)["log_start_offset"] if start is None else start
    out = []
    while True:
        page = fetch(client, topic, partition, offset)
        out += [(r["key"], r["value"]) if r["key"] is not None else r["value"] for r in page["records"]]
        if page["next_offset"] >= page["high_watermark"] or not page["records"]:
            return out
        offset = page["next_offset"]


def view_values(db_url: str, topic: str, partition: int = 0) -> list[Any]:
    """The committed_records view (what Spark reads), in commit order."""
    import json

    from sqlalchemy import text

    engine = create_engine(db_url)
    with engine.connect() as conn:
        rows = conn.execute(text(
            'SELECT value FROM committed_records WHERE topic = :t AND "partition" = :p '
            'ORDER BY commit_position, "offset"'), {"t": topic, "p": partition}).scalars().all()
    engine.dispose()
    return [json.loads(v) for v in rows]


def assert_counters_exact(client: Any, db_url: str, topic: str, partition: int = 0) -> None:
    engine = create_engine(db_url)
    with engine.connect() as conn:
        count, size = conn.execute(
            select(func.count(), func.coalesce(func.sum(
                utf8_bytes(records.c.key) + utf8_bytes(records.c.value) + utf8_bytes(records.c.headers)), 0))
            .join(topics, topics.c.topic_id == records.c.topic_id)
            .where(topics.c.name == topic, records.c.partition == partition, records.c.control_type.is_(None))
        ).one()
    engine.dispose()
    d = described(client, topic, partition)
    assert (d["record_count"], d["size_bytes"]) == (count, size)


# --- retention by time ------------------------------------------------------------------------


def test_records_older_than_retention_ms_go_and_the_log_start_moves(client, cleaner, clock, db_url) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "t", retention_ms=HOUR)
    produce(client, "t", [1, 2, 3, 4], ts=clock.now_ms - 2 * HOUR)
    produce(client, "t", [5, 6], ts=clock.now_ms)

    result = cleaner.run_once()

    assert result == CleanerPass(retention=4, bytes_deleted=4)
    assert described(client, "t")["log_start_offset"] == 4
    assert offsets_stored(db_url, "t") == [4, 5]
    assert committed_values(client, "t") == [5, 6] == view_values(db_url, "t")
    assert client.get("/v1/topics/t/partitions/0/records", params={"offset": 3}).status_code == 416
    assert_counters_exact(client, db_url, "t")


def test_nothing_goes_before_its_time(client, cleaner, clock) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "t", retention_ms=HOUR)
    produce(client, "t", [1, 2], ts=clock.now_ms - HOUR + 1)
    assert cleaner.run_once() == CleanerPass()
    clock.advance(1)
    assert cleaner.run_once().retention == 0
    clock.advance(1)
    assert cleaner.run_once().retention == 2


def record_reads_and_sums(monkeypatch) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:  # type: ignore[no-untyped-def]
    """The ranges the cleaner reads row by row (stored_rows) and sums (chunk_summary)."""
    reads: list[tuple[int, int]] = []
    sums: list[tuple[int, int]] = []
    read, summed = cleaning.stored_rows, cleaning.chunk_summary

    def recorded_read(conn, topic_id, partition, start, end):  # type: ignore[no-untyped-def]
        reads.append((start, end))
        return read(conn, topic_id, partition, start, end)

    def recorded_sum(conn, topic_id, partition, start, end):  # type: ignore[no-untyped-def]
        sums.append((start, end))
        return summed(conn, topic_id, partition, start, end)

    monkeypatch.setattr(cleaning, "stored_rows", recorded_read)
    monkeypatch.setattr(cleaning, "chunk_summary", recorded_sum)
    return reads, sums


def test_a_partition_whose_oldest_record_has_not_expired_is_neither_read_nor_summed(client, cleaner, clock, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "t", retention_ms=HOUR)
    produce(client, "t", list(range(10)), ts=clock.now_ms - HOUR + 1)
    reads, sums = record_reads_and_sums(monkeypatch)
    assert cleaner.run_once() == CleanerPass()
    assert (reads, sums) == ([], [])  # its first row stays, and with it everything after


def test_a_chunk_whose_last_row_has_not_expired_is_read_without_being_summed_first(client, cleaner, clock, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "t", retention_ms=HOUR)
    produce(client, "t", [0], ts=clock.now_ms - 2 * HOUR)
    produce(client, "t", list(range(1, 10)), ts=clock.now_ms - HOUR + 1)
    reads, sums = record_reads_and_sums(monkeypatch)
    assert cleaner.run_once() == CleanerPass(retention=1, bytes_deleted=1)
    # Offset 2, the chunk's last row, cannot go: no sum can say the chunk goes whole. Then
    # offset 1 is the first row, and stays: no longer read would move the bound.
    assert (reads, sums) == ([(0, 3)], [])


def test_a_range_whose_sum_said_no_is_read_to_its_end_before_another_sum(services, client, clock, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    cleaner = LogCleaner(services.db, services.settings, clock, chunk_rows=3, whole_chunk_rows=5)
    create_topic(client, "t", retention_ms=HOUR)
    produce(client, "t", ["p0", "p1"], ts=clock.now_ms - 2 * HOUR)  # 0, 1
    txn(client, "a", "t", ["a2", "a3"])  # 2, 3, marker 4
    clock.advance(2 * HOUR)
    produce(client, "t", ["p5", "p6", "p7", "p8", "p9"], ts=clock.now_ms - 2 * HOUR)  # 5-9
    reads, sums = record_reads_and_sums(monkeypatch)

    assert cleaner.run_once() == CleanerPass(retention=9, bytes_deleted=9 * 4)
    # [0, 5) ends with a marker: read three rows, up to txn a. [2, 7) holds txn a: the sum
    # says no, and its rows are read to 7 and past, 3 at a time. From 8 on, a sum again.
    assert reads == [(0, 3), (2, 5), (5, 8)]
    assert sums == [(2, 7), (8, 10)]
    assert described(client, "t")["log_start_offset"] == 10


def test_retention_minus_one_keeps_everything(client, cleaner, clock) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "t", retention_ms=-1)
    produce(client, "t", [1, 2], ts=0)
    assert cleaner.run_once() == CleanerPass()
    assert committed_values(client, "t") == [1, 2]


def test_an_open_transaction_keeps_its_first_record_and_everything_after_however_old(client, cleaner, clock, db_url) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "t", retention_ms=HOUR)
    produce(client, "t", ["p0", "p1"])  # offsets 0, 1
    p = txn(client, "open", "t", ["x2", "x3"], commit=None)  # offsets 2, 3: open
    produce(client, "t", ["p4"])  # offset 4
    clock.advance(10 * HOUR)

    assert cleaner.run_once().retention == 2
    assert offsets_stored(db_url, "t") == [2, 3, 4]
    assert described(client, "t")["log_start_offset"] == 2

    assert client.post("/v1/transactions/open/commit", json=ident(p)).status_code == 200  # marker 5
    assert committed_values(client, "t") == ["p4", "x2", "x3"]
    assert cleaner.run_once().retention == 3
    assert offsets_stored(db_url, "t") == []
    assert described(client, "t")["log_start_offset"] == 6


def test_markers_go_with_the_records_they_end(client, cleaner, clock, db_url) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "t", retention_ms=HOUR)
    txn(client, "a", "t", ["a0", "a1"])  # 0, 1, marker 2
    txn(client, "b", "t", ["b3"], commit=False)  # 3, abort marker 4
    clock.advance(2 * HOUR)
    produce(client, "t", ["p5"], ts=clock.now_ms)

    assert cleaner.run_once().retention == 3
    assert offsets_stored(db_url, "t") == [5]
    assert described(client, "t")["log_start_offset"] == 5
    assert_counters_exact(client, db_url, "t")


def test_a_committed_transaction_that_straddles_the_bound_stays_whole(client, cleaner, clock, db_url) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "t", retention_ms=HOUR)
    produce(client, "t", ["p0"], ts=clock.now_ms - 2 * HOUR)
    p = txn(client, "a", "t", ["a1"], commit=None)
    clock.advance(2 * HOUR)
    produce(client, "t", ["p2"], ts=clock.now_ms)  # not expired
    assert client.post("/v1/transactions/a/commit", json=ident(p)).status_code == 200  # marker 3

    # a1 is expired but its marker lies past p2, which stays: a1 stays too.
    assert cleaner.run_once().retention == 1
    assert offsets_stored(db_url, "t") == [1, 2, 3]
    assert committed_values(client, "t") == ["p2", "a1"]


def test_rows_another_cleaner_deletes_under_a_chunk_are_counted_once(client, cleaner, clock, db_url, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "t", retention_ms=HOUR)
    produce(client, "t", [1, 2, 3, 4, 5, 6], ts=clock.now_ms - 2 * HOUR)  # 1 byte each
    chunk_summary = cleaning.chunk_summary
    raced: list[int] = []

    def another_cleaner_between_sum_and_delete(conn, topic_id, partition, start, end):  # type: ignore[no-untyped-def]
        summary = chunk_summary(conn, topic_id, partition, start, end)
        if not raced:  # another cleaner deletes the chunk's first row, counts it, commits
            raced.append(summary.rows)
            other = create_engine(db_url)
            with other.begin() as c:
                cleaning.delete_prefix(c, topic_id, partition, start, start + 1)
            other.dispose()
        return summary

    monkeypatch.setattr(cleaning, "chunk_summary", another_cleaner_between_sum_and_delete)
    result = cleaner.run_once()

    assert raced == [3]  # the first chunk summed three rows; its DELETE found two, was undone, and the rows were read
    assert result == CleanerPass(retention=5, bytes_deleted=5)
    assert offsets_stored(db_url, "t") == []
    assert described(client, "t")["log_start_offset"] == 6
    assert_counters_exact(client, db_url, "t")


class _AnotherCleanerAfterTheFirstRead:
    """A connection whose first statement is followed, before the next, by another cleaner's
    delete_prefix of [0, `bound`) committed on a connection of its own."""

    def __init__(self, conn: Any, db_url: str, topic_id: int, bound: int) -> None:
        self.conn, self.db_url, self.topic_id, self.bound, self.raced = conn, db_url, topic_id, bound, False

    def execute(self, *args: Any, **kwargs: Any) -> Any:
        result = self.conn.execute(*args, **kwargs).freeze()()  # read whole before the other cleaner runs
        if not self.raced:
            self.raced = True
            other = create_engine(self.db_url)
            with other.begin() as c:
                cleaning.delete_prefix(c, self.topic_id, 0, 0, self.bound)
            other.dispose()
        return result


def _topic_id(db_url: str, name: str) -> int:
    engine = create_engine(db_url)
    with engine.connect() as conn:
        topic_id = conn.execute(select(topics.c.topic_id).where(topics.c.name == name)).scalar_one()
    engine.dispose()
    return topic_id


def test_a_chunk_read_while_another_cleaner_deletes_its_head_is_read_without_it(client, db_url) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "t", retention_ms=HOUR)
    for values in ([1, 2], [3, 4], [5, 6]):  # batch rows at 0, 2, 4
        produce(client, "t", values)
    engine = create_engine(db_url)
    with engine.connect() as conn:
        raced = _AnotherCleanerAfterTheFirstRead(conn, db_url, _topic_id(db_url, "t"), bound=4)
        rows = cleaning.stored_rows(raced, raced.topic_id, 0, 0, 6)  # type: ignore[arg-type]
    engine.dispose()

    assert raced.raced
    assert [r.offset for r in rows] == [4, 5]


def test_a_compaction_chunk_read_while_retention_deletes_its_head_is_read_without_it(client, db_url) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "t", cleanup_policy="compact,delete", retention_ms=HOUR)
    for values, keys in (([1, 2], ["a", "b"]), ([3, 4], ["a", "b"]), ([5, 6], ["a", "b"])):  # batch rows at 0, 2, 4
        produce(client, "t", values, keys=keys)
    engine = create_engine(db_url)
    with engine.connect() as conn:
        raced = _AnotherCleanerAfterTheFirstRead(conn, db_url, _topic_id(db_url, "t"), bound=4)
        rows = cleaning.compaction_rows(raced, raced.topic_id, 0, 0, 6, 10)  # type: ignore[arg-type]
    engine.dispose()

    assert raced.raced
    assert [r.offset for r in rows] == [5, 4]


def test_a_chunk_commits_without_waiting_for_the_disk_and_other_writes_still_do(services, client, cleaner, clock, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "t", retention_ms=HOUR)
    produce(client, "t", [1, 2], ts=clock.now_ms - 2 * HOUR)
    seen: list[tuple] = []
    delete_summed = cleaning.delete_summed

    def settings_now(conn) -> tuple:  # type: ignore[no-untyped-def]
        if conn.dialect.name == "sqlite":
            synchronous = {1: "NORMAL", 2: "FULL"}[conn.exec_driver_sql("PRAGMA synchronous").scalar()]
            return synchronous, conn.exec_driver_sql("PRAGMA wal_autocheckpoint").scalar()
        return (conn.exec_driver_sql("SHOW synchronous_commit").scalar(),)

    def recorded(conn, *args, **kwargs):  # type: ignore[no-untyped-def]
        seen.append(settings_now(conn))
        return delete_summed(conn, *args, **kwargs)

    monkeypatch.setattr(cleaning, "delete_summed", recorded)
    assert cleaner.run_once().retention == 2
    # SQLite: no fsync at commit, and no checkpoint in it either (the cleaner runs it later).
    assert set(seen) == ({("NORMAL", 0)} if services.db.is_sqlite else {("off",)})
    with services.db.write() as conn:  # the next write on the same connections: as before
        assert settings_now(conn) == (("FULL", 1000) if services.db.is_sqlite else ("on",))


def test_sqlite_checkpoints_out_of_the_write_turn(services, client, cleaner, clock, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    if not services.db.is_sqlite:
        pytest.skip("PostgreSQL has no WAL checkpoint of its own to run")
    monkeypatch.setattr(log_cleaner, "CHECKPOINT_RECORDS", 3)
    create_topic(client, "t", retention_ms=HOUR)
    produce(client, "t", list(range(7)), ts=clock.now_ms - 2 * HOUR)
    turns_held: list[bool] = []
    checkpoint = services.db.checkpoint

    def recorded() -> None:
        turns_held.append(services.db._sqlite_writer._held)
        checkpoint()

    monkeypatch.setattr(services.db, "checkpoint", recorded)
    assert cleaner.run_once().retention == 7
    assert turns_held == [False, False, False]  # after 3 and 6 records, and at the end of the pass


class FakeTime:
    """time.monotonic that moves only when the cleaner sleeps, or a test says so."""

    def __init__(self) -> None:
        self.now, self.slept = 1000.0, []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.slept.append(s)
        self.now += s


def test_the_cleaner_pauses_between_chunks_to_keep_under_its_records_per_second(services, client, clock, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    fake = FakeTime()
    monkeypatch.setattr(log_cleaner, "time", fake)
    settings = services.settings.model_copy(update={"cleaner_max_records_per_second": 2})
    cleaner = LogCleaner(services.db, settings, clock, chunk_rows=3)
    create_topic(client, "t", retention_ms=HOUR)
    produce(client, "t", list(range(7)), ts=clock.now_ms - 2 * HOUR)

    assert cleaner.run_once().retention == 7
    # Chunks of 3, 3 and 1 records at 2 a second: 1.5 s after each of the first two (a window
    # each), 0.5 s after the last, each pause slept in steps of at most 0.1 s.
    assert round(sum(fake.slept), 6) == 3.5
    assert max(fake.slept) <= 0.1

    fake.slept.clear()
    produce(client, "t", list(range(7)), ts=clock.now_ms - 2 * HOUR)
    assert cleaner.run_once(stop=lambda: bool(fake.slept)).retention == 3  # stopped in its first pause
    assert fake.slept == [0.1]


@pytest.mark.parametrize("others_write", [True, False])
def test_the_cleaner_yields_to_its_process_writers(services, client, cleaner, clock, monkeypatch, others_write) -> None:  # type: ignore[no-untyped-def]
    fake = FakeTime()
    monkeypatch.setattr(log_cleaner, "time", fake)
    create_topic(client, "t", retention_ms=HOUR)
    produce(client, "t", list(range(7)), ts=clock.now_ms - 2 * HOUR)
    chunk_summary = cleaning.chunk_summary

    def a_chunk_of_10_ms_meanwhile_a_send(*args):  # type: ignore[no-untyped-def]
        fake.now += 0.01
        if others_write:
            with services.db.write():  # another writer of the process, as a Send in serve
                pass
        return chunk_summary(*args)

    monkeypatch.setattr(cleaning, "chunk_summary", a_chunk_of_10_ms_meanwhile_a_send)
    assert cleaner.run_once().retention == 7
    # Three chunks of 10 ms: each followed by a pause twice as long while others write.
    assert [round(s, 6) for s in fake.slept] == ([0.02] * 3 if others_write else [])


# --- retention by size ------------------------------------------------------------------------


def test_the_oldest_records_go_while_the_partition_holds_more_than_retention_bytes(client, cleaner, db_url) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "t", retention_ms=-1, retention_bytes=25)
    produce(client, "t", ["aaaaaaaa"] * 5)  # 10 bytes each ("aaaaaaaa" with its quotes)

    assert cleaner.run_once() == CleanerPass(retention=3, bytes_deleted=30)
    assert described(client, "t")["size_bytes"] == 20
    assert committed_values(client, "t") == ["aaaaaaaa"] * 2
    assert_counters_exact(client, db_url, "t")


# --- below the log start ----------------------------------------------------------------------


def move_log_start(db_url: str, topic: str, offset: int, partition: int = 0) -> None:
    """What DeleteRecords does: moves the log start, nothing else."""
    engine = create_engine(db_url)
    with engine.begin() as conn:
        topic_id = conn.execute(select(topics.c.topic_id).where(topics.c.name == topic)).scalar_one()
        conn.execute(update(partitions).where(partitions.c.topic_id == topic_id, partitions.c.partition == partition)
                     .values(log_start_offset=offset))
    engine.dispose()


def test_rows_below_the_log_start_go_whatever_the_policy(client, cleaner, db_url) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "t", cleanup_policy="compact", retention_ms=-1)
    produce(client, "t", list(range(8)), keys=[f"k{i}" for i in range(8)])
    move_log_start(db_url, "t", 7)

    result = cleaner.run_once()

    assert result.below_log_start == 7
    assert offsets_stored(db_url, "t") == [7]
    assert_counters_exact(client, db_url, "t")


# --- compaction -------------------------------------------------------------------------------


def test_compaction_keeps_each_keys_latest_committed_record(client, cleaner, db_url) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "t", cleanup_policy="compact")
    produce(client, "t", [1, 2, 3, 4, 5], keys=["a", "b", "a", "c", "a"])
    txn(client, "x", "t", [6, 7], keys=["b", "d"])  # 5, 6, marker 7
    txn(client, "y", "t", [8], keys=["c"], commit=False)  # 8, abort 9

    result = cleaner.run_once()

    assert result.compaction == 4  # a@0, b@1, a@2 superseded; c@8 aborted
    assert result.partitions_compacted == 1
    assert committed_values(client, "t") == [("c", 4), ("a", 5), ("b", 6), ("d", 7)]
    assert offsets_stored(db_url, "t") == [3, 4, 5, 6, 7]  # the abort marker went with c@8
    assert_counters_exact(client, db_url, "t")


def last_values(read: list) -> dict[str, Any]:
    """Each key's last value in a read, (key, value) or (offset, key, value) in the order read;
    a key whose last record is a tombstone is absent."""
    last = {r[-2]: r[-1] for r in read}
    return {key: value for key, value in last.items() if value is not None}


def test_where_a_transaction_commits_after_a_later_written_record_of_its_key_each_door_ends_as_before(client, cleaner, services, db_url) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "t", cleanup_policy="compact")
    p = txn(client, "x", "t", ["from-txn"], keys=["a"], commit=None)  # offset 0
    produce(client, "t", ["plain"], keys=["a"])  # offset 1: shown first over HTTP
    assert client.post("/v1/transactions/x/commit", json=ident(p)).status_code == 200  # marker 2

    cleaner.run_once()
    assert offsets_stored(db_url, "t") == [0, 1, 2]
    assert committed_values(client, "t") == [("a", "plain"), ("a", "from-txn")]  # commit order
    assert read_in_offset_order(services, "t") == [(0, "a", "from-txn"), (1, "a", "plain")]


def test_a_tombstone_an_earlier_pass_kept_beside_the_other_orders_value_stays_however_old(client, cleaner, services, clock, db_url) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "t", cleanup_policy="compact", delete_retention_ms=HOUR)
    p = txn(client, "x", "t", [None], keys=["a"], commit=None)  # 0: x deletes a
    produce(client, "t", ["plain"], keys=["a"])  # 1
    assert client.post("/v1/transactions/x/commit", json=ident(p)).status_code == 200  # marker 2
    # Over HTTP a is deleted (x's tombstone commits last); a Kafka consumer ends with "plain".
    assert last_values(committed_values(client, "t")) == {}
    assert last_values(read_in_offset_order(services, "t")) == {"a": "plain"}

    cleaner.run_once()
    assert offsets_stored(db_url, "t") == [0, 1, 2]  # each order's last a
    clock.advance(HOUR + 1)
    produce(client, "t", [1, 2, 3], keys=["b", "b", "b"])  # 3..5: dirty enough to compact again
    cleaner.run_once()  # its map holds b alone; the tombstone is old now

    assert offsets_stored(db_url, "t") == [0, 1, 2, 5]
    assert last_values(committed_values(client, "t")) == {"b": 3}
    assert last_values(read_in_offset_order(services, "t")) == {"a": "plain", "b": 3}
    assert_counters_exact(client, db_url, "t")


def test_old_tombstones_latest_in_either_order_go_together_with_their_marker(client, cleaner, services, clock, db_url) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "t", cleanup_policy="compact", delete_retention_ms=HOUR)
    p = txn(client, "x", "t", [None], keys=["a"], commit=None)  # 0
    produce(client, "t", [None], keys=["a"])  # 1
    assert client.post("/v1/transactions/x/commit", json=ident(p)).status_code == 200  # marker 2
    produce(client, "t", [1], keys=["b"])  # 3

    cleaner.run_once()
    assert offsets_stored(db_url, "t") == [0, 1, 2, 3]  # recent tombstones stay
    clock.advance(HOUR + 1)
    produce(client, "t", [2, 3, 4, 5], keys=["c", "c", "c", "c"])  # 4..7
    cleaner.run_once()

    assert offsets_stored(db_url, "t") == [3, 7]
    assert committed_values(client, "t") == [("b", 1), ("c", 5)]
    assert read_in_offset_order(services, "t") == [(3, "b", 1), (7, "c", 5)]
    assert_counters_exact(client, db_url, "t")


def test_compaction_never_reaches_the_last_stable_offset(client, cleaner, db_url) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "t", cleanup_policy="compact")
    produce(client, "t", [1], keys=["a"])
    txn(client, "x", "t", [2], keys=["a"], commit=None)  # open, at offset 1
    produce(client, "t", [3], keys=["a"])  # offset 2, past the last stable offset

    cleaner.run_once()
    assert offsets_stored(db_url, "t") == [0, 1, 2]


def test_a_transaction_aborted_past_the_cleaning_point_loses_its_records_and_later_its_marker(client, cleaner, db_url) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "t", cleanup_policy="compact")
    x = txn(client, "x", "t", [1, 2], keys=["a", "b"], commit=None)  # 0, 1
    y = txn(client, "y", "t", [3], keys=["c"], commit=None)  # 2: the last stable offset from here
    assert client.post("/v1/transactions/x/abort", json=ident(x)).status_code == 200  # marker 3

    # Cleaning point 2: x's records are aborted by their batch row, though its marker lies
    # past the point, unscanned.
    assert cleaner.run_once().compaction == 2
    assert offsets_stored(db_url, "t") == [2, 3]

    assert client.post("/v1/transactions/y/commit", json=ident(y)).status_code == 200  # marker 4
    cleaner.run_once()
    assert offsets_stored(db_url, "t") == [2, 4]  # x's marker, met with no record left
    assert committed_values(client, "t") == [("c", 3)]
    assert_counters_exact(client, db_url, "t")


def test_a_partly_compacted_transaction_is_still_read_through_its_new_head(client, cleaner, db_url) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "t", cleanup_policy="compact")
    txn(client, "x", "t", [1, 2, 3, 4], keys=["a", "b", "c", "d"])  # 0..3, marker 4
    produce(client, "t", [5, 6], keys=["a", "b"])  # 5, 6

    assert cleaner.run_once().compaction == 2
    assert offsets_stored(db_url, "t") == [2, 3, 4, 5, 6]
    assert committed_values(client, "t") == [("c", 3), ("d", 4), ("a", 5), ("b", 6)]


def test_an_old_tombstone_goes_after_delete_retention_ms(client, cleaner, clock, db_url) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "t", cleanup_policy="compact", delete_retention_ms=HOUR)
    produce(client, "t", [1, None], keys=["a", "a"])
    produce(client, "t", [2], keys=["b"])

    cleaner.run_once()
    assert committed_values(client, "t") == [("a", None), ("b", 2)]  # the tombstone stays a while
    clock.advance(HOUR + 1)
    produce(client, "t", [3, 4, 5], keys=["b", "c", "c"])  # dirty enough to compact again
    cleaner.run_once()
    assert committed_values(client, "t") == [("b", 3), ("c", 5)]
    assert_counters_exact(client, db_url, "t")


def test_what_the_scan_leaves_to_delete_goes_a_chunk_per_transaction_the_checkpoint_with_the_last(client, cleaner, clock, db_url, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "t", cleanup_policy="compact", delete_retention_ms=HOUR)
    produce(client, "t", [None] * 5, keys=["a", "b", "c", "d", "e"])  # 0..4
    clock.advance(HOUR + 1)
    done: list[tuple] = []
    delete_offsets, set_cleaned_offset = cleaning.delete_offsets, cleaning.set_cleaned_offset
    monkeypatch.setattr(cleaning, "delete_offsets", lambda conn, t, p, offsets: (
        done.append(("delete", list(offsets))), delete_offsets(conn, t, p, offsets))[1])
    monkeypatch.setattr(cleaning, "set_cleaned_offset", lambda conn, t, p, offset: (
        done.append(("checkpoint", offset)), set_cleaned_offset(conn, t, p, offset))[1])

    result = cleaner.run_once()  # chunks of 3 rows

    assert (result.compaction, result.partitions_compacted) == (5, 1)
    assert done == [("delete", []), ("delete", []),  # the scan's chunks: 4, 3, 2; then 1, 0
                    ("delete", [0, 1, 2]), ("delete", [3, 4]), ("checkpoint", 5)]
    assert offsets_stored(db_url, "t") == []
    assert_counters_exact(client, db_url, "t")


def test_tombstones_that_expire_far_apart_take_their_batch_rows_and_nothing_between(services, client, clock, db_url, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "t", cleanup_policy="compact", delete_retention_ms=HOUR)
    produce(client, "t", [None], keys=["a"])  # 0
    produce(client, "t", list(range(15)), keys=[f"k{i}" for i in range(15)])  # 1..15, one batch row
    produce(client, "t", [None], keys=["b"])  # 16
    clock.advance(HOUR + 1)
    monkeypatch.setattr(cleaning, "_FORGET_GAP", 10)
    forgotten: list[tuple[int, int]] = []
    forget = cleaning.forget_deleted_records
    monkeypatch.setattr(cleaning, "forget_deleted_records",
                        lambda conn, t, p, start, end: forgotten.append((start, end)) or forget(conn, t, p, start, end))

    assert LogCleaner(services.db, services.settings, clock, chunk_rows=20).run_once().compaction == 2

    # Each tombstone's range alone: one range from 0 to 17 would probe every batch row between.
    assert forgotten == [(0, 1), (16, 17)]
    assert offsets_stored(db_url, "t") == list(range(1, 16))
    assert_counters_exact(client, db_url, "t")


def test_compact_and_delete_does_both(client, cleaner, clock) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "t", cleanup_policy="compact,delete", retention_ms=HOUR)
    produce(client, "t", [1], keys=["old"], ts=clock.now_ms - 2 * HOUR)
    produce(client, "t", [2, 3], keys=["a", "a"], ts=clock.now_ms)

    result = cleaner.run_once()
    assert (result.retention, result.compaction) == (1, 1)
    assert committed_values(client, "t") == [("a", 3)]


def test_a_compacted_topic_refuses_records_without_a_key(client) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "t", cleanup_policy="compact")
    r = client.post("/v1/records", json={"batches": [{"topic": "t", "partition": 0,
                                                      "records": [{"key": "k", "value": 1}, {"value": 2}]}]})
    assert (r.status_code, r.json()["error_code"]) == (400, "INVALID_RECORD")
    assert described(client, "t")["log_end_offset"] == 0


# --- deleted topics and claims ----------------------------------------------------------------


def delete_topic_row(db_url: str, name: str, now_ms: int) -> None:
    """What DELETE /v1/topics/{name} does: the topic's row goes to deleted_topics, its records
    stay for the cleaner."""
    engine = create_engine(db_url)
    with engine.begin() as conn:
        topic_id = conn.execute(select(topics.c.topic_id).where(topics.c.name == name)).scalar_one()
        conn.execute(insert(deleted_topics).values(topic_id=topic_id, name=name, deleted_ms=now_ms))
        conn.execute(topics.delete().where(topics.c.topic_id == topic_id))
    engine.dispose()


def test_a_deleted_topics_records_are_purged_and_then_its_entry(client, cleaner, clock, db_url) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "t", 2)
    produce(client, "t", list(range(5)), partition=0)
    produce(client, "t", list(range(4)), partition=1)
    delete_topic_row(db_url, "t", clock.now_ms)

    assert cleaner.run_once().topics_purged == 9
    engine = create_engine(db_url)
    with engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(records)).scalar() == 0
        assert conn.execute(select(func.count()).select_from(deleted_topics)).scalar() == 0
    engine.dispose()


def test_a_partition_compacted_by_one_cleaner_is_not_claimed_by_another(services, clock) -> None:  # type: ignore[no-untyped-def]
    with services.db.write() as conn:
        assert cleaning.claim(conn, 1, 0, "first", clock.now_ms, clock.now_ms + 1000)
    with services.db.write() as conn:
        assert not cleaning.claim(conn, 1, 0, "second", clock.now_ms, clock.now_ms + 1000)
        assert cleaning.claim(conn, 1, 0, "first", clock.now_ms, clock.now_ms + 2000)  # renewed
    with services.db.write() as conn:
        assert cleaning.claim(conn, 1, 0, "second", clock.now_ms + 2001, clock.now_ms + 3000)  # expired
    with services.db.write() as conn:
        cleaning.release(conn, 1, 0, "first")  # not its holder any more: nothing
        assert not cleaning.claim(conn, 1, 0, "first", clock.now_ms + 2002, clock.now_ms + 3000)


def test_record_size_is_what_the_database_counts(client, db_url) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "t")
    r = client.post("/v1/records", json={"batches": [{"topic": "t", "partition": 0, "records": [
        {"key": "ключ", "value": {"é": "😀"}, "headers": {"h": "€"}}]}]})
    assert r.status_code == 200
    [stored] = read_all(client, "t", 0)
    import orjson
    expected = record_size("ключ", orjson.dumps({"é": "😀"}).decode(), orjson.dumps({"h": "€"}).decode())
    assert described(client, "t")["size_bytes"] == expected
    assert_counters_exact(client, db_url, "t")


def test_the_cleaner_vacuums_the_log_where_nothing_else_would(client, cleaner, clock, db_url) -> None:  # type: ignore[no-untyped-def]
    from app.services.log_cleaner import VACUUM_MIN_ROWS

    create_topic(client, "t", retention_ms=HOUR)
    produce(client, "t", list(range(VACUUM_MIN_ROWS)), ts=clock.now_ms - 2 * HOUR)
    engine = create_engine(db_url)
    with engine.connect() as conn:
        reclaims = cleaning.reclaims_space_itself(conn)
    engine.dispose()
    # SQLite reuses freed pages at once; this machine's PostgreSQL runs without autovacuum.
    assert reclaims is (db_url.startswith("sqlite") or not _autovacuum_off(db_url))

    result = LogCleaner(cleaner.db, cleaner.settings, clock).run_once()

    assert result.retention == VACUUM_MIN_ROWS
    assert result.vacuums == (0 if reclaims else 1)


def _autovacuum_off(db_url: str) -> bool:
    engine = create_engine(db_url)
    with engine.connect() as conn:
        off = conn.exec_driver_sql("SHOW autovacuum").scalar() == "off"
    engine.dispose()
    return off


def test_the_cleaner_does_not_vacuum_for_a_few_deletions(client, cleaner, clock) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "t", retention_ms=HOUR)
    produce(client, "t", list(range(10)), ts=clock.now_ms - 2 * HOUR)
    assert cleaner.run_once().vacuums == 0


def test_a_batch_cut_by_the_log_start_keeps_its_records_at_or_past_it(client, cleaner, db_url) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "t")
    txn(client, "x", "t", ["x0", "x1", "x2", "x3", "x4"])  # one batch, offsets 0..4, marker 5
    move_log_start(db_url, "t", 2)  # what DeleteRecords may do: inside the batch
    assert committed_values(client, "t") == ["x2", "x3", "x4"] == view_values(db_url, "t")

    assert cleaner.run_once().below_log_start == 2  # its head (offset 0) among them

    assert offsets_stored(db_url, "t") == [2, 3, 4, 5]
    assert committed_values(client, "t") == ["x2", "x3", "x4"] == view_values(db_url, "t")
    assert_counters_exact(client, db_url, "t")


def _lag_matches_what_a_fetch_reads_from_every_position(client: Any, topic: str) -> None:
    end = described(client, topic)["log_end_offset"]
    start = described(client, topic)["log_start_offset"]
    for position in range(start, end + 1):
        r = client.post("/v1/groups/g/offsets", json={"offsets": [{"topic": topic, "partition": 0, "offset": position}]})
        assert r.status_code == 200, r.text
        lag = client.get("/v1/groups/g/lag").json()["partitions"][0]["lag"]
        read = len(client.get(f"/v1/topics/{topic}/partitions/0/records",
                              params={"offset": position, "max_records": 10_000}).json()["records"])
        assert lag == read, (position, lag, read)


def test_the_lag_counts_what_a_fetch_reads_after_compaction_left_holes_in_a_transaction(client, cleaner) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "t", cleanup_policy="compact")
    txn(client, "x", "t", [1, 2, 3], keys=["a", "b", "b"])  # 0..2, marker 3: b@1 is superseded by b@2
    produce(client, "t", [4], keys=["c"])  # 4
    assert cleaner.run_once().compaction == 1
    _lag_matches_what_a_fetch_reads_from_every_position(client, "t")


def test_the_lag_counts_what_a_fetch_reads_when_the_log_start_cuts_a_transaction(client, db_url) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "t")
    txn(client, "x", "t", [1, 2, 3])  # 0..2, marker 3
    produce(client, "t", [4])  # 4
    # No log start is placed across a committed transaction now (test_delete_records_clean_cut.py),
    # but DeleteRecords placed some so before, and they are read as they are.
    move_log_start(db_url, "t", 1)
    _lag_matches_what_a_fetch_reads_from_every_position(client, "t")


# --- message ids ------------------------------------------------------------------------------
# An in-database append's message id is unique among the records stored (app.storage.message_ids):
# every deletion of records takes their ids with them, and no other.


def append_in_database(db_url: str, topic: str, records_: list[OutboxRecord]) -> list[bool]:
    engine = create_engine(db_url)
    with engine.connect() as conn:
        appended = in_database.append(conn, topic, 0, records_)
        conn.commit()
    engine.dispose()
    return appended


def message_ids_stored(db_url: str) -> set[tuple[str, int]]:
    """(message id, offset) of every id stored, of every topic."""
    engine = create_engine(db_url)
    with engine.connect() as conn:
        out = {(m, o) for m, o in conn.execute(select(record_message_ids.c.message_id, record_message_ids.c.offset))}
    engine.dispose()
    return out


def test_retention_takes_the_message_ids_of_the_records_it_deletes_and_frees_them(client, cleaner, clock, db_url) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "t", retention_ms=HOUR)
    old = clock.now_ms - 2 * HOUR
    assert append_in_database(db_url, "t", [
        OutboxRecord(value=0, message_id="m0", timestamp_ms=old), OutboxRecord(value=1, message_id="m1", timestamp_ms=old),
        OutboxRecord(value=2, message_id="m2", timestamp_ms=clock.now_ms), OutboxRecord(value=3, timestamp_ms=clock.now_ms),
    ]) == [True] * 4

    assert cleaner.run_once().retention == 2

    assert message_ids_stored(db_url) == {("m2", 2)}
    assert append_in_database(db_url, "t", [OutboxRecord(value=4, message_id="m0"),
                                            OutboxRecord(value=5, message_id="m2")]) == [True, False]
    assert message_ids_stored(db_url) == {("m0", 4), ("m2", 2)}


def test_compaction_takes_the_message_id_of_a_superseded_record_only(client, cleaner, db_url) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "t", cleanup_policy="compact")
    assert append_in_database(db_url, "t", [
        OutboxRecord(value=1, key="a", message_id="x"), OutboxRecord(value=2, key="a", message_id="y"),
        OutboxRecord(value=3, key="b", message_id="z"),
    ]) == [True] * 3

    assert cleaner.run_once().compaction == 1

    assert offsets_stored(db_url, "t") == [1, 2]
    assert message_ids_stored(db_url) == {("y", 1), ("z", 2)}


def test_a_deleted_topics_message_ids_are_purged_with_its_records(client, cleaner, clock, db_url) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "t")
    create_topic(client, "kept")
    append_in_database(db_url, "t", [OutboxRecord(value=i, message_id=f"t{i}") for i in range(4)])
    append_in_database(db_url, "kept", [OutboxRecord(value=0, message_id="k0")])
    delete_topic_row(db_url, "t", clock.now_ms)

    assert cleaner.run_once().topics_purged == 4

    assert message_ids_stored(db_url) == {("k0", 0)}
