"""read_committed has one meaning however it is read (hypothesis, on SQLite and PostgreSQL).

Generated logs of one partition, written straight into the tables: plain records (each plain
batch with no producer or an idempotent producer's, flagged self-committed as the writers since
migrations 0041 and 0044 write it, an idempotent one's records carrying its producer id, or not,
as a writer before them left it, which the view reads through its batch row), batches of
up to three transactions interleaving with them and with each other, each transaction
committed, aborted or left open; then compaction's holes (data records deleted anywhere, a batch's
head moved to its first record left, as the log cleaner does) and a log start cut by
retention or DeleteRecords (at most the last stable offset), the records below it either still stored (garbage the
cleaner has not deleted yet) or deleted. Each append's and marker's batch row is stored beside the
records as the writers and the cleaner leave them, and checked against them (tests/batch_rows.py):
Fetch, the counters and the view read the batch rows. Each producer (up to three) has a
producer id of its own and a transaction open at a time at most, as in Kafka, whose clients
tell aborted records by their producer id. On every such log:

- the committed_records view holds exactly the model's rows: each data record stored at or past
  the log start that is plain (at its own offset) or of a committed transaction (at its COMMIT
  marker's offset), none other;
- a read_committed Fetch from the log start to the high watermark, in pages of a few records
  and of at most a few bytes or none (max_bytes), its records read in chunks of a few bytes or
  in one (chunk_bytes), returns exactly the rows of the committed_records view, in commit
  order, each at its commit position;
- a read_committed Fetch of the Kafka door (app.kafka.apis, in this process) from the log start
  to the last stable offset, in pages of as many records and bytes, each answer applied as a
  Kafka consumer applies it (aiokafka's, KIP-98: its aborted-transactions list, its control
  batches), hands the consumer exactly the view's rows lying below the last stable offset, in
  offset order, each at its offset, and each answer moves the consumer on;
- the lag counter (read_committed.committed_between_for_groups), a group committed at each
  position, counts for every group at once the number of the view's rows committed at or past
  its position, up to a cap (exact when below it), and so does it for each group alone (what
  one group's lag reads);
- the first-unread counter (read_committed.first_record_committed_from) from every position is
  the lowest offset of the view's rows committed at or past it but lying below it, and what lies
  across it (read_committed.committed_across) those rows' lowest offset and their lowest and
  highest commit positions, where the
  records below the log start are deleted (below the log start it answers from the stored
  records of the batches, which only ever lowers a DeleteRecords bound that cannot go below the log start);
- what lies across every position (offsets.straddle_at): an open transaction below it where the
  last stable offset is, else a committed one exactly where a reader in commit order at that
  position has read other records than one in offset order (the view's rows positioned below it,
  against those lying below it), where the records below the log start are deleted.

OUTBOX_CONFORMANCE_EXAMPLES (default 100) sets the examples per database.
"""

from __future__ import annotations

import datetime
import itertools
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cache

import pytest
from aiokafka.consumer.fetcher import READ_COMMITTED, PartitionRecords
from aiokafka.record.memory_records import MemoryRecords
from aiokafka.structs import TopicPartition
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode
from sqlalchemy import Connection, insert, text

from app.composition import Services
from app.domain.log_start import Across
from app.domain.offsets import ReadOrder, Straddle
from app.domain.types import IsolationLevel
from app.kafka import auth
from app.kafka.api_keys import ApiKey
from app.kafka.apis import Apis, Broker
from app.kafka.protocol import request_class
from app.settings import Settings
from app.storage import offsets, read, read_committed
from app.storage.engine import Database
from app.storage.tables import group_offsets, partitions, record_batches, records, topics, transaction_partitions
from tests.batch_rows import assert_batch_rows_match
from tests.conftest import FakeClock

EXAMPLES = int(os.environ.get("OUTBOX_CONFORMANCE_EXAMPLES", "100"))
TRANSACTIONS = [0, 1, 2]  # the producers, each with a transaction open at a time at most
FIRST_PRODUCER_ID = 7
# The idempotent producer of plain batches (in no transaction), beside the transactional ones.
IDEMPOTENT_PRODUCER_ID = FIRST_PRODUCER_ID + len(TRANSACTIONS)
_names = itertools.count()

