"""Client exceptions, in the three kinds a Kafka transactional client distinguishes."""

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


class ProducerFencedError(FatalError):
    """Another instance with the same transactional_id took over, or the transaction timed
    out and the coordinator fenced this one."""


# error_code → kind. Anything not listed and not retriable is abortable.
FATAL_CODES = {
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
    kind = FATAL_CODES.get(error_code, AbortableError)
    return kind(error_code, message, status)
