"""Chores that one process at a time may do to a PostgreSQL database, each with its turn: a
database-wide advisory lock held on a connection kept for it (advisory locks are per database,
and go with the connection, so a process killed midway leaves nothing held).

A turn is asked for with pg_try_advisory_lock, never waited for in pg_advisory_lock: a
statement that waits holds a snapshot, and a migration that waits for the transactions older
than its copy (0035's) would then wait for the process that waits for it."""

from __future__ import annotations

import enum
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

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
                     on_wait: Callable[[], None]) -> Iterator[None]:
    """On an autocommit connection held for the chore: holds the turn, asking for it every
    poll_s seconds while another process has it (on_wait is called once, at the first refusal)."""
    told = False
    while not _take(conn, turn):
        if not told:
            on_wait()
            told = True
        time.sleep(poll_s)
    try:
        yield
    finally:
        _end(conn, turn)
