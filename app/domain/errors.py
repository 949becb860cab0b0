"""Domain errors. Each carries its Kafka error name and whether the caller may retry.

The mapping to HTTP status codes lives in one place: app.api.errors.
"""

from __future__ import annotations

from typing import Any, ClassVar


class OutboxError(Exception):
    """The request could not be served."""

    error_code: ClassVar[str] = "UNKNOWN_SERVER_ERROR"
    retriable: ClassVar[bool] = False

    def __init__(self, message: str | None = None, **details: Any) -> None:
        self.message = message or (self.__doc__ or self.error_code).strip()
        self.details = details
        super().__init__(self.message)


class InvalidRequest(OutboxError):
    """The request is malformed or names values out of range."""

    error_code = "INVALID_REQUEST"


class GroupMetadataTooLarge(InvalidRequest):
    """A JoinGroup's protocols, or an assignment a SyncGroup's leader gives a member, hold more
    bytes than OUTBOX_KAFKA_GROUP_MAX_METADATA_BYTES; or the group's members' protocols, or the
    leader's assignments, would hold more together than
    OUTBOX_KAFKA_GROUP_MAX_TOTAL_METADATA_BYTES. Kafka's INVALID_REQUEST: not retriable, as the
    same request would be refused again (GROUP_MAX_SIZE_REACHED counts members, and a Java
    consumer takes it for a fatal "group is full"; MESSAGE_TOO_LARGE is a record's, which the
    client's producer code would take it for)."""


class InvalidGroupId(InvalidRequest):
    """The group id breaks the rule for ids (app.domain.ids): Kafka's INVALID_GROUP_ID, an
    invalid request all the same."""

    error_code = "INVALID_GROUP_ID"


class UnsupportedMediaType(OutboxError):
    """The request body is not sent as JSON (content-type: application/json)."""

    error_code = "UNSUPPORTED_MEDIA_TYPE"


class InvalidRecord(OutboxError):
    """A record breaks a rule of its topic (a compacted topic takes keyed records only)."""

    error_code = "INVALID_RECORD"

    def __init__(self, message: str | None = None, *, record_indexes: tuple[int, ...] = (), **details: Any) -> None:
        super().__init__(message, **details)
        # The records at fault by their index in the batch, where the rule names them: Kafka's
        # Produce answers each (KIP-467). Empty: the batch as a whole. Not in the HTTP body's
        # details, whose Send may hold several batches.
        self.record_indexes = record_indexes


class InvalidTimestamp(InvalidRecord):
    """A produced record's timestamp is out of the range a record may have (0 to
    9999-12-31T23:59:59.999Z, app.domain.records.MAX_TIMESTAMP_MS), or
    a produced batch says its timestamps are the log append time (the broker's to set): Kafka's
    answer for either. A Send's record is refused INVALID_REQUEST for it, by its schema."""

    error_code = "INVALID_TIMESTAMP"


class UnknownTopicOrPartition(OutboxError):
    """This topic or partition does not exist."""

    error_code = "UNKNOWN_TOPIC_OR_PARTITION"


class TopicAlreadyExists(OutboxError):
    """A topic with this name already exists."""

    error_code = "TOPIC_ALREADY_EXISTS"


class InvalidPartitions(OutboxError):
    """The number of partitions is out of range."""

    error_code = "INVALID_PARTITIONS"


class InvalidTopic(OutboxError):
    """The topic name is not legal."""

    error_code = "INVALID_TOPIC_EXCEPTION"


class InvalidConfig(OutboxError):
    """The topic configuration is not valid."""

    error_code = "INVALID_CONFIG"


class TopicHasOpenTransactions(OutboxError):
    """Unfinished transactions write to this topic or stage offsets for it; it cannot be deleted
    until they end.

    Not retriable: the transactions end when their producers commit or abort, or at their
    timeout (up to OUTBOX_MAX_TRANSACTION_TIMEOUT_MS), which a retry after a second does not
    wait for: an operator decides whether to wait or to abort them. Kafka has no code for it,
    as its DeleteTopics does not look at transactions."""

    error_code = "TOPIC_HAS_OPEN_TRANSACTIONS"


class TransactionalIdNotFound(OutboxError):
    """No producer was ever initialised with this transactional_id."""

    error_code = "TRANSACTIONAL_ID_NOT_FOUND"


class UnknownProducerId(OutboxError):
    """The service holds no state for this producer id; re-initialise the producer."""

    error_code = "UNKNOWN_PRODUCER_ID"


class ForgottenProducerId(UnknownProducerId):
    """No row holds this producer id: never handed out, or forgotten by producer expiry. An
    idempotent Send takes back one that was handed out (LogService.send); anything else answers
    it as UNKNOWN_PRODUCER_ID."""


class ProducerFenced(OutboxError):
    """A newer producer with the same transactional_id exists; this instance is fenced and must close."""

    error_code = "PRODUCER_FENCED"


