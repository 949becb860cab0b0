from __future__ import annotations

from typing import Annotated

import orjson
from fastapi import APIRouter, Depends, Path, Query, Response

from app.api.blocking import run_blocking

from app.api.deps import ServicesDep
from app.api.errors import documented
from app.api.json_body import json_body
from app.api.schemas.common import ID_MAX_LENGTH, ID_PATTERN
from app.api.security import AccessDep
from app.domain import acl
from app.domain.acl import Operation
from app.api.schemas.transactions import (
    AddOffsetsRequest,
    BeginTransactionRequest,
    CommitResponse,
    EndTransactionRequest,
    PendingOffset,
    PrepareTransactionRequest,
    TransactionDescription,
    TransactionList,
    TransactionPartition,
    TransactionSummary,
)
from app.domain.transaction import OPEN_STATE_NAMES, PreparedTxnRef, TransactionMetadata
from app.domain.types import TRANSACTION_LIST_DEFAULT, TRANSACTION_LIST_MAX, TransactionState
from app.api.routers.groups import group_metadata
from app.domain.offsets import NO_LEADER_EPOCH, OffsetToStage
from app.api.send_body import CommitBody, DecodedCommit
from app.services.transaction_listing import TransactionView

router = APIRouter(prefix="/v1/transactions", tags=["transactions"])

TransactionalIdPath = Annotated[str, Path(min_length=1, max_length=ID_MAX_LENGTH, pattern=ID_PATTERN)]


def _summary(meta: TransactionMetadata, now_ms: int) -> TransactionSummary:
    return TransactionSummary(
        transactional_id=meta.transactional_id,
        state=meta.state,
        producer_id=meta.producer_id,
        producer_epoch=meta.producer_epoch,
        txn_id=meta.txn_id,
        transaction_timeout_ms=meta.transaction_timeout_ms,
        txn_started_ms=meta.txn_started_ms,
        age_ms=meta.age_ms(now_ms),
        updated_ms=meta.updated_ms,
        transaction_version=meta.transaction_version,
        awaits_application_decision=meta.state is TransactionState.PREPARED,
    )


def _description(view: TransactionView, now_ms: int, access: AccessDep) -> TransactionDescription:
    """The transaction as the caller may describe it (TransactionView.describable, the Kafka
    door's DescribeTransactions' too)."""
    view = view.describable(access.allows)
    return TransactionDescription(
        **_summary(view.meta, now_ms).model_dump(),
        partitions=[
            TransactionPartition(topic=p.topic, partition=p.partition, first_offset=p.first_offset)
            for p in view.partitions
        ],
        pending_offsets=[
            PendingOffset(group_id=o.group_id, topic=o.topic, partition=o.partition,
                          offset=o.committed_offset, metadata=o.metadata, leader_epoch=o.leader_epoch)
            for o in view.pending_offsets
        ],
    )


@router.post("/{transactional_id}/begin", operation_id="begin_transaction",
             response_model=TransactionDescription, responses=documented(400, 401, 403, 404, 409, 415))
def begin_transaction(
    transactional_id: TransactionalIdPath, body: Annotated[BeginTransactionRequest, json_body(BeginTransactionRequest)], services: ServicesDep,
    access: AccessDep,
) -> TransactionDescription:
    """BeginTransaction: Empty/CompleteCommit/CompleteAbort → Ongoing, with a new `txn_id`."""
    access.require(Operation.WRITE, acl.transactional_id(transactional_id))
    view = services.coordinator.begin(transactional_id, body.producer_id, body.producer_epoch)
    return _description(view, services.clock(), access)


@router.post("/{transactional_id}/offsets", operation_id="add_offsets",
             response_model=TransactionDescription, responses=documented(400, 401, 403, 404, 409, 415))
def add_offsets(
    transactional_id: TransactionalIdPath, body: Annotated[AddOffsetsRequest, json_body(AddOffsetsRequest)], services: ServicesDep,
    access: AccessDep,
) -> TransactionDescription:
    """AddOffsets: stage a group's offsets in the open transaction; they become the group's
    committed offsets when it commits and are dropped if it aborts. Needs WRITE on the
    transactional id, READ on the group and READ on each topic."""
    access.require(Operation.WRITE, acl.transactional_id(transactional_id))
    access.require(Operation.READ, acl.group(body.group_id))
    for o in body.offsets:
        access.require(Operation.READ, acl.topic(o.topic))
    view = services.coordinator.add_offsets(
        transactional_id,
        body.producer_id,
        body.producer_epoch,
        body.group_id,
        [OffsetToStage(o.topic, o.partition, o.offset, o.metadata, NO_LEADER_EPOCH, body.read_order)
         for o in body.offsets],
        group_metadata(body.generation_id, body.member_id),
    )
    return _description(view, services.clock(), access)


