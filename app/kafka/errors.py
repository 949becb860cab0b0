"""The service's errors as Kafka error codes: one mapping, by the Kafka name each domain error
carries (app.domain.errors). The few names Kafka has no code for get the nearest one here."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from app.domain.errors import OutboxError

# Names of the service's own errors that are not Kafka's, and the code a Kafka client gets.
_NEAREST: dict[str, ErrorCode] = {
    # Retriable both: the client backs off and retries, as for a broker's storage error.
    "STORAGE_UNAVAILABLE": ErrorCode.kafka_storage_error,
    "SCHEMA_NOT_MIGRATED": ErrorCode.kafka_storage_error,
    # The conditional publish of KIP-27 was never given a Kafka code.
    "OFFSET_MISMATCH": ErrorCode.invalid_request,
    "TOPIC_HAS_OPEN_TRANSACTIONS": ErrorCode.invalid_txn_state,
    # Kafka's transaction coordinator answers a transactional id it has no producer for with
    # INVALID_PRODUCER_ID_MAPPING (AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, a transactional
    # Produce); its TRANSACTIONAL_ID_NOT_FOUND is DescribeTransactions' only, and a producing
    # client does not know it.
    "TRANSACTIONAL_ID_NOT_FOUND": ErrorCode.invalid_producer_id_mapping,
}


def error_code(error: OutboxError) -> ErrorCode:
    """The Kafka error code a client is answered for `error`."""
    nearest = _NEAREST.get(error.error_code)
    if nearest is not None:
        return nearest
    return ErrorCode.__members__.get(error.error_code.lower(), ErrorCode.unknown_server_error)


def fenced_code(error: OutboxError, version: int, fenced_since: int, *,
                every_stale_epoch_fenced: bool = False) -> ErrorCode:
    """error_code for an answer of `version` of an API whose clients know PRODUCER_FENCED from
    version `fenced_since` on (KIP-588); before it Kafka answers INVALID_PRODUCER_EPOCH.
    `every_stale_epoch_fenced`: the request speaks transaction version 2's EndTxn, which Kafka's
    coordinator answers PRODUCER_FENCED for any epoch but the current one (a retry of the
    EndTxn that bumped it aside), a delayed EndTxn of an ended transaction too."""
    code = error_code(error)
    if every_stale_epoch_fenced and code is ErrorCode.invalid_producer_epoch:
        return ErrorCode.producer_fenced
    if code is ErrorCode.producer_fenced and version < fenced_since:
        return ErrorCode.invalid_producer_epoch
    return code