events = st.lists(
    st.one_of(
        # (…, self-committed, an idempotent producer's)
        st.tuples(st.just("plain"), st.integers(1, 3), st.booleans(), st.booleans()),
        st.tuples(st.just("send"), st.sampled_from(TRANSACTIONS), st.integers(1, 3)),
        st.tuples(st.just("commit"), st.sampled_from(TRANSACTIONS)),
        st.tuples(st.just("abort"), st.sampled_from(TRANSACTIONS)),
    ),
    max_size=25,
)


@dataclass
class Log:
    """The partition's stored rows, by offset: (txn_id, control_type), the transaction as its
    batch row (`batches`) names it."""

    rows: dict[int, tuple[int | None, str | None]]
    next_offset: int
    last_stable_offset: int  # the first offset of an open transaction, else next_offset
    # Each append's run as written, before any cut: (base_offset, record_count, txn_id,
    # control_type); a plain event's records are one batch, a marker a batch of its own.
    batches: list[tuple[int, int, int | None, str | None]]
    open_firsts: dict[int, int]  # each open transaction's txn_id → its first offset
    # Each transaction's producer id: one per producer of the run, whose transactions follow
    # each other (a Kafka client names an aborted transaction by its producer alone).
    producer_ids: dict[int, int]
    # The base offsets of the plain batches written self-committed (records.self_committed and
    # record_batches.self_committed, migration 0041); the other plain batches as before it.
    self_committed: set[int]
    # The base offsets of the plain batches that are IDEMPOTENT_PRODUCER_ID's (flagged or not:
    # migration 0044, or before it); the others have no producer.
    idempotent: set[int] = field(default_factory=set)


def build(run: list[tuple], ending: str = "open") -> Log:  # type: ignore[type-arg]
    """The log of `run`; the transactions still open at its end are left open, or (`ending`)
    all committed or all aborted, so that the last stable offset is not always held low."""
    rows: dict[int, tuple[int | None, str | None]] = {}
    batches: list[tuple[int, int, int | None, str | None]] = []
    txn_ids = itertools.count(1)
    open_: dict[int, int] = {}  # producer → its open transaction's txn_id
    producer_ids: dict[int, int] = {}
    first: dict[int, int] = {}  # txn_id → its first offset
    self_committed: set[int] = set()
    idempotent: set[int] = set()
    offset = 0
    for event in run:
        kind = event[0]
        if kind == "plain":
            batches.append((offset, event[1], None, None))
            if len(event) > 2 and event[2]:
                self_committed.add(offset)
            if len(event) > 3 and event[3]:
                idempotent.add(offset)
            for _ in range(event[1]):
                rows[offset] = (None, None)
                offset += 1
        elif kind == "send":
            txn_id = open_.setdefault(event[1], next(txn_ids))
            first.setdefault(txn_id, offset)
            producer_ids[txn_id] = FIRST_PRODUCER_ID + event[1]
            batches.append((offset, event[2], txn_id, None))
            for _ in range(event[2]):
                rows[offset] = (txn_id, None)
                offset += 1
        elif event[1] in open_:  # a marker ends the producer's open transaction
            rows[offset] = (open_.pop(event[1]), event[0].upper())
            batches.append((offset, 1, rows[offset][0], rows[offset][1]))
            offset += 1
    if ending != "open":
        for producer in sorted(open_):
            rows[offset] = (open_.pop(producer), ending.upper())
            batches.append((offset, 1, rows[offset][0], rows[offset][1]))
            offset += 1
    lso = min((first[t] for t in open_.values()), default=offset)
    return Log(rows, offset, lso, batches, {t: first[t] for t in open_.values()}, producer_ids, self_committed,
               idempotent)


def cut(log: Log, holes: set[int], log_start: int, cleaned: bool) -> None:
    """Compaction's holes (data records only: markers stay) and the records below the log start
    if `cleaned`. A run with holes keeps its batch row (batch_rows), nothing of it rewritten."""
    for o in sorted(log.rows):
        _, control = log.rows[o]
        if (o in holes and control is None) or (cleaned and o < log_start):
            del log.rows[o]


