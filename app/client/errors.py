"""Client exceptions, in the three kinds a Kafka transactional client distinguishes, and the
one error that is none of them: a topic that does not exist."""

from __future__ import annotations


class ClientError(Exception):
    def __init__(self, error_code: str, message: str, status: int | None = None) -> None:
        super().__init__(f"{error_code}: {message}")
        self.error_code = error_code
        self.message = message
        self.status = status


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
                 topic: str | None = None) -> None:
        super().__init__(error_code, message, status)
        self.topic = topic


class ProducerFencedError(FatalError):
    """Another instance with the same transactional_id took over, or the transaction timed
    out and the coordinator fenced this one."""


# error_code → kind. Anything not listed and not retriable is abortable.
KIND_BY_CODE: dict[str, type[ClientError]] = {
    "UNKNOWN_TOPIC_OR_PARTITION": UnknownTopicOrPartitionError,
    "PRODUCER_FENCED": ProducerFencedError,
    "INVALID_PRODUCER_EPOCH": ProducerFencedError,
    "INVALID_PRODUCER_ID_MAPPING": FatalError,
    "TRANSACTIONAL_ID_NOT_FOUND": FatalError,
    "INVALID_TXN_STATE": FatalError,
    "INVALID_TRANSACTION_TIMEOUT": FatalError,
}
# Abortable errors after which the producer's sequence numbers are unknown: abort_transaction()
# bumps the epoch (KIP-360) so that sequences restart at zero under the same producer id.
EPOCH_BUMP_CODES = {"OUT_OF_ORDER_SEQUENCE_NUMBER", "UNKNOWN_PRODUCER_ID", "DUPLICATE_SEQUENCE_NUMBER"}


def classify(error_code: str, message: str, retriable: bool, status: int | None) -> ClientError:
    if retriable:
        return RetriableError(error_code, message, status)
    kind = KIND_BY_CODE.get(error_code, AbortableError)
    return kind(error_code, message, status)
