"""A statement that waited out its lock_timeout (OUTBOX_DB_LOCK_TIMEOUT_MS) is answered as a busy
database, retriable, through both doors: the one mapping of driver errors
(app.storage.errors) makes it LockWaitTimedOut, a StorageUnavailable."""

from __future__ import annotations

import psycopg
import pytest
from kio.schema.errors import ErrorCode

from app.api.errors import error_response
from app.domain.errors import LockWaitTimedOut
from app.kafka.api_keys import ApiKey
from app.kafka.errors import coordinator_error_code, error_code, transactional_code
from app.storage.errors import LOCK_WAIT_TIMED_OUT, translate_driver_errors


def test_a_lock_wait_past_the_bound_on_the_driver_is_a_lock_wait_timed_out() -> None:
    with pytest.raises(LockWaitTimedOut) as raised, translate_driver_errors():
        raise psycopg.errors.LockNotAvailable("canceling statement due to lock timeout")
    assert raised.value.message == LOCK_WAIT_TIMED_OUT


def test_it_is_answered_503_retriable_over_http_and_kafka_storage_error_by_a_partitions_api() -> None:
    refused = LockWaitTimedOut(LOCK_WAIT_TIMED_OUT)
    answer = error_response(refused)
    assert (answer.status_code, answer.headers["Retry-After"]) == (503, "1")
    assert (refused.error_code, refused.retriable) == ("STORAGE_UNAVAILABLE", True)
    assert error_code(refused) is ErrorCode.kafka_storage_error


@pytest.mark.parametrize("api_key", [ApiKey.INIT_PRODUCER_ID, ApiKey.ADD_PARTITIONS_TO_TXN, ApiKey.ADD_OFFSETS_TO_TXN,
                                     ApiKey.END_TXN, ApiKey.TXN_OFFSET_COMMIT])
@pytest.mark.parametrize("version", [0, 5])
def test_a_transaction_coordinators_api_answers_it_coordinator_load_in_progress(api_key: ApiKey, version: int) -> None:
    # Retried by every Kafka client on these APIs; KAFKA_STORAGE_ERROR on EndTxn is permanent to
    # librdkafka, which then has its application abort a Commit that only waited for a lock.
    refused = LockWaitTimedOut(LOCK_WAIT_TIMED_OUT)
    assert transactional_code(refused, api_key, version) is ErrorCode.coordinator_load_in_progress
    assert transactional_code(refused, ApiKey.END_TXN, version, every_stale_epoch_fenced=True) is (
        ErrorCode.coordinator_load_in_progress)


def test_a_transactional_produce_keeps_the_partitions_code() -> None:
    assert transactional_code(LockWaitTimedOut(LOCK_WAIT_TIMED_OUT), ApiKey.PRODUCE, 11) is ErrorCode.kafka_storage_error


def test_a_group_coordinators_answer_is_coordinator_load_in_progress() -> None:
    assert coordinator_error_code(LockWaitTimedOut(LOCK_WAIT_TIMED_OUT)) is ErrorCode.coordinator_load_in_progress