def store(conn: Connection, log: Log, log_start: int, compacted: bool) -> tuple[int, str]:
    """The log stored as a topic of one partition: (its topic_id, its name)."""
    name = f"conformance-{next(_names)}"
    topic_id = conn.execute(insert(topics).values(
        name=name, partition_count=1, cleanup_policy="compact" if compacted else "delete",
        retention_ms=-1, check_expected_offsets=False, created_ms=0).returning(topics.c.topic_id)).scalar_one()
    # A hole in a run from the log start on, as the cleaner marks the partition that has one.
    holes = any(o not in log.rows for base, count, _, _ in log.batches
                for o in range(max(base, log_start), base + count))
    conn.execute(insert(partitions).values(topic_id=topic_id, partition=0, next_offset=log.next_offset,
                                           log_start_offset=log_start, has_holes=holes))
    flagged = {o for base, count, _, _ in log.batches if base in log.self_committed for o in range(base, base + count)}
    # A flagged idempotent batch's records carry its producer id, as its writer writes them.
    producer = {o: IDEMPOTENT_PRODUCER_ID for o in flagged if _batch_base(log, o) in log.idempotent}
    if log.rows:
        conn.execute(insert(records), [
            {"topic_id": topic_id, "partition": 0, "offset": o, "timestamp_ms": o, "key": None,
             "value": None if control else f"v{o}", "headers": None, "control_type": control,
             "self_committed": o in flagged, "producer_id": producer.get(o)}
            for o, (_, control) in sorted(log.rows.items())])
    if rows := batch_rows(log):
        conn.execute(insert(record_batches), [{"topic_id": topic_id, "partition": 0, **row} for row in rows])
    if log.open_firsts:  # an open transaction's partition row, as every writer leaves it
        conn.execute(insert(transaction_partitions), [
            {"transactional_id": f"conformance-{topic_id}-{txn_id}", "topic_id": topic_id, "partition": 0,
             "txn_id": txn_id, "first_offset": first} for txn_id, first in log.open_firsts.items()])
    return topic_id, name


def batch_rows(log: Log) -> list[dict]:  # type: ignore[type-arg]
    """record_batches as the writers and the cleaner leave them for `log`: each append's run as
    written, kept while a record of it is left (a run with holes, or cut by the log start,
    keeps its row); a transaction's batches committed at its COMMIT marker, aborted by an ABORT
    marker, open without one; a plain batch committed at its last offset; a marker a batch of
    one offset with no state and no position."""
    outcome = {t: (control, o) for o, _, t, control in log.batches if control is not None}
    out = []
    # txn_id → its next sequence: each transaction an epoch of its own (its producer's epoch
    # bumped at each transaction, as under transaction version 2)
    sequence: dict[int, int] = {}
    idempotent_sequence = 0  # the idempotent producer's next, its epoch 0
    for base, count, t, control in log.batches:
        base_sequence = None
        if t is not None and control is None:
            base_sequence = sequence.get(t, 0)
            sequence[t] = base_sequence + count
        elif base in log.idempotent:
            base_sequence = idempotent_sequence
            idempotent_sequence += count
        if not any(o in log.rows for o in range(base, base + count)):
            continue
        if control is not None:
            state, position = None, None
        elif t is None:
            state, position = "committed", base + count - 1
        elif t not in outcome:
            state, position = "open", None
        elif outcome[t][0] == "COMMIT":
            state, position = "committed", outcome[t][1]
        else:
            state, position = "aborted", None
        idempotent = t is None and base in log.idempotent
        out.append({"base_offset": base, "record_count": count,
                    "producer_id": IDEMPOTENT_PRODUCER_ID if idempotent else None if t is None else log.producer_ids[t],
                    "producer_epoch": 0 if idempotent else t, "base_sequence": base_sequence, "txn_id": t,
                    "control_type": control, "state": state, "commit_position": position,
                    "self_committed": base in log.self_committed})
    return out


def model_rows(log: Log, log_start: int) -> list[tuple[int, int, str]]:
    """What read_committed may see of `log` (app/storage/read_committed.py's definition), as
    view_rows reads it: each data record stored at or past the log start, a plain one at its
    own offset, a committed transaction's at its COMMIT marker's offset, in commit order."""
    commits = {t: o for o, _, t, control in log.batches if control == "COMMIT"}
    seen = [(o, o if t is None else commits[t], f"v{o}") for o, (t, control) in log.rows.items()
            if control is None and o >= log_start and (t is None or t in commits)]
    return sorted(seen, key=lambda r: (r[1], r[0]))


