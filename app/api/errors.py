"""Domain errors → HTTP, in this one place. Every refusal is an ErrorResponse body."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect

from app.api import methods
from app.domain import errors as e
from app.metrics import ERRORS

logger = logging.getLogger(__name__)

STATUS_BY_ERROR: dict[type[e.OutboxError], int] = {
    e.InvalidRequest: 400,
    e.InvalidGroupId: 400,
    e.GroupMetadataTooLarge: 400,
    e.InvalidRecord: 400,
    e.InvalidTimestamp: 400,
    e.UnsupportedMediaType: 415,
    e.InvalidTopic: 400,
    e.InvalidPartitions: 400,
    e.InvalidConfig: 400,
    e.InvalidTransactionTimeout: 400,
    e.RecordListTooLarge: 413,
    e.MessageTooLarge: 413,
    e.OffsetMetadataTooLarge: 413,
    e.UnknownTopicOrPartition: 404,
    e.TransactionalIdNotFound: 404,
    e.OffsetOutOfRange: 416,
    e.TopicAlreadyExists: 409,
    e.TopicHasOpenTransactions: 409,
    e.UnknownProducerId: 409,
    e.ForgottenProducerId: 409,
    e.ProducerFenced: 409,
    e.InvalidProducerEpoch: 409,
    e.InvalidProducerIdMapping: 409,
    e.InvalidTxnState: 409,
    e.TransactionIncomplete: 409,
    e.TransactionPrepared: 409,
    e.ConcurrentTransactions: 409,
    e.OutOfOrderSequenceNumber: 409,
    e.DuplicateSequenceNumber: 409,
    e.OffsetMismatch: 409,
    e.UnstableOffsetCommit: 409,
    e.IllegalGeneration: 409,
    e.UnknownMemberId: 409,
    e.MemberIdRequired: 409,
    e.FencedInstanceId: 409,
    e.RebalanceInProgress: 409,
    e.InconsistentGroupProtocol: 409,
    e.GroupMaxSizeReached: 409,
    e.GroupIdNotFound: 404,
    e.NonEmptyGroup: 409,
    e.GroupSubscribedToTopic: 409,
    e.InvalidSessionTimeout: 400,
    e.StorageUnavailable: 503,
    e.LockWaitTimedOut: 503,
    e.SchemaNotMigrated: 503,
    e.ThrottlingQuotaExceeded: 429,
    e.ResourceNotFound: 404,
    e.AuthenticationFailed: 401,
    e.IdentityProviderUnavailable: 503,
    e.TopicAuthorizationFailed: 403,
    e.GroupAuthorizationFailed: 403,
    e.TransactionalIdAuthorizationFailed: 403,
    e.ClusterAuthorizationFailed: 403,
}
RETRY_AFTER_S = "1"


def error_body(code: str, message: str, retriable: bool, details: dict | None = None) -> dict:
    """Every refusal's body; building one counts it in outbox_errors_total."""
    ERRORS.labels(code).inc()
    body: dict = {"error_code": code, "message": message, "retriable": retriable}
    if details:
        body["details"] = details
    return body


def _outbox_error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, e.OutboxError)
    return error_response(exc)


def error_response(exc: e.OutboxError) -> JSONResponse:
    """The answer to a domain error, for the handler and for a middleware that refuses before
    the app runs (app.api.body_limit)."""
    status = STATUS_BY_ERROR.get(type(exc), 500)
    headers = {"Retry-After": RETRY_AFTER_S} if exc.retriable else None
    response = JSONResponse(
        error_body(exc.error_code, exc.message, exc.retriable, exc.details or None),
        status_code=status,
        headers=headers,
    )
    if isinstance(exc, e.AuthenticationFailed):
        for challenge in exc.challenges or ('Bearer realm="outbox"',):
            response.headers.append("WWW-Authenticate", challenge)
    return response


def _validation_error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    problems = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err.get("loc", ()))
        problems.append({"field": loc, "problem": err.get("msg", "invalid")})
    summary = "; ".join(f"{p['field']}: {p['problem']}" for p in problems[:5])
    return JSONResponse(
        error_body("INVALID_REQUEST", f"invalid request: {summary}", False, {"errors": problems[:50]}),
        status_code=422,
    )


