"""Kafka's transaction descriptions (KIP-664) over the services the HTTP door calls:
DescribeTransactions and ListTransactions as /v1/transactions, and DescribeProducers from the
partitions' sequence states. Each transactional id (partition) of a request is answered on its
own, as Kafka does: one's refusal leaves the others' outcome as it is."""

from __future__ import annotations

import datetime
import logging
from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode

from app.domain import acl
from app.domain.acl import Operation
from app.domain.errors import OutboxError, TransactionalIdNotFound
from app.domain.types import TransactionState
from app.kafka.api_keys import ApiKey
from app.kafka.auth import access, refusal_code
from app.kafka.errors import error_code
from app.kafka.protocol import NO_WAIT, build, response_module

logger = logging.getLogger("app.kafka")

# Kafka's -1 for "no transaction start" (an idle transactional id): the millisecond before the
# epoch; and the schema's default, the epoch, for a transactional id it could not describe.
_NO_TIME = datetime.datetime.fromtimestamp(-0.001, tz=datetime.timezone.utc)
_EPOCH = datetime.datetime.fromtimestamp(0, tz=datetime.timezone.utc)
# The schema's default transaction timeout, zero, for a transactional id it could not describe.
_NO_TIMEOUT = datetime.timedelta(0)
# The most producers one partition of DescribeProducers answers.
DESCRIBE_PRODUCERS_MAX = 10_000
# The most transactions one ListTransactions answers, which has no paging: ten times an HTTP
# page's largest, a few tens of megabytes held while it is answered. More matching is logged.
LIST_TRANSACTIONS_MAX = 100_000


