"""A connection pool that has none to give within its timeout is the database busy: 503
STORAGE_UNAVAILABLE, retriable (app.storage.errors.translate_driver_errors), not a 500."""

from __future__ import annotations

import pytest
from sqlalchemy import exc

from app.domain.errors import StorageUnavailable
from app.storage.errors import translate_driver_errors


def test_the_pools_timeout_is_storage_unavailable_and_retriable() -> None:
    with pytest.raises(StorageUnavailable, match="every connection of the pool is in use") as raised:
        with translate_driver_errors():
            raise exc.TimeoutError("QueuePool limit of size 10 overflow 40 reached, connection timed out")
    assert raised.value.retriable