def http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    code = {404: "NOT_FOUND", 405: "METHOD_NOT_ALLOWED", 413: "RECORD_LIST_TOO_LARGE"}.get(
        exc.status_code, "INVALID_REQUEST"
    )
    return JSONResponse(
        error_body(code, str(exc.detail), False), status_code=exc.status_code, headers=_headers(request, exc)
    )


def _headers(request: Request, exc: StarletteHTTPException) -> dict[str, str] | None:
    # A 405's Allow as the router gives it names only the first matching route's methods,
    # in a set's order: every method of the path instead (app.api.methods).
    allow = methods.allowed(request) if exc.status_code == 405 else ""
    return {**(exc.headers or {}), "Allow": allow} if allow else exc.headers


def _unexpected(request: Request, exc: Exception) -> JSONResponse:
    # Starlette sends this answer from outside every middleware: the request id set by
    # app.api.request_metrics is echoed here, and ties the traceback to the access line.
    request_id = getattr(request.state, "request_id", None)
    logger.exception("unexpected error (request_id=%s)", request_id, exc_info=exc)
    return JSONResponse(
        error_body("UNKNOWN_SERVER_ERROR", "unexpected server error; see the service log", True),
        status_code=500,
        headers={"X-Request-ID": request_id} if request_id else None,
    )


# The status the access log and outbox_http_requests_total give a request whose client closed
# the connection before its body was read (nginx's "client closed request"): nobody reads the
# answer, and it is not the service's failure.
CLIENT_CLOSED_REQUEST = 499


def _client_gone(_: Request, exc: Exception) -> Response:
    # A client that hung up in the middle of its body (or was closed for sending it too slowly,
    # app.api.http_timeouts): handled here rather than by `_unexpected`, which logged it with
    # two tracebacks and counted a 500 and an UNKNOWN_SERVER_ERROR, as if the service had failed.
    return Response(status_code=CLIENT_CLOSED_REQUEST)


def install(app: FastAPI) -> None:
    app.add_exception_handler(ClientDisconnect, _client_gone)
    app.add_exception_handler(e.OutboxError, _outbox_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, http_error)
    app.add_exception_handler(Exception, _unexpected)


def documented(*statuses: int) -> dict[int | str, dict]:
    """`responses=` for a route: the error statuses it may answer, all with ErrorResponse.

    422 (schema), 413 (a body over OUTBOX_MAX_REQUEST_BYTES, refused by app.api.body_limit
    before any route runs), 429 (a body over 1 MiB past OUTBOX_HTTP_MAX_QUEUED_BODY_BYTES or its
    principal's share of it, refused there too) and 503 (database unavailable) can answer any route."""
    from app.api.schemas.common import ErrorResponse

    text = {
        401: "no valid credentials (authentication on): send an API key or a bearer token",
        403: "no ACL allows this operation to the principal (TOPIC_, GROUP_, TRANSACTIONAL_ID_ or CLUSTER_AUTHORIZATION_FAILED); nothing was changed",
        400: "invalid request: a malformed body (empty, not UTF-8, not JSON, nested too deep), or a rule of the operation broken",
        404: "unknown topic, partition or transactional_id",
        409: "state conflict (fenced, wrong state, sequence, offset mismatch); see retriable",
        413: "request too large: too many records, a body over the size limit, a record over its topic's max_message_bytes (MESSAGE_TOO_LARGE), or an offset's metadata over 4,096 characters (OFFSET_METADATA_TOO_LARGE)",
        415: "the body is not sent as JSON (content-type: application/json)",
        416: "offset out of range",
        429: "THROTTLING_QUOTA_EXCEEDED: too many requests already wait (for records, or for pending offsets) in "
             "this process or of this principal, or a Fetch's answer over 1 MiB would wait for its client beside "
             "the most that may (OUTBOX_FETCH_SPOOL_MAX_BYTES), or a body over 1 MiB does not fit beside the "
             "request bodies this process or this principal holds (OUTBOX_HTTP_MAX_QUEUED_BODY_BYTES, "
             "_PER_PRINCIPAL); retriable, with Retry-After",
        422: "the body or a parameter does not match the schema",
        503: "database unavailable (STORAGE_UNAVAILABLE), or its schema not migrated yet "
             "(SCHEMA_NOT_MIGRATED: run `outbox migrate`); retriable",
    }
    return {s: {"model": ErrorResponse, "description": text[s]} for s in sorted({413, 422, 429, 503, *statuses})}