class InvalidProducerEpoch(OutboxError):
    """The producer epoch does not match the current epoch of this producer id."""

    error_code = "INVALID_PRODUCER_EPOCH"


class InvalidProducerIdMapping(OutboxError):
    """The producer id is not the one bound to this transactional_id."""

    error_code = "INVALID_PRODUCER_ID_MAPPING"


class InvalidTxnState(OutboxError):
    """The transaction is not in a state that allows this operation."""

    error_code = "INVALID_TXN_STATE"


class TransactionPrepared(OutboxError):
    """The transaction is Prepared: its outcome is its application's to decide, by a Commit or
    Abort from the current owner of its transactional id. The application's own database may
    have committed its side already, so an operator's abort is refused unless forced.

    Not retriable: it stays Prepared until its application decides. Kafka has no code for it
    (its admin aborts a prepared transaction only by a separate force-terminate)."""

    error_code = "TRANSACTION_PREPARED"


class TransactionIncomplete(OutboxError):
    """The Commit's count of acknowledged records is not what the transaction holds: a Send
    acknowledged without waiting for the disk (durability "commit") was lost in a database
    crash, or the count is wrong. A Commit aborts the open transaction rather than commit it
    (the message says when there was none to abort); a Prepare changes nothing. The producer
    sends the whole transaction again in the next one. Kafka has no code for it."""

    error_code = "TRANSACTION_INCOMPLETE"


class ConcurrentTransactions(OutboxError):
    """The previous transaction of this transactional_id is still completing; retry shortly."""

    error_code = "CONCURRENT_TRANSACTIONS"
    retriable = True


class InvalidTransactionTimeout(OutboxError):
    """The transaction timeout is larger than the configured maximum or not positive."""

    error_code = "INVALID_TRANSACTION_TIMEOUT"


class OutOfOrderSequenceNumber(OutboxError):
    """The batch's base sequence does not follow the last sequence written for this producer and partition."""

    error_code = "OUT_OF_ORDER_SEQUENCE_NUMBER"


class DuplicateSequenceNumber(OutboxError):
    """The batch overlaps sequences already written but is not a retry of one of the producer's
    last batches there (app.domain.producer.check_sequence)."""

    error_code = "DUPLICATE_SEQUENCE_NUMBER"


class OffsetMismatch(OutboxError):
    """expected_offset differs from the partition's next offset; nothing was written."""

    error_code = "OFFSET_MISMATCH"


class UnstableOffsetCommit(OutboxError):
    """The group has offsets pending in an open transaction for this partition; retry after it completes."""

    error_code = "UNSTABLE_OFFSET_COMMIT"
    retriable = True


class OffsetOutOfRange(OutboxError):
    """The requested offset is outside the partition's log."""

    error_code = "OFFSET_OUT_OF_RANGE"


class MessageTooLarge(OutboxError):
    """A record is larger than its topic's max_message_bytes (Kafka's MESSAGE_TOO_LARGE)."""

    error_code = "MESSAGE_TOO_LARGE"


class RecordListTooLarge(OutboxError):
    """The request carries more records or bytes than the service accepts in one request."""

    error_code = "RECORD_LIST_TOO_LARGE"


class OffsetMetadataTooLarge(OutboxError):
    """An offset's metadata is longer than OFFSET_METADATA_MAX_CHARS (Kafka's
    offset.metadata.max.bytes)."""

    error_code = "OFFSET_METADATA_TOO_LARGE"


class IllegalGeneration(OutboxError):
    """The generation_id is not the group's current generation: the group rebalanced."""

    error_code = "ILLEGAL_GENERATION"

    @classmethod
    def of(cls, group_id: str, given: int, current: int) -> IllegalGeneration:
        # "Stale" only when it is: a generation ahead of the group's is a caller's mistake.
        how = "stale" if given < current else "not one the group has had"
        return cls(f"generation {given} is {how}; group {group_id!r} is at generation {current}",
                   generation_id=current)


class UnknownMemberId(OutboxError):
    """The member_id is not a member of this group (it left, or its session timed out)."""

    error_code = "UNKNOWN_MEMBER_ID"


class MemberIdRequired(OutboxError):
    """A new member of the Kafka door's group (JoinGroup 4 and later, KIP-394) joins again with
    the member id it is given (`details["member_id"]`) before it is a member."""

    error_code = "MEMBER_ID_REQUIRED"


class FencedInstanceId(OutboxError):
    """The group instance id (static membership, KIP-345) is held by another member id of the
    group: this member was replaced by a newer instance of the same consumer."""

    error_code = "FENCED_INSTANCE_ID"


class RebalanceInProgress(OutboxError):
    """The group is rebalancing: join it again (JoinGroup) to get the next generation."""

    error_code = "REBALANCE_IN_PROGRESS"
    retriable = True


class InconsistentGroupProtocol(OutboxError):
    """The member's protocol does not fit the group's: another door manages the group while it
    has members, or the members share no assignor; or a committed offset of the other door's
    read order means nothing this reader's order can say (app.domain.offsets.offset_in_order)."""

    error_code = "INCONSISTENT_GROUP_PROTOCOL"


