"""The service's errors as Kafka error codes: one mapping, by the Kafka name each domain error
carries (app.domain.errors). The few names Kafka has no code for get the nearest one here."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from app.domain.errors import OutboxError
from app.domain.offsets import metadata_fits
from app.kafka.api_keys import ApiKey

# Names of the service's own errors that are not Kafka's, and the code a Kafka client gets.
_NEAREST: dict[str, ErrorCode] = {
    # Retriable both: the client backs off and retries, as for a broker's storage error.
    "STORAGE_UNAVAILABLE": ErrorCode.kafka_storage_error,
    "SCHEMA_NOT_MIGRATED": ErrorCode.kafka_storage_error,
    # The conditional publish of KIP-27 was never given a Kafka code.
    "OFFSET_MISMATCH": ErrorCode.invalid_request,
    "TOPIC_HAS_OPEN_TRANSACTIONS": ErrorCode.invalid_txn_state,
    # Only a Commit over HTTP carries the count it checks; named here so that no door lacks it.
    "TRANSACTION_INCOMPLETE": ErrorCode.invalid_txn_state,
    # Only an operator's abort over HTTP or the CLI is refused with it; named so no door lacks it.
    "TRANSACTION_PREPARED": ErrorCode.invalid_txn_state,
    # Kafka's transaction coordinator answers a transactional id it has no producer for with
    # INVALID_PRODUCER_ID_MAPPING (AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, a transactional
    # Produce); its TRANSACTIONAL_ID_NOT_FOUND is DescribeTransactions' only, and a producing
    # client does not know it.
    "TRANSACTIONAL_ID_NOT_FOUND": ErrorCode.invalid_producer_id_mapping,
}


def error_code(error: OutboxError) -> ErrorCode:
    """The Kafka error code a client is answered for `error` by a partition's API (Produce,
    Fetch, ListOffsets, topic administration); a coordinator's answers coordinator_error_code."""
    nearest = _NEAREST.get(error.error_code)
    if nearest is not None:
        return nearest
    return ErrorCode.__members__.get(error.error_code.lower(), ErrorCode.unknown_server_error)


# What a coordinator's API (a transaction's: InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn,
# EndTxn, TxnOffsetCommit; a group's: JoinGroup to OffsetDelete) answers where the database did
# not serve the request (down, not migrated, or a lock waited on past OUTBOX_DB_LOCK_TIMEOUT_MS):
# COORDINATOR_LOAD_IN_PROGRESS, which Kafka's clients retry on every coordinator API.
# KAFKA_STORAGE_ERROR is a partition's code: retried on Produce and Fetch, but librdkafka takes it
# as permanent on EndTxn, and its application would abort a transaction whose Commit only waited
# for a lock; kafka-python takes it as fatal on the group APIs.
_COORDINATOR_NEAREST: dict[str, ErrorCode] = {
    "STORAGE_UNAVAILABLE": ErrorCode.coordinator_load_in_progress,
    "SCHEMA_NOT_MIGRATED": ErrorCode.coordinator_load_in_progress,
}


def coordinator_error_code(error: OutboxError) -> ErrorCode:
    """error_code for an answer of a transaction's or a group's coordinator (_COORDINATOR_NEAREST)."""
    return _COORDINATOR_NEAREST.get(error.error_code) or error_code(error)


def metadata_code(metadata: str | None, code: ErrorCode) -> ErrorCode:
    """A committed offset's answer: `code`, the request's, unless that is NONE and the offset's
    metadata is past OFFSET_METADATA_MAX_CHARS, which Kafka answers OFFSET_METADATA_TOO_LARGE
    for that partition alone (the others committed)."""
    if code is ErrorCode.none and not metadata_fits(metadata):
        return ErrorCode.offset_metadata_too_large
    return code


_NEVER = 1 << 15  # above every version of every API (versions are INT16)
# The first version of each transactional API whose client knows PRODUCER_FENCED (KIP-588):
# older versions are answered INVALID_PRODUCER_EPOCH for it. Produce is not here: Kafka's
# partition leader answers a stale epoch INVALID_PRODUCER_EPOCH at every version, and a
# transactional client takes it as being fenced.
PRODUCER_FENCED_SINCE: dict[ApiKey, int] = {ApiKey.INIT_PRODUCER_ID: 3, ApiKey.ADD_PARTITIONS_TO_TXN: 2,
                                            ApiKey.ADD_OFFSETS_TO_TXN: 2, ApiKey.END_TXN: 2,
                                            ApiKey.TXN_OFFSET_COMMIT: 3}
# KIP-890: the first version of Produce and of TxnOffsetCommit whose client knows
# TRANSACTION_ABORTABLE (120). Kafka answers it where the transaction the request would join
# does not hold the partition (its partition leader, or its group coordinator for the offsets,
# asking the transaction coordinator): the producer's transaction has ended, or was never
# begun. Here that is INVALID_TXN_STATE from the join (app.services.transaction_join: no open
# transaction); the other requests that know the code (InitProducerId 5, AddPartitionsToTxn 5,
# AddOffsetsToTxn 4, EndTxn 4, FindCoordinator 5) are never answered it by Kafka, and older
# versions keep INVALID_TXN_STATE, which their clients take as fatal.
TRANSACTION_ABORTABLE_SINCE: dict[ApiKey, int] = {ApiKey.PRODUCE: 11, ApiKey.TXN_OFFSET_COMMIT: 4}


def transactional_code(error: OutboxError, api_key: ApiKey, version: int, *,
                       every_stale_epoch_fenced: bool = False) -> ErrorCode:
    """error_code for an answer of `version` of the transactional API `api_key` (or a Produce),
    in the codes that version's clients know (PRODUCER_FENCED_SINCE, TRANSACTION_ABORTABLE_SINCE).
    `every_stale_epoch_fenced`: the request speaks transaction version 2's EndTxn, which Kafka's
    coordinator answers PRODUCER_FENCED for any epoch but the current one (a retry of the
    EndTxn that bumped it aside), a delayed EndTxn of an ended transaction too."""
    code = error_code(error) if api_key is ApiKey.PRODUCE else coordinator_error_code(error)
    if every_stale_epoch_fenced and code is ErrorCode.invalid_producer_epoch:
        return ErrorCode.producer_fenced
    if code is ErrorCode.producer_fenced and version < PRODUCER_FENCED_SINCE.get(api_key, _NEVER):
        return ErrorCode.invalid_producer_epoch
    if code is ErrorCode.invalid_txn_state and version >= TRANSACTION_ABORTABLE_SINCE.get(api_key, _NEVER):
        return ErrorCode.transaction_abortable
    return code

