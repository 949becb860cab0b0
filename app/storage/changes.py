"""Waking readers that wait for a partition's log to change (long-poll Fetch, the SSE stream).

Every write transaction that takes offsets in a partition (records of a Send, control markers
of a completion; app.storage.log_end.take_offsets), or deletes it (DeleteTopics; its waiters
then find it gone), notes the partition on its connection (`mark_changed`). Then:

- in this process, once the transaction has committed, `Database.write` hands the partitions
  to `LogChanges.changed`, which wakes the waiters of those partitions at once;
- on PostgreSQL, the transaction also sends `NOTIFY outbox_log, '<topic_id>:<partition>'` per
  partition before it commits: PostgreSQL delivers a notification only when the transaction
  that sent it commits, and never one of a transaction that rolls back, so a waiter is never
  woken for records that are not there. A statement that takes offsets through
  app.storage.log_end.TAKEN (every Send's batch, every marker) notifies from within itself
  (`notify_in_statement`), so the commit needs no statement of its own for it; the partitions
  marked otherwise (a delete, SQLite's and PostgreSQL's plain take_offsets) are notified in one
  statement just before the commit (`announce`). Each API process LISTENs on one
  connection of its own (a thread), and the appends made in an application's own transaction
  notify from the trigger that publishes them (migration 0009);
- on SQLite, other processes' commits are noticed by `PRAGMA data_version` on one connection,
  read every DATA_VERSION_POLL_S: a counter SQLite keeps in shared memory, no read of the log.
  When it moved, the partitions' log ends (`partitions`, a row per partition) say which grew.

Only the waiters of a partition that changed are woken: a commit to a partition nobody waits
on costs a counter and a dictionary entry, whatever the number of waiters, taken in the
thread that tells of it, without waking the event loop. The entry is forgotten once the
partition has not changed for FORGET_AFTER_S (`_forget`): topics come and go.

A notification can be lost (the listening connection drops; its reconnection then wakes every
waiter, as what committed meanwhile is unknown). Under that, on PostgreSQL, the listener reads
every partition's log end every RECHECK_S and wakes the waiters of those that grew unheard of:
one query a process, not one read a waiter. A lost wake costs latency, never a record: every
answer is a read's, and a reader goes on from the position that read gave it.

Waiting is by version: `now()` is a sequence number that every change heard of moves, and each
partition remembers the number of its last change. A reader takes `now()` before it fetches,
and `wait(keys, since)` returns at once if one of its partitions changed after that, so a
commit that lands between the fetch and the wait is never slept through. The reader need not
know its partitions' ids when it takes the version (a topic's id comes with the fetch), and a
reader that shares another's fetch takes that fetch's version as its own
(app.services.shared_reads).
"""

from __future__ import annotations

import asyncio
import logging
import re
import selectors
import socket
import sqlite3
import threading
import time
from collections.abc import Iterable
from typing import Any

from sqlalchemy import Connection, Text, cast, func, literal_column, text
from sqlalchemy.engine import make_url

from app.logs import RateLimitedLog

logger = logging.getLogger(__name__)

CHANNEL = "outbox_log"
# The longest a lost notification can delay a waiter (PostgreSQL). Notifications are lost only
# when the listening connection restarts (which then wakes every waiter anyway): this is the
# net under that net, one read of the partitions' log ends a process, whatever the number of
# waiters.
RECHECK_S = 30.0
DATA_VERSION_POLL_S = 0.05  # SQLite: how often other processes' commits are looked for
# A partition's last change is remembered at least this long, at most twice it (`_forget`):
# longer than a long-poll holds its version (OUTBOX_FETCH_MAX_WAIT_MS is at most 600 s).
FORGET_AFTER_S = 600.0
# The most partitions whose last change is remembered (`changed`): past it every entry is
# forgotten at once, as `_forget` forgets old ones (each waiting reader then reads once more).
# Far more than the partitions of any deployment the log is built for (each is a table of its
# own on PostgreSQL, and tests of 2,048 came near its lock table), and some 20 MB of entries:
# a bound in case anything unheard of reaches the map, since notifications of partitions the
# process does not know are passed over before it (`_hear`).
MAX_REMEMBERED_PARTITIONS = 100_000
# PostgreSQL: how soon after a notification of a partition the listener does not know it looks
# at the partitions' log ends again (`_listen_postgresql`), which wakes that partition's
# waiters if it is a new one that grew, or one created and deleted since. At most one look a second, however many notifications
# name partitions that do not exist.
UNKNOWN_LOOK_S = 1.0
_CHANGED = "outbox_changed_partitions"
_ANNOUNCED = "outbox_announced_partitions"  # of _CHANGED, those a statement has notified already

