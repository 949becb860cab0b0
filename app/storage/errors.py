"""Driver exceptions translated to domain errors, in this one place."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import exc

from app.domain.errors import StorageUnavailable

# PostgreSQL SQLSTATEs that mean "try again": serialization_failure, deadlock_detected,
# lock_not_available, too_many_connections, cannot_connect_now, admin_shutdown, crash_shutdown.
_RETRIABLE_SQLSTATES = {"40001", "40P01", "55P03", "53300", "57P03", "57P01", "57P02"}


@contextmanager
def translate_driver_errors() -> Iterator[None]:
    try:
        yield
    except exc.OperationalError as e:
        raise StorageUnavailable(f"database unavailable: {_short(e)}") from e
    except exc.DBAPIError as e:
        sqlstate = getattr(getattr(e, "orig", None), "sqlstate", None)
        if e.connection_invalidated or sqlstate in _RETRIABLE_SQLSTATES:
            raise StorageUnavailable(f"database unavailable: {_short(e)}") from e
        raise


def _short(e: exc.DBAPIError) -> str:
    return str(e.orig).strip().splitlines()[0] if e.orig is not None else str(e)
