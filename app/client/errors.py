"""Client exceptions, in the three kinds a Kafka transactional client distinguishes, and the
errors that are none of them: a topic that does not exist, and a consumer position that is
not valid when `auto_offset_reset="none"` forbids choosing one."""

from __future__ import annotations

from typing import Any


class ClientError(Exception):
    def __init__(self, error_code: str, message: str, status: int | None = None,
                 details: dict[str, Any] | None = None) -> None:
        super().__init__(f"{error_code}: {message}")
        self.error_code = error_code
        self.message = message
        self.status = status
        self.details = details or {}  # the refusal's `details` object, as the service sent it


class RetriableError(ClientError):
    """Retried inside the client until its deadline; raised only when the deadline passes."""


class AbortableError(ClientError):
    """The current transaction cannot commit: call abort_transaction() and redo the work
    (the consumer's seek_to_committed() rewinds the input)."""


class FatalError(ClientError):
    """The producer cannot go on: close it (and start a new one if this instance should)."""


class UnknownTopicOrPartitionError(ClientError):
    """The topic (or the partition) does not exist. Never retried: topics are created
    explicitly (`POST /v1/topics`), so retrying or redoing the transaction cannot help; create
    the topic or fix its name. A Send or AddOffsets refused for it leaves the open transaction
    unable to commit (call abort_transaction(), as after an AbortableError); anything
    refused before it reached the service (send() looks the topic up first) changed nothing.

    It is not an AbortableError on purpose: a loop that aborts and redoes the transaction on
    AbortableError would otherwise redo it forever."""

    def __init__(self, error_code: str, message: str, status: int | None = None,
                 topic: str | None = None, details: dict[str, Any] | None = None) -> None:
        super().__init__(error_code, message, status, details)
        self.topic = topic


class InvalidOffsetError(ClientError):
    """The consumer has no valid position in a partition and its `auto_offset_reset` is
    "none", so it may not choose one (Kafka's InvalidOffsetException). Nothing was skipped:
    the partition's position is where it was. seek() it and poll again, or stop.

    Not an AbortableError on purpose: redoing the transaction meets the same position."""

    def __init__(self, error_code: str, message: str, status: int | None = None,
                 details: dict[str, Any] | None = None, *,
                 topic: str | None = None, partition: int | None = None) -> None:
        super().__init__(error_code, message, status, details)
        self.topic = topic
        self.partition = partition


class NoOffsetForPartitionError(InvalidOffsetError):
    """The group has no committed offset for the partition (or the consumer has no group),
    and `auto_offset_reset` is "none" (Kafka's NoOffsetForPartitionException). Raised by the
    consumer, never by the service: error_code NO_OFFSET_FOR_PARTITION, no status."""


class OffsetOutOfRangeError(InvalidOffsetError):
    """The position is outside the partition's log (Kafka's OffsetOutOfRangeException): below
    its log start, because retention or DeleteRecords deleted the records there (typically a
    committed offset the group had not read past in time), or past its log end. The service
    answers a fetch there with 416 OFFSET_OUT_OF_RANGE; the consumer resets the position by
    its `auto_offset_reset`, and raises this only when that is "none", with `topic`,
    `partition`, `position` (the refused one) and the log's bounds at the time:
    `log_start_offset` and `log_end_offset` (the high watermark; a fetch may ask for
    offsets from the log start up to and including it)."""

    def __init__(self, error_code: str, message: str, status: int | None = None,
                 details: dict[str, Any] | None = None, *,
                 topic: str | None = None, partition: int | None = None,
                 position: int | None = None) -> None:
        super().__init__(error_code, message, status, details, topic=topic, partition=partition)
        self.position = position

    @property
    def log_start_offset(self) -> int | None:
        return self.details.get("log_start_offset")

    @property
    def log_end_offset(self) -> int | None:
        return self.details.get("log_end_offset")


class AuthenticationError(FatalError):
    """The service took no credentials of this client (missing, wrong, expired or revoked):
    give the producer or consumer a valid api_key or token."""


class AuthorizationError(ClientError):
    """No ACL allows this principal the operation (TOPIC_, GROUP_, TRANSACTIONAL_ID_ or
    CLUSTER_AUTHORIZATION_FAILED). Nothing was changed. Not retried and not an AbortableError
    on purpose: redoing the transaction meets the same refusal until an operator adds the ACL.
    A transaction open when it came is left as it was: abort it."""


class ProducerFencedError(FatalError):
    """Another instance with the same transactional_id took over, or the transaction timed
    out and the coordinator fenced this one."""


# error_code → kind. Anything not listed and not retriable is abortable.
KIND_BY_CODE: dict[str, type[ClientError]] = {
    "UNKNOWN_TOPIC_OR_PARTITION": UnknownTopicOrPartitionError,
    "OFFSET_OUT_OF_RANGE": OffsetOutOfRangeError,
    "PRODUCER_FENCED": ProducerFencedError,
    "INVALID_PRODUCER_EPOCH": ProducerFencedError,
    "INVALID_PRODUCER_ID_MAPPING": FatalError,
    "TRANSACTIONAL_ID_NOT_FOUND": FatalError,
    "INVALID_TXN_STATE": FatalError,
    "INVALID_TRANSACTION_TIMEOUT": FatalError,
    "AUTHENTICATION_FAILED": AuthenticationError,
    "TOPIC_AUTHORIZATION_FAILED": AuthorizationError,
    "GROUP_AUTHORIZATION_FAILED": AuthorizationError,
    "TRANSACTIONAL_ID_AUTHORIZATION_FAILED": AuthorizationError,
    "CLUSTER_AUTHORIZATION_FAILED": AuthorizationError,
}
# Abortable errors after which the producer's sequence numbers are unknown: abort_transaction()
# bumps the epoch (KIP-360) so that sequences restart at zero under the same producer id.
EPOCH_BUMP_CODES = {"OUT_OF_ORDER_SEQUENCE_NUMBER", "UNKNOWN_PRODUCER_ID", "DUPLICATE_SEQUENCE_NUMBER"}


def classify(error_code: str, message: str, retriable: bool, status: int | None,
             details: dict[str, Any] | None = None) -> ClientError:
    if retriable:
        return RetriableError(error_code, message, status, details)
    kind = KIND_BY_CODE.get(error_code, AbortableError)
    return kind(error_code, message, status, details=details)