Key = tuple[int, int]  # (topic_id, partition)

_PAYLOAD = re.compile(rb"(0|[1-9][0-9]{0,17}):(0|[1-9][0-9]{0,9})")
_PARTITION_MAX = 2**31 - 1  # `partitions.partition` is an integer


def parse_payload(payload: bytes) -> Key | None:
    """The partition a notification's payload `<topic_id>:<partition>` names (as `announce` and
    the appender write it), or None for anything else."""
    found = _PAYLOAD.fullmatch(payload)
    if found is None or int(found[2]) > _PARTITION_MAX:
        return None
    return int(found[1]), int(found[2])


def mark_changed(conn: Connection, topic_id: int, partition: int, *, announced: bool = False) -> None:
    """Called where a write transaction takes offsets (this partition's log grows at commit) or
    deletes the partition. `announced`: by a statement that notified for it itself
    (`notify_in_statement`)."""
    key = (topic_id, partition)
    changed = conn.info.setdefault(_CHANGED, set())
    if announced:
        # Counted as announced only if nothing marked the partition before without notifying:
        # a statement that notifies may run in a savepoint that is rolled back, which takes its
        # notification with it, and the earlier change would then go unheard. A second
        # notification of the same partition costs a waiter one read.
        if key not in changed:
            conn.info.setdefault(_ANNOUNCED, set()).add(key)
    else:
        # Notified again at commit even if a statement did already, for the same reason.
        conn.info.get(_ANNOUNCED, set()).discard(key)
    changed.add(key)


def take_changed(conn: Connection) -> set[Key]:
    conn.info.pop(_ANNOUNCED, None)
    return conn.info.pop(_CHANGED, set())


def notify_in_statement(topic_id: Any, partition: Any) -> Any:
    """SQL, for the RETURNING of a statement that takes a partition's offsets (PostgreSQL): the
    NOTIFY `announce` would send for the partition of these columns, sent by that statement,
    a round trip fewer. Like any NOTIFY it is delivered when the transaction commits, and
    dropped if it rolls back. The payload is the one the listener parses."""
    return func.pg_notify(literal_column(f"'{CHANNEL}'"),
                          cast(topic_id, Text).op("||")(literal_column("':'")).op("||")(cast(partition, Text)))


_NOTIFY = text("SELECT pg_notify(:channel, k) FROM unnest(CAST(:keys AS text[])) AS k")


def announce(conn: Connection) -> None:
    """Inside the writing transaction, before its commit: NOTIFY every listening process of the
    partitions marked changed that no statement has notified for (PostgreSQL; SQLite has no
    NOTIFY). One statement whatever the number of partitions, and none if there are none."""
    keys = conn.info.get(_CHANGED, set()) - conn.info.get(_ANNOUNCED, set())
    if keys and conn.dialect.name == "postgresql":
        conn.execute(_NOTIFY, {"channel": CHANNEL, "keys": [f"{t}:{p}" for t, p in sorted(keys)]})


