"""Chores that one process at a time may do to a PostgreSQL database, each with its turn: a
database-wide advisory lock held on a connection kept for it (advisory locks are per database,
and go with the connection, so a process killed midway leaves nothing held).

A turn is asked for with pg_try_advisory_lock, never waited for in pg_advisory_lock: a
statement that waits holds a snapshot, and a migration that waits for the transactions older
than its copy (0035's) would then wait for the process that waits for it.

Any role that may connect to the database may take an advisory lock, a reader's too: nothing
in PostgreSQL reserves a key to one role. A turn refused is therefore shown with its holder
(`holder`), and a holder of another role than this service's is named as an outside session
in the warning, with the statement that ends it: otherwise a Spark job's stray lock would
hold every migration, or the purge, with nothing in the log to say who."""

from __future__ import annotations

import enum
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from sqlalchemy import Connection, text


@enum.unique
class Turn(enum.IntEnum):
    """The advisory lock keys, one per chore."""

    # Every migrator: `outbox migrate`, alembic's own command line, and `serve` or
    # `coordinator` migrating at start. Without it, migrators started together (two deploys'
    # `outbox migrate`, an init container per replica) each read the same old revision and ran
    # the same steps: the later ones failed half-way ("column … already exists"). The bytes of
    # "outbox".
    MIGRATE = 0x6F7574626F78
    # The purge of deleted topics' leaves of `records`. Every `serve` runs a log cleaner:
    # without it, two found the same deleted topic and detached the same leaf at once, and the
    # one that came second failed its pass. The bytes of "purge".
    PURGE = 0x7075726765


@dataclass(frozen=True)
class TurnHolder:
    """The session holding a turn, as pg_stat_activity shows it to this service's role."""

    pid: int
    role: str | None
    application: str | None
    ours: bool  # its role is this connection's: one of this service's processes
    our_role: str  # this connection's, for the operator to compare (a migrator may run as another)

    def __str__(self) -> str:
        said = f"PostgreSQL session {self.pid}"
        if self.role is not None:
            said += f" of role {self.role}"
        if self.application:
            said += f" ({self.application})"
        if not self.ours:
            said += (f", not this connection's role {self.our_role}: if it is no migrator or service of yours, "
                     f"end it with SELECT pg_terminate_backend({self.pid})")
        return said


# An advisory lock on a bigint key shows in pg_locks as classid (its high 32 bits), objid
# (its low 32 bits) and objsubid 1 (a pair of int4 keys shows objsubid 2).
_HOLDER = text("""
    SELECT l.pid, a.usename, a.application_name, a.usename = current_user, current_user
    FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid
    WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
      AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
      AND l.classid::bigint = :high AND l.objid::bigint = :low
""")


def holder(conn: Connection, turn: Turn) -> TurnHolder | None:
    """Who holds `turn` now (None: nobody, or it was given back meanwhile)."""
    row = conn.execute(_HOLDER, {"high": int(turn) >> 32, "low": int(turn) & 0xFFFFFFFF}).first()
    if row is None:
        return None
    pid, role, application, ours, our_role = row
    return TurnHolder(pid=pid, role=role, application=application or None, ours=bool(ours), our_role=our_role)


def _take(conn: Connection, turn: Turn) -> bool:
    return bool(conn.execute(text("SELECT pg_try_advisory_lock(:key)"), {"key": int(turn)}).scalar_one())


def _end(conn: Connection, turn: Turn) -> None:
    conn.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": int(turn)})


@contextmanager
def turn_if_free(conn: Connection, turn: Turn) -> Iterator[bool]:
    """On an autocommit connection held for the chore: yields whether this process has the
    turn (False while another process has it, which then does the chore for both)."""
    if not _take(conn, turn):
        yield False
        return
    try:
        yield True
    finally:
        _end(conn, turn)


@contextmanager
def waiting_for_turn(conn: Connection, turn: Turn, *, poll_s: float,
                     on_wait: Callable[[TurnHolder | None], None]) -> Iterator[None]:
    """On an autocommit connection held for the chore: holds the turn, asking for it every
    poll_s seconds while another process has it (on_wait is called once, at the first refusal,
    with the holder then)."""
    told = False
    while not _take(conn, turn):
        if not told:
            on_wait(holder(conn, turn))
            told = True
        time.sleep(poll_s)
    try:
        yield
    finally:
        _end(conn, turn)