def _batch_base(log: Log, offset: int) -> int:
    """The base offset of the append's run that holds `offset`."""
    return next(base for base, count, _, _ in log.batches if base <= offset < base + count)


def model_producers(log: Log, log_start: int) -> dict[int, int | None]:
    """The producer id the view gives each of model_rows' records, by offset: a transaction's
    producer's, the idempotent producer's for its plain batches, none for the others."""
    out: dict[int, int | None] = {}
    for o, _, _ in model_rows(log, log_start):
        t = log.rows[o][0]
        out[o] = (log.producer_ids[t] if t is not None
                  else IDEMPOTENT_PRODUCER_ID if _batch_base(log, o) in log.idempotent else None)
    return out


def view_producers(conn: Connection, topic_id: int) -> dict[int, int | None]:
    return dict(conn.execute(text('SELECT "offset", producer_id FROM committed_records '
                                  'WHERE topic_id = :t AND "partition" = 0'), {"t": topic_id}).all())


def view_rows(conn: Connection, topic_id: int) -> list[tuple[int, int, str]]:
    return [tuple(r) for r in conn.execute(text(
        'SELECT "offset", commit_position, value FROM committed_records WHERE topic_id = :t AND "partition" = 0 '
        'ORDER BY commit_position, "offset"'), {"t": topic_id})]


def fetched_rows(conn: Connection, topic_id: int, log_start: int, high_watermark: int, page: int,
                 max_bytes: int | None = None,
                 chunk_bytes: int | None = None) -> list[tuple[int, int | None, str | None]]:
    """Fetches from the log start to the high watermark, each of at most `page` records and
    `max_bytes` bytes (a Kafka fetch's first record whatever its size), read in chunks of about
    `chunk_bytes` (None: one) as HTTP Fetch streams them."""
    out: list[tuple[int, int | None, str | None]] = []
    position = log_start
    while position < high_watermark:
        plan = read.plan_fetch(conn, topic_id=topic_id, partition=0, offset=position, max_records=page,
                               isolation=IsolationLevel.READ_COMMITTED, max_bytes=max_bytes)
        records = [r for chunk in read.read_planned(conn, plan, chunk_bytes=chunk_bytes) for r in chunk]
        assert plan.result.next_offset > position or records, "a fetch neither read nor moved on"
        out += [(r.offset, r.commit_position, r.value) for r in records]
        position = plan.result.next_offset
    return out


class _OneConnection(Database):
    """The test's connection as the database the Kafka door reads: the generated log is never
    committed (each example rolls it back), so the door must read it in that transaction."""

    def __init__(self, conn: Connection) -> None:
        super().__init__(conn.engine)
        self._conn = conn

    @contextmanager
    def read(self) -> Iterator[Connection]:
        yield self._conn


FETCH_VERSION = 12  # the door's highest


@cache
def _settings(database_url: str) -> Settings:
    return Settings(database_url=database_url)  # built once: reading the environment costs 80 ms