class LogChanges:
    """This process's waiters, by partition. Its methods but `changed`, `changed_everywhere`,
    `close` and the listener run on the event loop; those may be called from any thread."""

    def __init__(self, database_url: str) -> None:
        self.database_url = database_url
        self._loop: asyncio.AbstractEventLoop | None = None
        self._now = 0  # moved by every change heard of
        self._changed_at: dict[Key, int] = {}  # each partition's last change, in `_now`'s numbers
        self._everything_at = 0  # when any partition may have changed (a listener reconnecting)
        # `_forget`: the version below which changes are forgotten next, and when.
        self._forget_below = 0
        self._forget_at = time.monotonic() + FORGET_AFTER_S
        self._waiters: dict[Key, set[asyncio.Event]] = {}
        # Held while the version moves (from any thread: the request threads' commits, the
        # listener) and while a waiter registers and looks at it (on the loop). Without it two
        # commits could both take the same next version, and a reader that took that version
        # between them would sleep through the second; and a change could be made between a
        # waiter's registration and its look without either seeing the other.
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._warn_of_odd_payload = RateLimitedLog(logger)  # `_hear`: a payload naming no partition
        self._unknown_heard = False  # `_hear`: a partition not known at the listener's last look
        # PostgreSQL: the listener waits on its connection's socket and on this pair's reading
        # end, to which `close` writes, so that a stop is seen at once rather than at the end
        # of a wait (a timed wait made every app's shutdown wait half of it on average).
        self._stop_signal: tuple[socket.socket, socket.socket] | None = None
        # Set once changes made elsewhere are heard of (LISTEN issued, data_version read): a
        # commit from then on wakes its waiters.
        self.listening = threading.Event()
        self._thread: threading.Thread | None = None

    # --- life ---------------------------------------------------------------------------

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Start listening (once: a second call does nothing)."""
        if self._thread is not None:
            return
        self._loop = loop
        # Settings take SQLite or PostgreSQL only, and PostgreSQL's URL may begin postgres://.
        if not self.database_url.startswith("sqlite"):
            self._stop_signal = socket.socketpair()
            self._thread = threading.Thread(target=self._listen_postgresql, args=(self._stop_signal[0],),
                                            name="outbox-log-changes", daemon=True)
        else:
            self._thread = threading.Thread(target=self._watch_sqlite, name="outbox-log-changes", daemon=True)
        self._thread.start()

    @property
    def closing(self) -> bool:
        return self._closing.is_set()

    def close(self) -> None:
        """The server is stopping: every wait ends now, and no new one begins."""
        self._closing.set()
        if self._stop_signal is not None:
            try:
                self._stop_signal[1].send(b"x")
            except OSError:  # closed by `stop`: the listener has ended
                pass
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._wake_all)

    def stop(self) -> None:
        self.close()
        if self._thread is not None:
            self._thread.join(timeout=5)
            if self._stop_signal is not None and not self._thread.is_alive():
                for end in self._stop_signal:
                    end.close()

    # --- waiting ------------------------------------------------------------------------

    def now(self) -> int:
        """The version to take before a fetch: pass it to `wait` after."""
        return self._now

    def moved(self, keys: Iterable[Key], since: int) -> bool:
        """Whether one of these partitions may have changed after `since` (or the server is closing)."""
        if self.closing:
            return True
        changed_at = self._changed_at
        if any(changed_at.get(k, 0) > since for k in keys):
            return True
        # Read after the partitions' entries: `_forget` raises it before it drops any.
        return self._everything_at > since

    @property
    def waiting(self) -> int:
        """Waits in progress, one per partition waited on."""
        return sum(len(w) for w in self._waiters.values())

    async def wait(self, keys: Iterable[Key], since: int, timeout_s: float) -> bool:
        """Until one of these partitions changes after `since`, the server closes, or
        `timeout_s` passes. Whether something changed."""
        keys = list(keys)
        if self.moved(keys, since):
            return True
        if timeout_s <= 0:
            return False
        event = asyncio.Event()
        with self._lock:
            for k in keys:
                self._waiters.setdefault(k, set()).add(event)
            # Looked at again once registered: a change made before the registration was not
            # told to this waiter (`changed` saw nobody waiting), so it must be seen here.
            if self.moved(keys, since):
                event.set()
        try:
            # asyncio.timeout, not wait_for: no second task per waiter (Python 3.11).
            async with asyncio.timeout(timeout_s):
                # A wake is for the partition, not for this waiter's version: one scheduled by
                # a change this waiter's reader had already seen (its version taken between the
                # change's count and the wake reaching the loop), or meant for an older waiter
                # of the partition, finds it too. Only a change after `since` ends the wait.
                # Nothing runs between the look and the clear: a change counted after the look
                # schedules a wake of its own, which sets the event again.
                while True:
                    await event.wait()
                    if self.moved(keys, since):
                        break
                    event.clear()
        except TimeoutError:
            pass
        finally:
            with self._lock:
                for k in keys:
                    waiting = self._waiters.get(k)
                    if waiting is not None:
                        waiting.discard(event)
                        if not waiting:
                            del self._waiters[k]
        return self.moved(keys, since)

    # --- being told ---------------------------------------------------------------------

    def changed(self, keys: Iterable[Key]) -> None:
        """These partitions' logs grew (a commit of this process, or one another process was
        heard of). The version moves here, in the caller's thread; the event loop is woken only
        for the partitions someone waits on. Every Send's commit calls this twice, from its
        request thread and from the listener hearing its NOTIFY, and a producer's partitions
        usually have no waiter in this process: two wake-ups of the loop a Send saved."""
        with self._lock:
            self._now += 1
            now = self._now
            waited = []
            for k in keys:
                self._changed_at[k] = now
                if k in self._waiters:
                    waited.append(k)
            if len(self._changed_at) > MAX_REMEMBERED_PARTITIONS:
                # Raised before the entries go: `moved` reads it after them.
                self._everything_at = now
                self._changed_at.clear()
            self._forget()
        if waited and self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._wake, waited)

    def changed_everywhere(self) -> None:
        with self._lock:
            self._now += 1
            self._everything_at = self._now
            anyone = bool(self._waiters)
        if anyone and self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._wake_all)

    def _forget(self) -> None:
        """(The lock held.) Every FORGET_AFTER_S, forget the partitions whose last change is
        older than the previous such moment: a process hears of every partition that changes,
        and topics come and go. A reader whose version is older than that (it has held it more
        than FORGET_AFTER_S: a stream with nothing to send) is told that its partitions may
        have changed, as after a listener's reconnection: one read more, never a change slept
        through."""
        at = time.monotonic()
        if at < self._forget_at:
            return
        floor = self._forget_below
        if floor:
            # Raised before the entries go: `moved` reads it after them.
            self._everything_at = max(self._everything_at, floor)
            for k in [k for k, v in self._changed_at.items() if v < floor]:
                del self._changed_at[k]
        self._forget_below = self._now
        self._forget_at = at + FORGET_AFTER_S

    def _wake(self, keys: list[Key]) -> None:
        for k in keys:
            for event in self._waiters.get(k, ()):
                event.set()

    def _wake_all(self) -> None:
        for waiting in self._waiters.values():
            for event in waiting:
                event.set()

    # --- listening ----------------------------------------------------------------------

    def _listen_postgresql(self, stopping: socket.socket) -> None:
        """`stopping`: readable once `close` was called."""
        import psycopg

        conninfo = make_url(self.database_url).set(drivername="postgresql").render_as_string(hide_password=False)
        while not self.closing:
            try:
                with psycopg.connect(conninfo, autocommit=True) as conn, selectors.DefaultSelector() as sockets:
                    # A selector, not select.select: that refuses a descriptor of 1024 or more,
                    # which a service holding many connections (its open-file limit raised at
                    # start) gives this connection, and the listener would never listen.
                    sockets.register(conn.fileno(), selectors.EVENT_READ)
                    sockets.register(stopping, selectors.EVENT_READ)
                    conn.execute(f"LISTEN {CHANNEL}")
                    ends = _log_ends(conn)
                    # Anything committed while no connection listened was not heard.
                    self.changed_everywhere()
                    self.listening.set()
                    self._unknown_heard = False
                    self._hear_kept(conn, ends)
                    looked = time.monotonic()
                    # Every Send's commit notifies, this process's own too, so this thread
                    # wakes once a Send. What has arrived is read off the socket by libpq
                    # itself (never waiting: it takes what the socket has) and passed on:
                    # psycopg's notifies() would add its lock, a generator, a wait on the
                    # socket with a poll of its own and a Notify of decoded strings to each
                    # wake, about half of the listener's CPU a Send (docs/benchmarks.md,
                    # "fixed29"). A failed read raises, as psycopg's would, and the
                    # connection is made again below.
                    pgconn = conn.pgconn
                    while not self.closing:
                        pgconn.consume_input()
                        heard: list[Key] = []
                        while (notify := pgconn.notifies()) is not None:
                            self._hear(notify.extra, heard, ends)
                        if heard:
                            self.changed(heard)
                        # A notification of a partition not known at the last look: a new one,
                        # or one that does not exist (any role may NOTIFY). The look soon after
                        # tells which, and wakes a new one's waiters if it grew.
                        wait_s = UNKNOWN_LOOK_S if self._unknown_heard else RECHECK_S
                        if time.monotonic() - looked >= wait_s:
                            self._unknown_heard = False
                            ends = self._wake_grown(ends, _log_ends(conn))
                            self._hear_kept(conn, ends)
                            looked = time.monotonic()
                            continue
                        # Until the server sends something, `close` signals, or the next look.
                        sockets.select(max(0.0, wait_s - (time.monotonic() - looked)))
            except Exception as e:  # noqa: BLE001 - the database may be restarting: waiters time out meanwhile
                self.listening.clear()
                if self.closing:
                    return
                logger.warning("not listening for log changes (%s); trying again in %.0f s",
                               type(e).__name__, RECHECK_S)
                self._closing.wait(RECHECK_S)

    def _hear_kept(self, conn: Any, known: dict[Key, int]) -> None:
        """Pass on the notifications psycopg kept while a query of this thread's ran on `conn`
        (it takes them off the socket then, where libpq's own read no longer finds them), and
        whatever else has arrived, without waiting."""
        heard: list[Key] = []
        for notify in conn.notifies(timeout=0):
            self._hear(notify.payload.encode(), heard, known)
        if heard:
            self.changed(heard)

    def _hear(self, payload: bytes, heard: list[Key], known: dict[Key, int]) -> None:
        """Add the partition a notification names to `heard`, if it is one of `known` (the
        partitions at the listener's last look) or one a reader of this process waits on. Any
        role that may connect to the database may NOTIFY on the channel, a read-only one too,
        with any payload: so a payload that is not `<topic_id>:<partition>` is passed over (with
        a rate-limited warning) rather than raised, which would drop the connection and leave
        every waiting reader unheard until the listener came back, RECHECK_S later; and one of a
        partition not known is not remembered, which a million of them took serve's memory up
        by 160 MB for FORGET_AFTER_S, but asks for a look at the log ends soon
        (UNKNOWN_LOOK_S), which finds a partition created since, and wakes the readers of one
        created and deleted since (`_wake_grown`)."""
        key = parse_payload(payload)
        if key is not None:
            # `_waiters` read without the lock: a waiter registered just after is told by the
            # look, a second at most later.
            if key in known or key in self._waiters:
                heard.append(key)
            else:
                self._unknown_heard = True
            return
        self._warn_of_odd_payload("passed over a notification on %s that names no partition (%d bytes); "
                                  "some role other than this service's sends on that channel", CHANNEL, len(payload))

    def _wake_grown(self, before: dict[Key, int], now: dict[Key, int]) -> dict[Key, int]:
        """Wake the waiters of the partitions whose log ends moved from `before` to `now` (a
        partition created since, with an empty log, has not grown), and of those gone since
        (their topic deleted: app.storage.topics.delete_topic), and of those in neither.

        A partition in neither was created after the look at `before` and deleted before this
        one; its reader fetched it meanwhile, and the delete's notification, of a partition not
        known then, reached no waiter if it came before the reader's registration (`_hear`
        passes such a one over). A reader of a partition that is not there must read again to
        learn so rather than wait out its long poll. Taken from the waiters, not from the
        notifications passed over, so that nothing is kept of those: their number is anyone's
        to choose (`_hear`), the waiters' is this process's readers'."""
        grown = [k for k, n in now.items() if before.get(k, 0) != n] + [k for k in before if k not in now]
        with self._lock:
            grown += [k for k in self._waiters if k not in now and k not in before]
        if grown:
            self.changed(grown)
        return now

    def _watch_sqlite(self) -> None:
        path = make_url(self.database_url).database
        if not path or path == ":memory:":  # an in-memory database has no other process
            self.listening.set()
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
                    # logs grew is in `partitions`, a row per partition, read only then.
                    latest = _log_ends(conn)
                    ends = latest if ends is None else self._wake_grown(ends, latest)
                    version = now
                    self.listening.set()
            except sqlite3.Error:
                if conn is not None:
                    conn.close()
                conn = None
                self.changed_everywhere()  # what happened meanwhile is unknown: look again
                self._closing.wait(RECHECK_S)
            self._closing.wait(DATA_VERSION_POLL_S)
        if conn is not None:
            conn.close()


def _log_ends(conn: sqlite3.Connection | Any) -> dict[Key, int]:
    """Every partition's log end. Every append and marker moves next_offset
    (app.storage.log_end.take_offsets), and so does an append in an application's transaction."""
    return {(t, p): n for t, p, n in conn.execute('SELECT topic_id, "partition", next_offset FROM partitions')}