@router.post("/{transactional_id}/prepare", operation_id="prepare_transaction",
             response_model=TransactionDescription, responses=documented(400, 401, 403, 404, 409, 415))
def prepare_transaction(
    transactional_id: TransactionalIdPath,
    body: Annotated[PrepareTransactionRequest, json_body(PrepareTransactionRequest)], services: ServicesDep,
    access: AccessDep,
) -> TransactionDescription:
    """Prepare (KIP-939): Ongoing → Prepared. The transaction takes no more records or offsets,
    is never timed out, survives every restart, and ends only by Commit or Abort, from this
    producer or from a new instance that took the transactional id over with
    `keep_prepared_txn`. For two-phase commit with another database: prepare, record the
    decision (this `txn_id`) in that database's transaction, then commit. A retry answers the same.
    """
    access.require(Operation.WRITE, acl.transactional_id(transactional_id))
    view = services.coordinator.prepare(
        transactional_id, body.producer_id, body.producer_epoch, txn_id=body.txn_id,
        acknowledged_records=body.acknowledged_records
    )
    return _description(view, services.clock(), access)


@router.post("/{transactional_id}/commit", operation_id="commit_transaction",
             response_model=CommitResponse, response_model_exclude_unset=True,
             responses=documented(400, 401, 403, 404, 409, 413, 415))
async def commit_transaction(
    transactional_id: TransactionalIdPath, decoded: Annotated[DecodedCommit, Depends(CommitBody())],
    services: ServicesDep, access: AccessDep,
) -> Response:
    """Commit: PrepareCommit, then a COMMIT marker in every partition of the transaction and
    its staged offsets moved to the group, all visible together.

    Once this answers 200 the transaction will commit whatever crashes. The state returned
    is CompleteCommit, or PrepareCommit when the service leaves completion to the coordinator
    worker (`complete_inline=false`). A retry after success answers the same.

    `prepared` names other Prepared transactions to commit in the same decision (a joint
    commit): parallel writers each prepare their own transaction, and one commit makes all of
    them visible at once; with inline completion, in one database transaction.

    Transaction version 2: the answer carries the producer's new `producer_epoch` (and a new
    `producer_id` once the epoch is exhausted), which the next transaction's requests carry.
    A retry with the epoch this request carried is answered the same, until the next
    transaction begins. Under version 2 a Commit may also carry the transaction's last
    `batches`: they are appended and the transaction committed in one request, all or nothing.

    `acknowledged_records` (required from a producer of durability "commit", whose Sends are
    answered before they are durable): when the transaction holds another number of records,
    it is aborted and the answer is TRANSACTION_INCOMPLETE (409).
    """
    body = decoded.request
    access.require(Operation.WRITE, acl.transactional_id(transactional_id))
    for ref in body.prepared:
        access.require(Operation.WRITE, acl.transactional_id(ref.transactional_id))
    for topic in sorted({b.topic for b in decoded.batches}):
        access.require(Operation.WRITE, acl.topic(topic))
    # async, with the database's part handed to a worker thread here rather than by FastAPI,
    # as the Send's is (app.api.blocking says why): a producer's every transaction ends here.
    view = await run_blocking(
        services.coordinator.end_transaction,
        transactional_id, body.producer_id, body.producer_epoch, commit=True, txn_id=body.txn_id,
        prepared=[PreparedTxnRef(ref.transactional_id, ref.txn_id) for ref in body.prepared],
        batches=decoded.batches, acknowledged_records=body.acknowledged_records,
    )
    # The answer is CommitResponse (the route's response_model, which documents it), written as
    # JSON here rather than validated and serialized again by FastAPI: `results` only when the
    # Commit carried batches, as response_model_exclude_unset left it out.
    # tests/integration/test_commit_answer.py holds the answer to the model.
    answer = _description(view, services.clock(), access).model_dump(mode="json")
    if decoded.batches:
        answer["results"] = [
            {"topic": r.topic, "partition": r.partition, "base_offset": r.base_offset,
             "last_offset": r.base_offset + r.record_count - 1, "record_count": r.record_count,
             "duplicate": r.duplicate}
            for r in view.sent
        ]
    return Response(orjson.dumps(answer), media_type="application/json")


@router.post("/{transactional_id}/abort", operation_id="abort_transaction",
             response_model=TransactionDescription, responses=documented(400, 401, 403, 404, 409, 415))
def abort_transaction(
    transactional_id: TransactionalIdPath, body: Annotated[EndTransactionRequest, json_body(EndTransactionRequest)], services: ServicesDep,
    access: AccessDep,
) -> TransactionDescription:
    """Abort: PrepareAbort, then ABORT markers; staged offsets are dropped. Under transaction
    version 2 the answer carries the producer's new epoch, as a Commit's does."""
    access.require(Operation.WRITE, acl.transactional_id(transactional_id))
    view = services.coordinator.end_transaction(
        transactional_id, body.producer_id, body.producer_epoch, commit=False, txn_id=body.txn_id
    )
    return _description(view, services.clock(), access)


