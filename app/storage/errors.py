"""Driver exceptions translated to domain errors, in this one place."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
import sqlite3

import psycopg
from sqlalchemy import exc

from app.domain.errors import InvalidRequest, LockWaitTimedOut, StorageUnavailable, first_line

# PostgreSQL's SQLSTATE for a lock not taken within lock_timeout (or NOWAIT).
LOCK_NOT_AVAILABLE = "55P03"
# PostgreSQL SQLSTATEs that mean "try again": serialization_failure, deadlock_detected,
# lock_not_available, too_many_connections, cannot_connect_now, admin_shutdown, crash_shutdown.
_RETRIABLE_SQLSTATES = {"40001", "40P01", LOCK_NOT_AVAILABLE, "53300", "57P03", "57P01", "57P02"}


# What a statement that waited out its lock_timeout (OUTBOX_DB_LOCK_TIMEOUT_MS, set on every
# connection by app.storage.engine) is answered: the database is up, another session holds the
# lock (for a Send, its partition's row lock), and the same request may succeed shortly.
LOCK_WAIT_TIMED_OUT = ("database busy: a lock this request needs (a partition's, for a Send) is held by another "
                       "database session past OUTBOX_DB_LOCK_TIMEOUT_MS; try again")


def _unavailable(driver_error: BaseException) -> StorageUnavailable:
    """The error a driver's OperationalError becomes, wrapped by SQLAlchemy or raw: a lock wait
    past the bound is told from other unavailability by its SQLSTATE, so that the coordinator's
    and the cleaner's passes can pass over that one item (LockWaitTimedOut's docstring)."""
    if getattr(driver_error, "sqlstate", None) == LOCK_NOT_AVAILABLE:
        return LockWaitTimedOut(LOCK_WAIT_TIMED_OUT)
    return StorageUnavailable(f"database unavailable: {first_line(driver_error)}")


@contextmanager
def translate_driver_errors() -> Iterator[None]:
    try:
        yield
    except exc.OperationalError as e:
        raise _unavailable(e.orig or e) from e
    except exc.TimeoutError as e:
        # The pool's wait for a connection ran out: every connection is in use (clients that
        # read their answers slowly hold theirs). The database is not broken, only busy; as a 500
        # this was counted as the service's fault.
        raise StorageUnavailable("database unavailable: every connection of the pool is in use "
                                 "(OUTBOX_DB_POOL_SIZE); try again") from e
    except exc.DataError as e:
        # A value the database cannot store (the API's validation should have caught it).
        raise InvalidRequest(f"value refused by the database: {first_line(e.orig or e)}") from e
    except exc.DBAPIError as e:
        sqlstate = getattr(e.orig, "sqlstate", None)
        if e.connection_invalidated or sqlstate in _RETRIABLE_SQLSTATES:
            raise StorageUnavailable(f"database unavailable: {first_line(e.orig or e)}") from e
        raise
    # On the raw driver connections, outside SQLAlchemy's execution: the COPY of Send's hot
    # path (PostgreSQL), and the statements of dialect.rows_on_driver (a Send's offsets on
    # PostgreSQL, a batch's sequence state on SQLite).
    except sqlite3.OperationalError as e:
        raise StorageUnavailable(f"database unavailable: {first_line(e)}") from e
    except sqlite3.DataError as e:
        raise InvalidRequest(f"value refused by the database: {first_line(e)}") from e
    except psycopg.OperationalError as e:
        raise _unavailable(e) from e
    except psycopg.DataError as e:
        raise InvalidRequest(f"value refused by the database: {first_line(e)}") from e
    except psycopg.Error as e:
        if e.sqlstate in _RETRIABLE_SQLSTATES:
            raise StorageUnavailable(f"database unavailable: {first_line(e)}") from e
        raise
