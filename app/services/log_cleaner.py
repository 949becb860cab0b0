"""The log cleaner: retention, compaction and the purge of deleted topics (Kafka's LogCleaner
and log retention), as a chore of the worker (app.worker.cleaner).

`run_once(now_ms)` visits every partition and returns what it deleted, by reason:

- below the log start: rows a DeleteRecords left (readers can no longer ask for them);
- retention (cleanup_policy delete, or compact,delete): the oldest records while they are
  older than retention_ms or the partition holds more than retention_bytes, up to the last
  stable offset, never splitting a transaction (app.domain.log_cleaning.retention_bound);
- compaction (compact, compact,delete): each key's latest committed record stays below the
  last stable offset (app.domain.log_cleaning.Compaction);
- deleted topics: their records, a chunk at a time.

Each step deletes a chunk of rows per database transaction, with the partition's counters
and log start in the same transaction (app.storage.cleaning), so readers and appenders wait
for it a short time only. Several cleaners may run at once (one per worker): prefix
deletions are idempotent (a row is deleted and counted once, the log start only moves up),
and a compaction pass, which keeps state across its transactions, holds a lease on its
partition. Between chunks it gives the machine back: it pauses after a chunk during which
its process's other writers wrote (YIELD_FACTOR), and to stay under
OUTBOX_CLEANER_MAX_RECORDS_PER_SECOND.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import astuple, dataclass

from sqlalchemy import Connection

from app import metrics
from app.logs import RateLimitedLog
from app.domain.clock import Clock
from app.domain.errors import LockWaitTimedOut, OffsetOutOfRange
from app.domain.log_cleaning import (
    Compaction,
    RetentionLimits,
    expired_until,
    expires_whole,
    keeps_first,
    may_expire_whole,
    retention_bound,
    throttle_pause_s,
)
from app.domain.topic_config import NO_LIMIT
from app.domain.types import IsolationLevel
from app.settings import Settings
from app.storage import cleaning, read, record_leaves
from app.storage.cleaning import PartitionState
from app.storage.engine import Database, after_commit
from app.storage import turns
from app.storage.turns import Turn, turn_if_free

logger = logging.getLogger(__name__)

# Rows per database transaction, by database. On SQLite every writer waits for the cleaner's
# write transaction (one write lock), which for a chunk retention deletes whole holds its
# DELETE and commit only: about 6 ms for 5,000 rows (2,000-row chunks once fell to 0.4 of a
# raw DELETE's rate). On PostgreSQL nobody waits for the rows it deletes (an appender only
# for the partition row's last UPDATE), and larger chunks pay the per-chunk statements less
# often (docs/benchmarks.md, the log cleaner).
CHUNK_ROWS = {"sqlite": 5_000, "postgresql": 20_000}
# Rows of a chunk that retention deletes whole: summed and deleted, never read into Python
# (app.storage.cleaning.chunk_summary, delete_summed). On PostgreSQL, where nobody waits for
# them, a chunk's fixed costs (its look, savepoint, counters and commit, some ten round trips)
# weigh less the more rows they serve (docs/benchmarks.md, the log cleaner, 4). Every other
# step keeps CHUNK_ROWS: it reads its rows, or names them in a statement (compaction's
# DELETE … IN).
WHOLE_CHUNK_ROWS = {"sqlite": 5_000, "postgresql": 50_000}
# SQLite: the cleaner checkpoints the WAL itself, out of the write turn, once its chunks have
# deleted this many records since its last checkpoint: some 700 pages of the WAL for records
# of ~100 bytes, under SQLite's own wal_autocheckpoint (1,000 pages), which would otherwise
# run the checkpoint inside the commit of whichever writer passes it, a Send's included,
# while the process's other writers wait. Each checkpoint flushes the WAL and the database
# file: after every 5,000-row chunk, it was a fifth of the chunk's time.
CHECKPOINT_RECORDS = 20_000
# The throttle (OUTBOX_CLEANER_MAX_RECORDS_PER_SECOND) averages over windows this long.
THROTTLE_WINDOW_S = 1.0
# After a chunk during which another writer of its process wrote (serve's Sends, where the
# cleaner runs as serve's worker), the cleaner pauses this many times as long as the chunk
# took: it then keeps a core busy a third of the time at most, where at full speed it took one
# of 2 cores from the requests (Sends' p50 2.2x, p99 1.5-2.1x during a pass; with the pause
# 1.2-1.3x and 1.3-1.4x, SQLite, docs/benchmarks.md). With nobody else writing it never pauses.
YIELD_FACTOR = 2.0
# A transaction spanning more rows than a chunk holds the retention bound at its first record
# until its marker is read: the chunk grows up to this before the cleaner gives up for now.
MAX_CHUNK_ROWS = 1_000_000
# Compaction's map of the dirty section's keys (Kafka's dedupe buffer): a dirty section with
# more keys is compacted in parts, this many keys at a time. The scan remembers besides every
# key it meets below the cleaning point (app.domain.log_cleaning.Compaction), unbounded by it.
MAX_COMPACTION_KEYS = 500_000
# Kafka's min.cleanable.dirty.ratio: compact once this share of the log below the last stable
# offset is dirty, so each pass's scan of the whole partition is paid for by as many new records.
MIN_CLEANABLE_DIRTY_RATIO = 0.5
LEASE_MS = 60_000
# Where PostgreSQL's autovacuum is off, the cleaner vacuums the log itself once it has deleted
# this share of the live records (and at least VACUUM_MIN_ROWS): autovacuum's own default
# thresholds (autovacuum_vacuum_scale_factor 0.2, threshold 50, raised here to make each
# VACUUM, which reads every index of the table, worth its cost). Without it a log whose old
# part the cleaner deletes would keep growing: nothing would make the space reusable.
VACUUM_SCALE_FACTOR = 0.2
VACUUM_MIN_ROWS = 10_000


@dataclass(frozen=True, slots=True)
class CleanerPass:
    below_log_start: int = 0  # data records deleted below a log start that DeleteRecords moved
    retention: int = 0  # data records deleted by retention_ms / retention_bytes
    compaction: int = 0  # data records deleted by compaction
    topics_purged: int = 0  # records of deleted topics deleted
    bytes_deleted: int = 0  # bytes of the data records above
    partitions_compacted: int = 0
    vacuums: int = 0  # VACUUMs of the log (PostgreSQL with autovacuum off)

    def __add__(self, other: CleanerPass) -> CleanerPass:
        return CleanerPass(*(a + b for a, b in zip(astuple(self), astuple(other), strict=True)))

    def __bool__(self) -> bool:
        return any(astuple(self))


_REASONS = ("below_log_start", "retention", "compaction", "topics_purged")
# Each reason is exported at 0 from the start: a dashboard's rate() of it has a series before
# the cleaner first deletes for that reason, not "No data".
for _reason in _REASONS:
    metrics.CLEANER_RECORDS_DELETED.labels(_reason)


class LogCleaner:
    def __init__(self, db: Database, settings: Settings, clock: Clock, *,
                 chunk_rows: int | None = None, whole_chunk_rows: int | None = None,
                 max_compaction_keys: int = MAX_COMPACTION_KEYS,
                 min_cleanable_dirty_ratio: float = MIN_CLEANABLE_DIRTY_RATIO,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        """`monotonic`: the seconds by which the line of a held lock is rate-limited."""
        self.db = db
        self.settings = settings
        self.clock = clock
        self.chunk_rows = CHUNK_ROWS[db.dialect] if chunk_rows is None else chunk_rows
        if whole_chunk_rows is None:  # chunk_rows alone (tests): both
            whole_chunk_rows = WHOLE_CHUNK_ROWS[db.dialect] if chunk_rows is None else chunk_rows
        self.whole_chunk_rows = whole_chunk_rows
        self.max_compaction_keys = max_compaction_keys
        self.min_cleanable_dirty_ratio = min_cleanable_dirty_ratio
        self.holder = uuid.uuid4().hex  # this cleaner's name on the leases it takes
        self._deleted_since_checkpoint = 0
        self._throttled_since = time.monotonic()  # the throttle's window: its start, and records in it
        self._throttled_records = 0
        self._chunk_since = time.monotonic()  # when the chunk being done began (its look included)
        self._writes_seen = db.writes  # the process's other writes, as of the last chunk
        self._deleted_since_vacuum = 0
        self._vacuums_itself: bool | None = None  # asked of the database once
        self._warn_of_an_outside_purge_holder = RateLimitedLog(logger)
        # A partition's lock held for minutes is met at every pass: a line each time was the
        # log of a busy partition, not of anything new.
        self._warn_of_a_held_lock = RateLimitedLog(logger, clock=monotonic)

    def run_once(self, now_ms: int | None = None, stop: Callable[[], bool] = lambda: False) -> CleanerPass:
        """One pass over every partition, then the deleted topics. `stop` is asked between
        chunks: a worker shutting down does not wait for a long pass."""
        now = self.clock() if now_ms is None else now_ms
        self._throttled_since, self._throttled_records = time.monotonic(), 0
        self._chunk_since, self._writes_seen = time.monotonic(), self.db.writes
        with self.db.read() as conn:
            states = cleaning.partition_states(conn)
        done = CleanerPass()
        for state in states:
            if stop():
                return done
            try:
                done += self._delete_prefix(state, now, stop)
                if state.config.cleanup_policy.compacts and not stop():
                    done += self._compact(state, now, stop)
            except LockWaitTimedOut as busy:
                # The partition's row lock held by another session (an appender's long
                # transaction) past OUTBOX_DB_LOCK_TIMEOUT_MS: its chunks committed so far stay,
                # the rest waits for the next pass, and the other partitions go on now.
                self._warn_of_a_held_lock("cleaning partition %d of topic %r waits for a lock; will retry: %s",
                                          state.partition, state.topic, busy.message)
        done += self._purge_deleted_topics(stop)
        if self._deleted_since_checkpoint:  # the pass's last chunks' pages, before it rests
            self.db.checkpoint()
            self._deleted_since_checkpoint = 0
        return done + self._reclaim_space(done)

    @contextmanager
    def _chunk(self) -> Iterator[Connection]:
        """The write transaction of one chunk, a background one (Database.write): its commit
        does not wait for the disk (SQLite synchronous=NORMAL, PostgreSQL synchronous_commit
        off), which was a sixth to a third of a chunk's time (docs/benchmarks.md). A crash
        of the machine, not of a process, may lose the last chunks committed, and never one
        without those after it: both databases replay their log in order, and any durable
        commit after a chunk (a Send's) flushes it too. The partition is then as a cleaner
        that stopped earlier left it: rows, counters and log start as they were before those
        chunks, consistent, and deleted again by the next pass. A reader that saw the log
        start higher may find records below it again, which it may read once more; none goes
        missing. On SQLite the WAL's checkpoint runs after the chunks (_chunk_done), out of
        the write turn that every other writer of the process waits for."""
        with self.db.write(background=True) as conn:
            yield conn

    def _chunk_done(self, step: CleanerPass, stop: Callable[[], bool]) -> None:
        """After a chunk's transaction, out of the write turn: SQLite's checkpoint when due; a
        pause when the process's own writers wrote meanwhile (the cleaner yields to them); and
        the pause that keeps it under OUTBOX_CLEANER_MAX_RECORDS_PER_SECOND."""
        deleted = step.below_log_start + step.retention + step.compaction + step.topics_purged
        self._deleted_since_checkpoint += deleted
        if self._deleted_since_checkpoint >= CHECKPOINT_RECORDS:
            self.db.checkpoint()
            self._deleted_since_checkpoint = 0
        now = time.monotonic()
        if self.db.writes != self._writes_seen:
            self._pause(YIELD_FACTOR * (now - self._chunk_since), stop)
        self._writes_seen, self._chunk_since = self.db.writes, time.monotonic()
        limit = self.settings.cleaner_max_records_per_second
        if limit is None:
            return
        self._throttled_records += deleted
        self._pause(throttle_pause_s(self._throttled_records, time.monotonic() - self._throttled_since, limit), stop)
        if time.monotonic() - self._throttled_since >= THROTTLE_WINDOW_S:
            # A new window, as Kafka's Throttler starts one after each check: time spent
            # with nothing to delete is not saved up for a burst later.
            self._throttled_since, self._throttled_records = time.monotonic(), 0
        self._chunk_since = time.monotonic()

    @staticmethod
    def _pause(seconds: float, stop: Callable[[], bool]) -> None:
        while seconds > 0 and not stop():  # a worker shutting down does not wait for a pause
            time.sleep(min(seconds, 0.1))
            seconds -= 0.1

    # --- retention ------------------------------------------------------------------------

    def _delete_prefix(self, state: PartitionState, now: int, stop: Callable[[], bool]) -> CleanerPass:
        """Below the log start everything goes; above it, retention decides (delete policies
        only), up to the last stable offset. A chunk of rows per database transaction, looked
        at first out of it (no snapshot is needed: delete_summed checks what it deletes): a
        writer that waits for the chunk's transaction (on SQLite every writer of the database)
        waits for its DELETE only, not for the probes and the sum."""
        config = state.config
        expire_before = None
        if config.cleanup_policy.deletes and config.retention_ms != NO_LIMIT:
            expire_before = now - config.retention_ms
        done, span = CleanerPass(), self.chunk_rows
        deleted_to = None  # the end of what this pass deleted last: nothing is stored below it
        summed_to = None  # the end of the last range summed that could not go whole
        while not stop():
            with self.db.autocommit() as conn:
                log_start, first = cleaning.chunk_start(conn, state.topic_id, state.partition, at_least=deleted_to)
                if first is None or log_start is None:
                    break
                start, summary = first.offset, None
                below_log_start = start < log_start
                if not below_log_start:
                    bytes_over = 0
                    if config.cleanup_policy.deletes and config.retention_bytes != NO_LIMIT:
                        bytes_over = max(0, state.size_bytes - done.bytes_deleted - config.retention_bytes)
                    if not config.cleanup_policy.deletes or (expire_before is None and not bytes_over):
                        break
                    end = min(state.last_stable, start + span)
                    limits = RetentionLimits(expire_before, bytes_over)
                    if end <= start or keeps_first(first, limits):
                        # Nothing below the last stable offset, or a first record that stays:
                        # everything after it stays too. The usual state of a partition under
                        # a retention of days, seen from one row instead of a chunk's.
                        break
                    # Most chunks go whole (plain records, all expired): deleted with a sum that
                    # says so, without reading each row; otherwise read one by one. The last
                    # row tells, in one probe, when the sum cannot say so (the chunk that holds
                    # the first record to stay, usually): then the rows are read at once. A
                    # range the sum said no to is read to its end before another sum, which
                    # would cover much of it again.
                    if span == self.chunk_rows and (summed_to is None or start >= summed_to):
                        whole_end = min(state.last_stable, start + self.whole_chunk_rows)
                        last = cleaning.last_stored(conn, state.topic_id, state.partition, start, whole_end)
                        if last is not None and may_expire_whole(last, limits):
                            summary = cleaning.chunk_summary(conn, state.topic_id, state.partition, start, whole_end)
                            if expires_whole(summary, limits):
                                end = whole_end
                            else:
                                summary, summed_to = None, whole_end
            with self._chunk() as conn:
                if below_log_start:
                    bound = min(log_start, start + self.chunk_rows)
                    records, size = cleaning.delete_prefix(conn, state.topic_id, state.partition, start, bound)
                    step = CleanerPass(below_log_start=records, bytes_deleted=size)
                elif summary is not None and cleaning.delete_summed(conn, state.topic_id, state.partition,
                                                                    start, end, summary):
                    bound = end
                    cleaning.count_prefix_deleted(conn, state.topic_id, state.partition, summary, bound)
                    step = CleanerPass(retention=summary.records, bytes_deleted=summary.size)
                else:
                    rows = cleaning.stored_rows(conn, state.topic_id, state.partition, start, end)
                    bound = retention_bound(rows, log_start=log_start, end=end, limits=limits)
                    if bound <= start:
                        # Held back by a transaction whose marker lies past the rows read,
                        # when every record read has expired: read more, up to the last
                        # stable offset, then give up for now. Held back by a record that
                        # has not expired, no longer read would move the bound (reading up
                        # to a million rows a pass here made every pass over a partition
                        # not yet due take seconds: docs/benchmarks.md, session 9).
                        if (end < state.last_stable and span < MAX_CHUNK_ROWS
                                and expired_until(rows, log_start=log_start, end=end, limits=limits) == end):
                            span *= 2
                            continue
                        break
                    records, size = cleaning.delete_prefix(conn, state.topic_id, state.partition, start, bound)
                    step = CleanerPass(retention=records, bytes_deleted=size)
                span = self.chunk_rows
                _count_after_commit(conn, step)
            done += step
            deleted_to = bound
            self._chunk_done(step, stop)
        return done

    # --- compaction -----------------------------------------------------------------------

    def _compact(self, state: PartitionState, now: int, stop: Callable[[], bool]) -> CleanerPass:
        with self.db.read() as conn:
            log_start = cleaning.log_start(conn, state.topic_id, state.partition)
        if log_start is None:
            return CleanerPass()
        checkpoint = max(state.cleaned_offset, log_start)
        dirty, total = state.last_stable - checkpoint, state.last_stable - log_start
        if dirty <= 0 or dirty < self.min_cleanable_dirty_ratio * total:
            return CleanerPass()
        # The lease's writes are background ones too: the cleaner's own, not a writer it
        # yields to (_chunk_done); and a lease whose claim a machine crash lost belonged to a
        # cleaner that did not survive it either.
        with self.db.write(background=True) as conn:
            if not cleaning.claim(conn, state.topic_id, state.partition, self.holder, now, now + LEASE_MS):
                return CleanerPass()  # another cleaner compacts it
        try:
            compaction = self._dirty_section(state, checkpoint, now)
            if compaction is None:
                return CleanerPass()
            return self._scan(state, compaction, log_start, stop)
        finally:
            with self.db.write(background=True) as conn:
                cleaning.release(conn, state.topic_id, state.partition, self.holder)

    def _dirty_section(self, state: PartitionState, checkpoint: int, now: int) -> Compaction | None:
        """The dirty section's records, fed to a Compaction as read_committed reads them
        (app.storage.read.fetch: one definition of what is committed and in which order), from
        the checkpoint to the last stable offset, or to the commit point at which the map
        holds max_compaction_keys keys. None if the log start moved past the checkpoint."""
        compaction = Compaction(tombstones_before_ms=now - state.config.delete_retention_ms,
                                max_keys_met=self.max_compaction_keys)
        position, point, last = checkpoint, state.last_stable, None
        while position < state.last_stable:
            with self.db.read() as conn:
                try:
                    page = read.fetch(conn, topic_id=state.topic_id, partition=state.partition, offset=position,
                                     max_records=self.chunk_rows, isolation=IsolationLevel.READ_COMMITTED)
                except OffsetOutOfRange:
                    return None
            for record in page.records:
                commit_position = record.commit_position
                assert commit_position is not None
                if commit_position >= state.last_stable:
                    break
                if commit_position != last and compaction.keys >= self.max_compaction_keys:
                    point = commit_position  # full: this part of the dirty section ends here
                    break
                compaction.supersede(record.key, commit_position, record.offset)
                last = commit_position
            else:
                if not page.records or page.next_offset <= position:
                    break
                position = page.next_offset
                continue
            break
        compaction.close_dirty_section(point)
        return compaction

    def _scan(self, state: PartitionState, compaction: Compaction, log_start: int,
              stop: Callable[[], bool]) -> CleanerPass:
        """The rows below the cleaning point, from the top down, a chunk per database
        transaction; then what the scan left to delete (the tombstones expired, the markers
        left empty), a chunk per transaction as well, and the new checkpoint with the last."""
        assert compaction.cleaning_point is not None
        done, below = CleanerPass(), compaction.cleaning_point
        left: list[int] | None = None  # what the scan left to delete, once it is over
        while not stop():  # stopped: the checkpoint stays, and the next pass scans again
            with self._chunk() as conn:
                rows = [] if left is not None else cleaning.compaction_rows(
                    conn, state.topic_id, state.partition, log_start, below, self.chunk_rows)
                if rows:
                    plan = compaction.scan(rows)
                    records, size = cleaning.delete_offsets(conn, state.topic_id, state.partition, plan.delete)
                    step = CleanerPass(compaction=records, bytes_deleted=size)
                else:
                    if left is None:
                        # Ascending: a marker goes with its transaction's last records, or after.
                        left = sorted(compaction.tombstones_expired() + compaction.markers_left_empty())
                    offsets, left = left[:self.chunk_rows], left[self.chunk_rows:]
                    records, size = cleaning.delete_offsets(conn, state.topic_id, state.partition, offsets)
                    if not left:
                        cleaning.set_cleaned_offset(conn, state.topic_id, state.partition, compaction.cleaning_point)
                    step = CleanerPass(compaction=records, bytes_deleted=size, partitions_compacted=int(not left))
                # The lease renewed with every chunk, the scan's and the deletions after it alike:
                # those may be many chunks too, and no other cleaner may start on the partition.
                now = self.clock()
                cleaning.claim(conn, state.topic_id, state.partition, self.holder, now, now + LEASE_MS)
                _count_after_commit(conn, step)
            done += step
            self._chunk_done(step, stop)
            if rows:
                below = rows[-1].offset
            elif not left:
                break
        return done

    # --- space ----------------------------------------------------------------------------

    def _reclaim_space(self, done: CleanerPass) -> CleanerPass:
        self._deleted_since_vacuum += done.below_log_start + done.retention + done.compaction + done.topics_purged
        if not self._deleted_since_vacuum:
            return CleanerPass()
        with self.db.read() as conn:
            if self._vacuums_itself is None:
                self._vacuums_itself = not cleaning.reclaims_space_itself(conn)
            if not self._vacuums_itself:
                return CleanerPass()
            due = max(VACUUM_MIN_ROWS, VACUUM_SCALE_FACTOR * cleaning.live_records(conn))
        if self._deleted_since_vacuum < due:
            return CleanerPass()
        with self.db.autocommit() as conn:
            cleaning.vacuum_records(conn)
        self._deleted_since_vacuum = 0
        return CleanerPass(vacuums=1)

    # --- deleted topics -------------------------------------------------------------------

    def _purge_deleted_topics(self, stop: Callable[[], bool]) -> CleanerPass:
        if not record_leaves.records_in_leaves(self.db.dialect):
            return self._purge_deleted_topics_now(stop, in_leaves=False)
        # One process at a time detaches and drops leaves; the others leave it to that one.
        with self.db.autocommit() as conn, turn_if_free(conn, Turn.PURGE) as ours:
            if not ours:
                # Another of this service's processes purges for this one; a session of
                # another role holding the turn purges nothing, and holds every purge off.
                held_by = turns.holder(conn, Turn.PURGE)
                if held_by is not None and not held_by.ours:
                    self._warn_of_an_outside_purge_holder(
                        "deleted topics' records are not purged: their turn is held by %s", held_by)
                return CleanerPass()
            return self._purge_deleted_topics_now(stop, in_leaves=True)

    def _purge_deleted_topics_now(self, stop: Callable[[], bool], *, in_leaves: bool) -> CleanerPass:
        purged = 0
        try:
            if in_leaves:
                with self.db.autocommit() as conn:
                    record_leaves.finish_pending_detach(conn)
                    for topic_id in record_leaves.orphaned_leaf_topics(conn):
                        purged += record_leaves.drop_record_leaves(conn, topic_id)
            while not stop():
                if not in_leaves:
                    with self._chunk() as conn:
                        topic_id = cleaning.next_deleted_topic(conn)
                        if topic_id is None:
                            break
                        n = cleaning.purge_deleted_topic(conn, topic_id, self.chunk_rows)
                        _count_after_commit(conn, CleanerPass(topics_purged=n))
                else:
                    with self.db.read() as conn:
                        topic_id = cleaning.next_deleted_topic(conn)
                    if topic_id is None:
                        break
                    # The leaves first: a process stopped between the two finds the topic
                    # again, with no leaves left, and forgets it then.
                    with self.db.autocommit() as conn:
                        n = record_leaves.drop_record_leaves(conn, topic_id)
                    # Its batch rows and ids a chunk at a time: the loop finds the topic again
                    # (and no leaves) until the last chunk forgets it.
                    with self._chunk() as conn:
                        cleaning.forget_deleted_topic(conn, topic_id, self.chunk_rows)
                        _count_after_commit(conn, CleanerPass(topics_purged=n))
                purged += n
                self._chunk_done(CleanerPass(topics_purged=n), stop)
        except record_leaves.LeafBusy as busy:
            # A long reader of `records`: the leaf waits, detach pending, for the next pass,
            # and the topic's other leaves, batch rows and ids with it.
            logger.info("%s", busy)
            purged += busy.dropped
        return CleanerPass(topics_purged=purged)


def _count_after_commit(conn, step: CleanerPass) -> None:  # type: ignore[no-untyped-def]
    def count() -> None:
        for reason in _REASONS:
            n = getattr(step, reason)
            if n:
                metrics.CLEANER_RECORDS_DELETED.labels(reason).inc(n)
        if step.bytes_deleted:
            metrics.CLEANER_BYTES_DELETED.inc(step.bytes_deleted)

    after_commit(conn, count)