def kafka_fetched_rows(conn: Connection, topic: str, log_start: int,
                       last_stable_offset: int, page: int, max_bytes: int | None) -> list[tuple[int, str | None]]:
    """What a read_committed Kafka consumer is handed through the Kafka door's Fetch
    (app.kafka.apis, in this process) from the log start up to the last stable offset: each
    answer applied as aiokafka's consumer applies it (PartitionRecords, KIP-98: a producer's
    records are dropped from an aborted transaction's first offset to its ABORT marker, a
    control batch is never handed out), the next Fetch from where the consumer stands then.
    Each answer of at most `page` records (the door's records limit) and `max_bytes` bytes
    (the partition's limit, which its first record may exceed)."""
    service_settings = _settings(conn.engine.url.render_as_string(hide_password=False))
    services = Services.build(service_settings.model_copy(update={"fetch_max_records_limit": page}),
                              _OneConnection(conn), FakeClock())
    apis = Apis(services, Broker(0, "127.0.0.1", 9092))
    m = request_class(ApiKey.FETCH, FETCH_VERSION)
    assert m is not None
    mod = __import__(m.__module__, fromlist=["x"])
    out: list[tuple[int, str | None]] = []
    position = log_start
    token = auth.bind(auth.Access(auth.NOBODY, None))  # authentication off, as the listener binds it
    try:
        while position < last_stable_offset:
            request = m(replica_id=-1, max_wait=datetime.timedelta(0), min_bytes=1, max_bytes=1 << 20,
                        isolation_level=1, session_id=0, session_epoch=-1, topics=(mod.FetchTopic(
                            topic=topic, partitions=(mod.FetchPartition(
                                partition=0, current_leader_epoch=-1, fetch_offset=position, last_fetched_epoch=-1,
                                log_start_offset=-1, partition_max_bytes=max_bytes or 1 << 20),)),),
                        forgotten_topics_data=(), rack_id="")
            answer, _, _, _ = apis.fetch_now(request, FETCH_VERSION)
            ((p,),) = [t.partitions for t in answer.responses]
            assert (p.error_code, p.last_stable_offset) == (ErrorCode.none, last_stable_offset)
            consumer = PartitionRecords(
                TopicPartition(topic, 0), MemoryRecords(bytes(p.records or b"")),
                [(a.producer_id, a.first_offset) for a in p.aborted_transactions or ()], position,
                None, None, True, READ_COMMITTED)
            out += [(r.offset, None if r.value is None else r.value.decode()) for r in consumer]
            assert consumer.next_fetch_offset > position, "a Fetch neither handed out records nor moved on"
            position = consumer.next_fetch_offset
    finally:
        auth.unbind(token)
    return out


@settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
@given(run=events, ending=st.sampled_from(["open", "commit", "abort"]), holes=st.sets(st.integers(0, 60), max_size=8), data=st.data(), cleaned=st.booleans(),
       compacted=st.booleans(), page=st.integers(1, 6), max_bytes=st.none() | st.integers(1, 30),
       chunk_bytes=st.none() | st.integers(1, 10), cap=st.integers(1, 12))