@router.get("/{transactional_id}", operation_id="describe_transaction",
            response_model=TransactionDescription, responses=documented(401, 403, 404))
def describe_transaction(transactional_id: TransactionalIdPath, services: ServicesDep,
                         access: AccessDep) -> TransactionDescription:
    """State, producer id and epoch, partitions, pending offsets and age of a transactional_id.
    Needs DESCRIBE on the transactional id."""
    access.require(Operation.DESCRIBE, acl.transactional_id(transactional_id))
    return _description(services.coordinator.listing.describe(transactional_id), services.clock(), access)


@router.get("", operation_id="list_transactions", response_model=TransactionList,
            responses=documented(400, 401, 403))
def list_transactions(
    services: ServicesDep,
    access: AccessDep,
    state: Annotated[list[TransactionState] | None, Query()] = None,
    min_age_ms: Annotated[int | None, Query(ge=0, le=2**63 - 1, description=(
        f"only transactions open ({OPEN_STATE_NAMES}: their records hold back their partitions' last stable "
        "offset) at least this long since they began; with a `state` in which none is open, 400 INVALID_REQUEST"))] = None,
    hanging: Annotated[bool, Query(description=(
        "only Ongoing transactions, or decided ones left completing, older than the maximum transaction timeout "
        "(a Prepared transaction waits for its application's decision, however long, and is not listed)"))] = False,
    limit: Annotated[int, Query(ge=1, le=TRANSACTION_LIST_MAX)] = TRANSACTION_LIST_DEFAULT,
    transactional_id_prefix: Annotated[str | None, Query(
        min_length=1, max_length=ID_MAX_LENGTH, pattern=ID_PATTERN,
        description="only the transactional ids that start with it (exactly, case and all: "
                    "`%` and `_` are plain characters), e.g. `my-sink.` for a family of ids `my-sink.<n>`",
    )] = None,
    after: Annotated[str | None, Query(
        min_length=1, max_length=ID_MAX_LENGTH, pattern=ID_PATTERN, description=(
            "only the transactional ids after this one: a previous answer's `next_after`, to continue a list it cut"),
    )] = None,
) -> TransactionList:
    """Transactions by state, age and transactional id prefix, in transactional id order;
    `hanging=true` lists those the coordinator should have ended already (is a coordinator
    worker running?), with the prefix too. With authentication on, only the transactional ids
    the principal may describe are listed (Kafka's ListTransactions). A list cut by `limit`,
    or by the ids one request reads, answers `next_after`: pass it as `after` for the rest."""
    now = services.clock()
    listing = services.coordinator.listing
    describable = None if access.unchecked else (
        lambda tid: access.allows(Operation.DESCRIBE, acl.transactional_id(tid)))
    page = (listing.hanging(now, transactional_id_prefix, limit=limit, after=after, describable=describable)
            if hanging else listing.list(state, limit, min_age_ms, transactional_id_prefix, after=after,
                                         describable=describable))
    return TransactionList(transactions=[_summary(m, now) for m in page.transactions], next_after=page.next_after)


admin_router = APIRouter(prefix="/v1/admin/transactions", tags=["admin"])


@admin_router.post("/{transactional_id}/abort", operation_id="admin_abort_transaction",
                   response_model=TransactionDescription, responses=documented(401, 403, 404, 409))
def admin_abort_transaction(
    transactional_id: TransactionalIdPath, services: ServicesDep, access: AccessDep,
    force_prepared: Annotated[bool, Query(description=(
        "abort a Prepared transaction too: without it one is refused (409 TRANSACTION_PREPARED), as its "
        "application decides it and its own database may have committed its side already"))] = False,
    txn_id: Annotated[int | None, Query(ge=0, description=(
        "the transaction the caller looked at: if the transactional id's current transaction is another "
        "(that one completed and the next began meanwhile), the abort is refused (409 INVALID_TXN_STATE) "
        "and nothing changes"))] = None,
) -> TransactionDescription:
    """Operator abort of a transaction not decided yet (Ongoing, or Prepared with
    `force_prepared`), without its producer: the epoch is bumped as on timeout, so the producer
    is fenced if it comes back. Force the abort of a Prepared transaction only once its
    application's own database is known not to have committed it. Needs ALTER or CLUSTER_ACTION on the cluster: the abort writes markers as the cluster
    does, which Kafka's authorizer lets either operation do; as Kafka's, ALTER is asked
    silently and a refusal names (and audits) CLUSTER_ACTION."""
    access.require_any([(Operation.ALTER, acl.CLUSTER), (Operation.CLUSTER_ACTION, acl.CLUSTER)])
    return _description(services.coordinator.admin_abort(transactional_id, force_prepared=force_prepared, txn_id=txn_id),
                        services.clock(), access)