class TransactionDescriptionApis:
    def __init__(self, services: Any) -> None:
        self.services = services
        self.handlers: dict[ApiKey, Callable[[Any, int], Any]] = {
            ApiKey.DESCRIBE_PRODUCERS: self.describe_producers,
            ApiKey.DESCRIBE_TRANSACTIONS: self.describe_transactions,
            ApiKey.LIST_TRANSACTIONS: self.list_transactions}

    def describe_transactions(self, body: Any, version: int) -> Any:
        m = response_module(ApiKey.DESCRIBE_TRANSACTIONS, version)
        assert m is not None
        return build(m.DescribeTransactionsResponse, throttle_time=NO_WAIT, transaction_states=tuple(
            self._describe_transaction(m, tid) for tid in body.transactional_ids))

    def _describe_transaction(self, m: Any, transactional_id: str) -> Any:
        try:
            if (denied := refusal_code(Operation.DESCRIBE, acl.transactional_id(transactional_id))) is not None:
                return build(m.TransactionState, error_code=denied, transactional_id=transactional_id,
                             transaction_state="", transaction_timeout=_NO_TIMEOUT, transaction_start_time=_EPOCH,
                             producer_id=0, producer_epoch=0, topics=())
            # Only the topics the principal may describe, as the HTTP door's description.
            view = self.services.coordinator.listing.describe(transactional_id).describable(access().allows)
        except OutboxError as e:
            # The refusal with every other field at its schema default, as Kafka answers it.
            # TRANSACTIONAL_ID_NOT_FOUND is this API's own code (a producing request gets
            # another for it: errors.py).
            code = (ErrorCode.transactional_id_not_found if isinstance(e, TransactionalIdNotFound)
                    else error_code(e))
            return build(m.TransactionState, error_code=code, transactional_id=transactional_id,
                         transaction_state="", transaction_timeout=_NO_TIMEOUT, transaction_start_time=_EPOCH,
                         producer_id=0, producer_epoch=0, topics=())
        meta = view.meta
        by_topic: dict[str, list[int]] = {}
        for p in view.partitions:
            by_topic.setdefault(p.topic, []).append(p.partition)
        started = (_NO_TIME if meta.txn_started_ms is None
                   else datetime.datetime.fromtimestamp(meta.txn_started_ms / 1000, tz=datetime.timezone.utc))
        return build(m.TransactionState, error_code=ErrorCode.none, transactional_id=transactional_id,
                     transaction_state=meta.state.value,
                     transaction_timeout=datetime.timedelta(milliseconds=meta.transaction_timeout_ms),
                     transaction_start_time=started, producer_id=meta.producer_id, producer_epoch=meta.producer_epoch,
                     topics=tuple(build(m.TopicData, topic=name, partitions=tuple(parts))
                                  for name, parts in sorted(by_topic.items())))

    def list_transactions(self, body: Any, version: int) -> Any:
        m = response_module(ApiKey.LIST_TRANSACTIONS, version)
        assert m is not None
        known = {s.value: s for s in TransactionState}
        unknown = tuple(f for f in body.state_filters if f not in known)
        states = [known[f] for f in body.state_filters if f in known] or None
        duration = getattr(body, "duration_filter", -1)
        producers = set(body.producer_id_filters) or None
        door = access()
        security, principal = door.state, door.principal
        # The ACL decision itself, not door.allows: that records each check for the rules
        # (ListTransactions needs none), a set as large as the table once every id is walked.
        describable = None if security is None else (
            lambda tid: security.is_allowed(principal, Operation.DESCRIBE, acl.transactional_id(tid)))
        try:
            if unknown and states is None:
                listed: list[Any] = []  # only filters naming no state: Kafka lists nothing
            else:
                # Every id is walked (ListTransactions has no paging to continue with): the
                # state and producer filters in SQL, the ACLs per chunk, so neither another
                # principal's ids nor other producers' can push a match out. Only the matches
                # are capped, for the answer's memory.
                listing = self.services.coordinator.listing
                page = (listing.list(states, LIST_TRANSACTIONS_MAX, describable=describable, producer_ids=producers,
                                     bounded=False) if duration < 0
                        else listing.list_begun_before(states, LIST_TRANSACTIONS_MAX, duration,
                                                       describable=describable, producer_ids=producers,
                                                       bounded=False))
                listed = page.transactions
                if page.next_after is not None:
                    logger.warning("ListTransactions answered the first %d matching transactional ids, up to %r; "
                                 "more match: narrow it with state or producer id filters, or list them with "
                                 "GET /v1/transactions (which pages)", LIST_TRANSACTIONS_MAX, page.next_after)
        except OutboxError as e:
            return build(m.ListTransactionsResponse, throttle_time=NO_WAIT, error_code=error_code(e),
                         unknown_state_filters=unknown, transaction_states=())
        return build(m.ListTransactionsResponse, throttle_time=NO_WAIT, error_code=ErrorCode.none,
                     unknown_state_filters=unknown, transaction_states=tuple(
                         build(m.TransactionState, transactional_id=t.transactional_id, producer_id=t.producer_id,
                               transaction_state=t.state.value)
                         for t in listed))

    def describe_producers(self, body: Any, version: int) -> Any:
        m = response_module(ApiKey.DESCRIBE_PRODUCERS, version)
        assert m is not None
        topics = []
        for t in body.topics:
            answered = []
            denied = refusal_code(Operation.READ, acl.topic(t.name))
            for p in t.partition_indexes:
                if denied is not None:
                    answered.append(build(m.PartitionResponse, partition_index=p, error_code=denied,
                                          error_message=None, active_producers=()))
                    continue
                try:
                    active = self.services.log.describe_producers(t.name, p, DESCRIBE_PRODUCERS_MAX)
                except OutboxError as e:
                    answered.append(build(m.PartitionResponse, partition_index=p, error_code=error_code(e),
                                          error_message=e.message, active_producers=()))
                    continue
                answered.append(build(m.PartitionResponse, partition_index=p, error_code=ErrorCode.none,
                                      error_message=None, active_producers=tuple(
                                          build(m.ProducerState, producer_id=a.producer_id,
                                                producer_epoch=a.producer_epoch, last_sequence=a.last_sequence,
                                                last_timestamp=a.last_timestamp_ms, coordinator_epoch=-1,
                                                current_txn_start_offset=(-1 if a.current_txn_start_offset is None
                                                                          else a.current_txn_start_offset))
                                          for a in active)))
            topics.append(build(m.TopicResponse, name=t.name, partitions=tuple(answered)))
        return build(m.DescribeProducersResponse, throttle_time=NO_WAIT, topics=tuple(topics))