def test_fetch_and_the_counters_read_exactly_the_committed_records_view(  # type: ignore[no-untyped-def]
        database, run, ending, holes, data, cleaned, compacted, page, max_bytes, chunk_bytes, cap) -> None:
    log = build(run, ending)
    log_start = data.draw(st.integers(0, log.last_stable_offset), label="log_start")
    cut(log, holes if compacted else set(), log_start, cleaned)
    with database.engine.connect() as conn:
        topic_id, name = store(conn, log, log_start, compacted)
        try:
            # The batch rows describe the stored log, as the writers leave them (a plain batch
            # flagged or not, as before 0041).
            assert_batch_rows_match(conn, counters=False, unflagged_allowed=True)
            seen = view_rows(conn, topic_id)
            assert seen == model_rows(log, log_start)
            # Each record's producer, whichever part of the view reads it (a flagged idempotent
            # record's its own column, every other its batch row's).
            assert view_producers(conn, topic_id) == model_producers(log, log_start)
            assert fetched_rows(conn, topic_id, log_start, log.next_offset, page, max_bytes, chunk_bytes) == seen
            # Kafka's read_committed reads in offset order up to the last stable offset: the
            # view's rows lying below it, whatever their commit positions.
            assert kafka_fetched_rows(conn, name, log_start, log.last_stable_offset, page, max_bytes) == sorted(
                (o, v) for o, _, v in seen if o < log.last_stable_offset)
            # Whether or not the cleaner has deleted the rows below the log start: a record there
            # is read by nobody, and neither counter counts it.
            for position in range(log.next_offset + 1):
                assert read_committed.first_record_committed_from(conn, topic_id, 0, position, log_start) == min(
                    (o for o, c, _ in seen if c >= position and o < position), default=None)
                # What lies across it (app.domain.log_start): those records' first, and the
                # first and last of their transactions' markers.
                across = [(o, c) for o, c, _ in seen if c >= position and o < position]
                assert read_committed.committed_across(conn, topic_id, 0, position, log_start) == (
                    None if not across else Across(min(o for o, _ in across), min(c for _, c in across),
                                                   max(c for _, c in across)))
            for position in range(log.next_offset + 2):
                # What a reader in commit order at `position` has read (the view's rows
                # positioned below it) is what one in offset order has (those lying below it)
                # exactly where no committed transaction straddles it; an open one with
                # records below it leaves that to its outcome.
                in_commit_order = {o for o, c, _ in seen if c < position}
                in_offset_order = {o for o, _, _ in seen if o < position}
                undecided = log.last_stable_offset < min(position, log.next_offset)
                assert offsets.straddle_at(conn, topic_id, 0, position) == (
                    Straddle.UNDECIDED if undecided
                    else Straddle.NONE if in_commit_order == in_offset_order else Straddle.COMMITTED)
            # One group committed at each position in commit order (g...), and one at each offset
            # in offset order (o...): the records left to a reader of each are the view's rows
            # positioned, or lying, from there on.
            conn.execute(insert(group_offsets), [
                {"group_id": f"{prefix}{position:03}", "topic_id": topic_id, "partition": 0,
                 "committed_offset": position, "metadata": None, "committed_ms": 0, "read_order": order.value}
                for prefix, order in (("g", ReadOrder.COMMIT), ("o", ReadOrder.OFFSET))
                for position in range(log.next_offset + 1)])
            left = {"g": [sum(c >= position for _, c, _ in seen) for position in range(log.next_offset + 1)],
                    "o": [sum(o >= position for o, _, _ in seen) for position in range(log.next_offset + 1)]}
            expected = [(f"{prefix}{position:03}", min(n, cap), n < cap)
                        for prefix in ("g", "o") for position, n in enumerate(left[prefix])]
            # Every group at once (what a /metrics scrape reads)...
            assert [(c.group_id, c.count, c.exact)
                    for c in read_committed.committed_between_for_groups(conn, cap=cap, limit=10_000)
                    if c.topic_id == topic_id] == expected
            # ... and each group alone (what GET /v1/groups/{group_id}/lag reads).
            assert [(c.group_id, c.count, c.exact)
                    for group_id, _, _ in expected
                    for c in read_committed.committed_between_for_groups(conn, cap=cap, limit=None,
                                                                          group_id=group_id)
                    if c.topic_id == topic_id] == expected
        finally:
            conn.rollback()


def test_the_generated_logs_hold_what_the_view_must_leave_out() -> None:
    """The generator makes every kind of record the definition sorts: plain, committed,
    aborted and open transactions, markers (so the test above can fail on each)."""
    log = build([("plain", 1), ("send", 0, 2), ("send", 1, 1), ("commit", 0), ("abort", 1), ("send", 2, 1)])
    assert log.rows == {0: (None, None), 1: (1, None), 2: (1, None), 3: (2, None),
                        4: (1, "COMMIT"), 5: (2, "ABORT"), 6: (3, None)}
    assert (log.next_offset, log.last_stable_offset) == (7, 6)
    cut(log, {2}, 2, cleaned=True)
    assert log.rows == {3: (2, None), 4: (1, "COMMIT"), 5: (2, "ABORT"), 6: (3, None)}
    # The batch rows of the runs with a record left: the plain batch at 0 and the committed
    # batch [1, 3) went with their records.
    assert [(b["base_offset"], b["record_count"], b["txn_id"], b["control_type"], b["state"], b["commit_position"])
            for b in batch_rows(log)] == [(3, 1, 2, None, "aborted", None), (4, 1, 1, "COMMIT", None, None),
                                          (5, 1, 2, "ABORT", None, None), (6, 1, 3, None, "open", None)]


def test_a_batch_cut_by_the_log_start_keeps_its_row() -> None:
    """A plain run of three with the log start inside it, the records below not yet deleted:
    its row stays as written, so the view must drop the records below the log start itself."""
    log = build([("plain", 3), ("plain", 1)])
    cut(log, set(), 1, cleaned=False)
    assert [(b["base_offset"], b["record_count"], b["commit_position"]) for b in batch_rows(log)] == [(0, 3, 2), (3, 1, 3)]


