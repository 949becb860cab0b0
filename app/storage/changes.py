"""Waking readers that wait for a partition's log to change (long-poll Fetch, the SSE stream).

Every write transaction that takes offsets in a partition (records of a Send, control markers
of a completion; app.storage.log._take_offsets) notes the partition on its connection
(`mark_changed`). Then:

- in this process, once the transaction has committed, `Database.write` hands the partitions
  to `LogChanges.changed`, which wakes the waiters of those partitions at once;
- on PostgreSQL, the transaction also sends `NOTIFY outbox_log, '<topic_id>:<partition>'` per
  partition before it commits (`announce`): PostgreSQL delivers a notification only when the
  transaction that sent it commits, and never one of a transaction that rolls back, so a
  waiter is never woken for records that are not there. Each API process LISTENs on one
  connection of its own (a thread), and the appends made in an application's own transaction
  notify from the trigger that publishes them (migration 0009);
- on SQLite, other processes' commits are noticed by `PRAGMA data_version` on one connection,
  read every DATA_VERSION_POLL_S: a counter SQLite keeps in shared memory, no read of the log.
  When it moved, the partitions' log ends (`partitions`, a row per partition) say which grew.

A notification can be lost (the listening connection drops): a waiter then re-checks after
RECHECK_S at most. A lost wake costs latency, never correctness, because a waiter always
fetches again before it answers.

Waiting is by version: a reader takes `version(keys)` before it fetches, and `wait(keys, since)`
returns at once if any of those partitions changed after the version was taken, so a commit
that lands between the fetch and the wait is never slept through.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import threading
from collections.abc import Iterable
from dataclasses import dataclass

from sqlalchemy import Connection, text
from sqlalchemy.engine import make_url

logger = logging.getLogger(__name__)

CHANNEL = "outbox_log"
# The longest a lost notification can delay a waiter. Notifications are lost only when the
# listening connection restarts (which then wakes every waiter anyway): this is the net under
# that net. A waiting request checks this often when nothing happens, and a consumer asks again
# when its wait ends (at most OUTBOX_FETCH_MAX_WAIT_MS, 30 s by default): so 500 idle consumers
# cost about 17 fetches a second, whatever their max_wait_ms (docs/benchmarks.md, session 11).
RECHECK_S = 30.0
DATA_VERSION_POLL_S = 0.05  # SQLite: how often other processes' commits are looked for
_CHANGED = "outbox_changed_partitions"

Key = tuple[int, int]  # (topic_id, partition)


def mark_changed(conn: Connection, topic_id: int, partition: int) -> None:
    """Called where a write transaction takes offsets: this partition's log grows at commit."""
    conn.info.setdefault(_CHANGED, set()).add((topic_id, partition))


def take_changed(conn: Connection) -> set[Key]:
    return conn.info.pop(_CHANGED, set())


def peek_changed(conn: Connection) -> set[Key]:
    return conn.info.get(_CHANGED, set())


_NOTIFY = text("SELECT pg_notify(:channel, k) FROM unnest(CAST(:keys AS text[])) AS k")


def announce(conn: Connection, keys: set[Key]) -> None:
    """Inside the writing transaction, before its commit: NOTIFY every listening process
    (PostgreSQL; SQLite has no NOTIFY). One statement whatever the number of partitions."""
    if keys and conn.dialect.name == "postgresql":
        conn.execute(_NOTIFY, {"channel": CHANNEL, "keys": [f"{t}:{p}" for t, p in sorted(keys)]})


@dataclass(frozen=True, slots=True)
class Version:
    everything: int
    keys: dict[Key, int]


