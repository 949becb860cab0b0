"""A statement that waited out its lock_timeout (OUTBOX_DB_LOCK_TIMEOUT_MS) is answered as a busy
database, retriable, through both doors: the one mapping of driver errors
(app.storage.errors) makes it LockWaitTimedOut, a StorageUnavailable."""

from __future__ import annotations

import psycopg
import pytest
from kio.schema.errors import ErrorCode

from app.api.errors import error_response
from app.domain.errors import LockWaitTimedOut
from app.kafka.errors import error_code
from app.storage.errors import LOCK_WAIT_TIMED_OUT, translate_driver_errors


def test_a_lock_wait_past_the_bound_on_the_driver_is_a_lock_wait_timed_out() -> None:
    with pytest.raises(LockWaitTimedOut) as raised, translate_driver_errors():
        raise psycopg.errors.LockNotAvailable("canceling statement due to lock timeout")
    assert raised.value.message == LOCK_WAIT_TIMED_OUT


def test_it_is_answered_503_retriable_over_http_and_kafka_storage_error_over_kafka() -> None:
    refused = LockWaitTimedOut(LOCK_WAIT_TIMED_OUT)
    answer = error_response(refused)
    assert (answer.status_code, answer.headers["Retry-After"]) == (503, "1")
    assert (refused.error_code, refused.retriable) == ("STORAGE_UNAVAILABLE", True)
    assert error_code(refused) is ErrorCode.kafka_storage_error