def test_a_fetch_walks_past_a_batch_with_nothing_left_to_read_from_its_position(database) -> None:  # type: ignore[no-untyped-def]
    """A plain batch whose records from the fetch's position were compacted away keeps its
    batch row (a record below the position is left): the plan's page counts it, empty, and
    goes on to the batches after it instead of taking the short page for the log's end."""
    log = build([("plain", 3), ("plain", 1), ("plain", 1)])  # batches [0, 2], [3], [4]
    cut(log, {2}, 0, cleaned=False)
    with database.engine.connect() as conn:
        topic_id, _ = store(conn, log, 0, compacted=True)
        try:
            assert_batch_rows_match(conn, counters=False, unflagged_allowed=True)
            result = read.fetch(conn, topic_id=topic_id, partition=0, offset=2, max_records=2,
                                isolation=IsolationLevel.READ_COMMITTED)
            assert [(r.offset, r.commit_position, r.value) for r in result.records] == [(3, 3, "v3"), (4, 4, "v4")]
            assert result.next_offset == 5
        finally:
            conn.rollback()


def test_a_kafka_consumer_moves_past_a_batch_whose_last_records_were_compacted(database) -> None:  # type: ignore[no-untyped-def]
    """A plain batch [0, 2] whose records 1 and 2 were compacted away, then an open
    transaction (the last stable offset 3): a read_committed consumer handed record 0 stands
    past the whole batch, at 3, as Kafka's batch header (its last offset, kept whatever
    compaction removes) places it, not at 1, from where no Fetch would move it on."""
    log = build([("plain", 3), ("send", 0, 1)])
    cut(log, {1, 2}, 0, cleaned=False)
    with database.engine.connect() as conn:
        _, name = store(conn, log, 0, compacted=True)
        try:
            assert kafka_fetched_rows(conn, name, 0, log.last_stable_offset, 6, None) == [(0, "v0")]
        finally:
            conn.rollback()


# What lies across a position is walked over the committed transactional batches whose commit
# positions lie from the position up to the partition's largest span (commit_position -
# base_offset) past it (read_committed.committed_across_stmt): logs whose answers depend on
# that window reaching exactly far enough, longer than the generated ones.
_BETWEEN = 60
_SHORT = [("send", 1, 1), ("commit", 1)] * _BETWEEN
_WINDOW_LOGS = {
    # A transaction's record far below a position, its marker far above it, many between.
    "far below and far above": ([("send", 0, 1), *_SHORT, ("commit", 0)], set(), 0, False),
    # The widest transaction lies early, long done: every later position's window is that wide.
    "the widest long done": ([("send", 0, 1), ("plain", 40), ("commit", 0), *_SHORT], set(), 0, False),
    # Compaction left the widest batch's head unstored: its row still starts at 0.
    "a compacted head": ([("send", 0, 3), *_SHORT, ("commit", 0), *_SHORT], {0, 1}, 0, False),
    # A log start inside the widest batch, the records below it stored, or deleted.
    "a log start inside a batch": ([("send", 0, 3), *_SHORT, ("commit", 0)], set(), 1, False),
    "a log start inside a batch, cleaned": ([("send", 0, 3), *_SHORT, ("commit", 0)], set(), 2, True),
    # Two wide transactions overlapping, each with short ones inside.
    "overlapping": ([("send", 0, 2), *_SHORT[:20], ("send", 2, 1), *_SHORT[20:], ("commit", 0), *_SHORT[:30],
                     ("commit", 2)], set(), 0, False),
}


@pytest.mark.parametrize("name", list(_WINDOW_LOGS))
def test_what_lies_across_every_position_of_a_log_with_wide_transactions(database, name) -> None:  # type: ignore[no-untyped-def]
    run, holes, log_start, cleaned = _WINDOW_LOGS[name]
    log = build(run, "open")
    cut(log, holes, log_start, cleaned)
    with database.engine.connect() as conn:
        topic_id, _ = store(conn, log, log_start, compacted=bool(holes))
        try:
            seen = view_rows(conn, topic_id)
            for position in range(log.next_offset + 2):
                across = [(o, c) for o, c, _ in seen if c >= position and o < position]
                assert read_committed.committed_across(conn, topic_id, 0, position, log_start) == (
                    None if not across else Across(min(o for o, _ in across), min(c for _, c in across),
                                                   max(c for _, c in across))), position
        finally:
            conn.rollback()