class LogChanges:
    """This process's waiters, by partition. Its methods but `changed` and the listener run on
    the event loop; `changed` may be called from any thread."""

    def __init__(self, database_url: str) -> None:
        self.database_url = database_url
        self._loop: asyncio.AbstractEventLoop | None = None
        self._counts: dict[Key, int] = {}
        self._everything = 0  # moved when any partition may have changed (SQLite, a lost listener)
        self._waiters: dict[Key | None, set[asyncio.Event]] = {}
        self._closing = threading.Event()
        self._thread: threading.Thread | None = None

    # --- life ---------------------------------------------------------------------------

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        target = self._listen_postgresql if self.database_url.startswith("postgresql") else self._watch_sqlite
        self._thread = threading.Thread(target=target, name="outbox-log-changes", daemon=True)
        self._thread.start()

    @property
    def closing(self) -> bool:
        return self._closing.is_set()

    def close(self) -> None:
        """The server is stopping: every wait ends now, and no new one begins."""
        self._closing.set()
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._wake_all)

    def stop(self) -> None:
        self.close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    # --- waiting ------------------------------------------------------------------------

    def version(self, keys: Iterable[Key]) -> Version:
        return Version(self._everything, {k: self._counts.get(k, 0) for k in keys})

    def _moved(self, since: Version) -> bool:
        return (self.closing or self._everything != since.everything
                or any(self._counts.get(k, 0) != n for k, n in since.keys.items()))

    async def wait(self, since: Version, timeout_s: float, *, any_partition: bool = False) -> bool:
        """Until a partition of `since` changes after it was taken (or, with `any_partition`,
        any partition: for a reader that does not know its partitions' ids yet), the server
        closes, or `timeout_s` (at most RECHECK_S) passes. Whether something changed."""
        if self._moved(since):
            return True
        if timeout_s <= 0:
            return False
        event = asyncio.Event()
        keys: list[Key | None] = [None] if any_partition or not since.keys else list(since.keys)
        for k in keys:
            self._waiters.setdefault(k, set()).add(event)
        self._waiters.setdefault(None, set())
        try:
            await asyncio.wait_for(event.wait(), timeout=min(timeout_s, RECHECK_S))
        except TimeoutError:
            pass
        finally:
            for k in keys:
                waiting = self._waiters.get(k)
                if waiting is not None:
                    waiting.discard(event)
                    if not waiting and k is not None:
                        del self._waiters[k]
        return self._moved(since) or event.is_set()

    # --- being told ---------------------------------------------------------------------

    def changed(self, keys: Iterable[Key], *, own: bool = True) -> None:
        """These partitions' logs grew (a commit of this process, or one another process was
        heard of: `own` False)."""
        keys = list(keys)
        if keys and self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._bump, keys)

    def changed_everywhere(self) -> None:
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._bump_everything)

    def _bump(self, keys: list[Key]) -> None:
        for k in keys:
            self._counts[k] = self._counts.get(k, 0) + 1
            for event in self._waiters.get(k, ()):
                event.set()
        for event in self._waiters.get(None, ()):  # waiters for any partition
            event.set()

    def _bump_everything(self) -> None:
        self._everything += 1
        self._wake_all()

    def _wake_all(self) -> None:
        for waiting in self._waiters.values():
            for event in waiting:
                event.set()

    # --- listening ----------------------------------------------------------------------

    def _listen_postgresql(self) -> None:
        import psycopg

        conninfo = make_url(self.database_url).set(drivername="postgresql").render_as_string(hide_password=False)
        while not self.closing:
            try:
                with psycopg.connect(conninfo, autocommit=True) as conn:
                    conn.execute(f"LISTEN {CHANNEL}")
                    # Anything committed while no connection listened was not heard.
                    self.changed_everywhere()
                    while not self.closing:
                        # Each notification passed on as it arrives: the generator runs until
                        # its timeout (which only bounds how late `closing` is seen), so
                        # collecting them for one call after it kept every wake waiting up to
                        # half a second.
                        for notify in conn.notifies(timeout=0.5):
                            topic_id, _, partition = notify.payload.partition(":")
                            self.changed([(int(topic_id), int(partition))], own=False)
            except Exception as e:  # noqa: BLE001 - the database may be restarting: waiters re-check meanwhile
                if self.closing:
                    return
                logger.warning("not listening for log changes (%s); waiting fetches re-check every %.0f s",
                               type(e).__name__, RECHECK_S)
                self._closing.wait(RECHECK_S)

    def _watch_sqlite(self) -> None:
        path = make_url(self.database_url).database
        if not path or path == ":memory:":  # an in-memory database has no other process
            return
        version, ends = None, None
        conn = None
        while not self.closing:
            try:
                if conn is None:
                    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)
                    version, ends = None, None
                now = conn.execute("PRAGMA data_version").fetchone()[0]
                if now != version:
                    # Some connection committed (this process's own included): which partitions'
                    # logs grew is in `partitions`, a row per partition, read only then. Every
                    # append and marker moves next_offset (app.storage.log._take_offsets).
                    latest = dict(((t, p), n) for t, p, n in conn.execute(
                        'SELECT topic_id, "partition", next_offset FROM partitions'))
                    if ends is not None:
                        grown = [k for k, n in latest.items() if ends.get(k) != n]
                        if grown:
                            self.changed(grown, own=False)
                    version, ends = now, latest
            except sqlite3.Error:
                if conn is not None:
                    conn.close()
                conn = None
                self.changed_everywhere()  # what happened meanwhile is unknown: look again
                self._closing.wait(RECHECK_S)
            self._closing.wait(DATA_VERSION_POLL_S)
        if conn is not None:
            conn.close()