class GroupMaxSizeReached(OutboxError):
    """The group has as many members as OUTBOX_GROUP_MAX_SIZE allows."""

    error_code = "GROUP_MAX_SIZE_REACHED"


class GroupIdNotFound(OutboxError):
    """No consumer group with this group_id has members."""

    error_code = "GROUP_ID_NOT_FOUND"


class GroupSubscribedToTopic(OutboxError):
    """A member of the group subscribes to this topic: its offsets are deleted only once none
    does (Kafka's OffsetDelete)."""

    error_code = "GROUP_SUBSCRIBED_TO_TOPIC"


class NonEmptyGroup(OutboxError):
    """The group has active members, whose own commits would race an operator's: Kafka's
    kafka-consumer-groups resets the offsets of an inactive group only."""

    error_code = "NON_EMPTY_GROUP"


class InvalidSessionTimeout(OutboxError):
    """The session timeout is outside the allowed range."""

    error_code = "INVALID_SESSION_TIMEOUT"


class AuthenticationFailed(OutboxError):
    """No valid credentials: send an API key or a bearer token (README, "Authentication and ACLs")."""

    error_code = "AUTHENTICATION_FAILED"

    def __init__(self, message: str | None = None, *, challenges: tuple[str, ...] | None = None,
                 **details: Any) -> None:
        super().__init__(message, **details)
        # The WWW-Authenticate headers of the 401, one per scheme (a browser reads only one
        # challenge per header); None: the schemes the service takes (app.api.security).
        self.challenges = challenges


class IdentityProviderUnavailable(OutboxError):
    """The signing keys of bearer tokens could not be fetched from the identity provider's
    JWKS URL: try again later."""

    error_code = "IDENTITY_PROVIDER_UNAVAILABLE"
    retriable = True


class AuthorizationFailed(OutboxError):
    """The principal has no ACL that allows this operation (or one denies it). Each resource
    type has its own Kafka error code; nothing was changed."""


class TopicAuthorizationFailed(AuthorizationFailed):
    """Not authorized to access this topic."""

    error_code = "TOPIC_AUTHORIZATION_FAILED"


class GroupAuthorizationFailed(AuthorizationFailed):
    """Not authorized to access this consumer group."""

    error_code = "GROUP_AUTHORIZATION_FAILED"


class TransactionalIdAuthorizationFailed(AuthorizationFailed):
    """Not authorized to use this transactional id."""

    error_code = "TRANSACTIONAL_ID_AUTHORIZATION_FAILED"


class ClusterAuthorizationFailed(AuthorizationFailed):
    """Not authorized for this cluster operation."""

    error_code = "CLUSTER_AUTHORIZATION_FAILED"


class ResourceNotFound(OutboxError):
    """No such resource (an API key that does not exist or is already revoked)."""

    error_code = "RESOURCE_NOT_FOUND"


class ThrottlingQuotaExceeded(OutboxError):
    """Too many requests wait for records in this process, or of this principal (retry later,
    or ask without waiting); or the request bodies this process holds, or those of this
    principal, leave no room for this one's (OUTBOX_HTTP_MAX_QUEUED_BODY_BYTES and
    OUTBOX_HTTP_MAX_QUEUED_BODY_BYTES_PER_PRINCIPAL: retry later).

    Kafka's code for a request refused by a quota rather than delayed (KIP-599), retriable as
    there: a place frees as soon as another waiting request ends."""

    error_code = "THROTTLING_QUOTA_EXCEEDED"
    retriable = True


class StorageUnavailable(OutboxError):
    """The database is busy or unreachable; retry shortly."""

    error_code = "STORAGE_UNAVAILABLE"
    retriable = True


class LockWaitTimedOut(StorageUnavailable):
    """A statement waited for a lock past OUTBOX_DB_LOCK_TIMEOUT_MS (PostgreSQL's lock_timeout):
    another database session holds it, for a Send its partition's row lock, which an
    application's own transaction holds while it publishes at its COMMIT. The same code as
    StorageUnavailable, retriable as it is: the request may succeed once that session ends. A
    class of its own so that the coordinator's and the log cleaner's passes can pass over the one
    transaction or partition they met it on and do the others, where a database that is down
    fails the whole pass."""


class SchemaNotMigrated(OutboxError):
    """The database's schema is not the one this version of the service needs (none yet, an
    older revision, or a newer one): run `outbox migrate`. Retriable: the same request succeeds
    once the schema is migrated, without a restart of the service. Kafka has no code for it (a
    broker owns its log format); STORAGE_UNAVAILABLE, the nearest, would send an operator
    looking at the database's health rather than at a deployment step left out."""

    error_code = "SCHEMA_NOT_MIGRATED"
    retriable = True


def first_line(e: BaseException) -> str:
    """A driver error's first line: what went wrong, without the SQL and the parameters."""
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__
