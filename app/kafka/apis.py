"""The Kafka APIs served, one handler each: decode what the request asks, call the service the
HTTP door also calls, build the answer of the request's version (protocol.build). Handlers run
in a worker thread (server.Connection): the services block on the database."""

from __future__ import annotations

import datetime
import uuid
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from app.domain import acl
from app.domain.acl import CLUSTER, Operation
from app.domain.errors import OutboxError
from app.domain.offsets import GroupMetadata
from app.domain.request_shape import duplicated
from app.domain.read import offset_order_upper_bound
from app.domain.types import IsolationLevel, TransactionVersion
from app.kafka import group_offsets, records
from app.kafka.acls import AclApis
from app.kafka.api_keys import SERVED, ApiKey, transaction_version
from app.kafka.auth import (NOT_REQUESTED, RULES, access, authorized_operations, coordinator_resource, refusal_code,
                            topics_not_acted_on)
from app.kafka.errors import coordinator_error_code, error_code, metadata_code, transactional_code
from app.kafka.group_offsets import GroupOffsetApis
from app.kafka.groups import GroupApis
from app.kafka.produce import ProduceApi
from app.kafka.protocol import (
    FINALIZED_FEATURES,
    FINALIZED_FEATURES_EPOCH,
    NO_REAUTHENTICATION,
    NO_WAIT,
    build,
    isolation_level,
    partitions_once,
    response_module,
    supported_features,
)
from app.kafka.topic_admin import TopicAdminApis
from app.kafka.transaction_descriptions import TransactionDescriptionApis

_ZERO_UUID = uuid.UUID(int=0)
_METADATA_TOPIC_IDS = 12  # the first version of Metadata to name a topic by its id
_LATEST, _EARLIEST = -1, -2
_NO_TIMESTAMP = -1
# An erring partition's records in a Fetch answer: empty, as Kafka answers, never null. Before
# Fetch's flexible versions librdkafka 2.0 takes a null record set (size -1) for a corrupt
# answer and fetches again for ever.
_NO_RECORDS = b""


@dataclass(frozen=True, slots=True)
class Broker:
    """This process as Kafka's clients see it: the broker, leader of every partition and the
    coordinator of every group and transactional id."""

    node_id: int
    host: str
    port: int


class Apis:
    def __init__(self, services: Any, broker: Broker) -> None:
        self.services = services
        self.settings = services.settings
        self.broker = broker
        self.produce_api = ProduceApi(services)
        self.handlers = {
            ApiKey.PRODUCE: self.produce_api.produce, ApiKey.FETCH: self.fetch_now,
            ApiKey.LIST_OFFSETS: self.list_offsets, ApiKey.METADATA: self.metadata,
            ApiKey.FIND_COORDINATOR: self.find_coordinator, ApiKey.API_VERSIONS: self.api_versions,
            ApiKey.INIT_PRODUCER_ID: self.init_producer_id, ApiKey.ADD_PARTITIONS_TO_TXN: self.add_partitions_to_txn,
            ApiKey.ADD_OFFSETS_TO_TXN: self.add_offsets_to_txn, ApiKey.END_TXN: self.end_txn,
            ApiKey.TXN_OFFSET_COMMIT: self.txn_offset_commit, ApiKey.SASL_HANDSHAKE: self.sasl_again,
            ApiKey.SASL_AUTHENTICATE: self.sasl_again}
        self.admin = TopicAdminApis(services, broker.node_id)
        self.handlers |= self.admin.handlers
        self.handlers |= TransactionDescriptionApis(services).handlers
        self.handlers |= AclApis(services).handlers
        # The classic group protocol and a group's offsets, modules of their own (their ACL
        # requirements are auth.RULES' too).
        self.groups = GroupApis(services)
        self.handlers |= {
            ApiKey.JOIN_GROUP: self.groups.join_group, ApiKey.HEARTBEAT: self.groups.heartbeat,
            ApiKey.LEAVE_GROUP: self.groups.leave_group, ApiKey.SYNC_GROUP: self.groups.sync_group,
            ApiKey.DESCRIBE_GROUPS: self.groups.describe_groups, ApiKey.LIST_GROUPS: self.groups.list_groups,
            ApiKey.DELETE_GROUPS: self.groups.delete_groups}
        self.handlers |= GroupOffsetApis(services).handlers
        # Every served API has its ACL rule (app.kafka.auth.RULES), which the listener holds it to.
        assert set(self.handlers) == set(SERVED) == set(RULES)

    # --- SaslHandshake, SaslAuthenticate once authenticated --------------------------------

    def sasl_again(self, body: Any, version: int) -> Any:
        """The SASL exchange before authentication is the listener's (app.kafka.auth); once a
        connection is authenticated, or on a listener without authentication, another is
        ILLEGAL_SASL_STATE (authenticating again is not served: every SaslAuthenticate answer
        gives the session the lifetime NO_REAUTHENTICATION)."""
        m = response_module(ApiKey.SASL_HANDSHAKE if hasattr(body, "mechanism") else ApiKey.SASL_AUTHENTICATE, version)
        assert m is not None
        if hasattr(body, "mechanism"):
            return build(m.SaslHandshakeResponse, error_code=ErrorCode.illegal_sasl_state, mechanisms=())
        return build(m.SaslAuthenticateResponse, error_code=ErrorCode.illegal_sasl_state,
                     error_message="this connection is already authenticated", auth_bytes=b"",
                     session_lifetime=NO_REAUTHENTICATION)

    # --- ApiVersions -----------------------------------------------------------------------

    def api_versions(self, body: Any, version: int) -> Any:
        return api_versions_answer(version, ErrorCode.none)

    # --- Metadata --------------------------------------------------------------------------

    def metadata(self, body: Any, version: int) -> Any:
        m = response_module(ApiKey.METADATA, version)
        assert m is not None
        if body.topics and version < _METADATA_TOPIC_IDS and any(
                t.name is None or getattr(t, "topic_id", None) not in (None, _ZERO_UUID) for t in body.topics):
            return self._metadata_invalid(m, body)
        # A name named twice is answered once, as Kafka answers the set of names asked: a
        # request repeating one name cannot make the door answer (and check ACLs for) each copy.
        # A topic named by its id alone (version 12 on) is not one of them: no topic here has
        # an id, so Kafka's answer to an id it does not know, UNKNOWN_TOPIC_ID, comes first.
        wanted = None if body.topics is None or (version == 0 and not body.topics) else list(
            dict.fromkeys(t.name for t in body.topics if t.name is not None))
        by_id = [] if body.topics is None else [
            build(m.MetadataResponseTopic, error_code=ErrorCode.unknown_topic_id, name=None,
                  topic_id=topic_id, is_internal=False, partitions=(),
                  topic_authorized_operations=NOT_REQUESTED)
            for topic_id in dict.fromkeys(t.topic_id or _ZERO_UUID for t in body.topics if t.name is None)]
        by_name = {t.name: t for t in self.services.topics.list()}
        # As Kafka: listing every topic shows only those the principal may describe; a topic
        # named but not describable is TOPIC_AUTHORIZATION_FAILED, whether it exists or not.
        names = [n for n in sorted(by_name) if access().allows(Operation.DESCRIBE, acl.topic(n))] \
            if wanted is None else wanted
        # KIP-430: the operations the principal may do on each topic it may describe (version 8
        # on) and on the cluster (versions 8 to 10), when asked; INT32_MIN otherwise.
        topic_operations = getattr(body, "include_topic_authorized_operations", False)
        answered = []
        for name in names:
            topic = by_name.get(name)
            if wanted is not None and (denied := refusal_code(Operation.DESCRIBE, acl.topic(name))) is not None:
                answered.append(build(m.MetadataResponseTopic, error_code=denied,
                                      name=name, topic_id=_ZERO_UUID, is_internal=False, partitions=()))
                continue
            operations = authorized_operations(acl.topic(name), topic_operations)
            if topic is None and self._auto_creates(body, name):
                try:
                    self.admin.auto_create(name)
                    topic = next((t for t in self.services.topics.list() if t.name == name), None)
                except OutboxError as e:
                    answered.append(build(m.MetadataResponseTopic, error_code=error_code(e), name=name,
                                          topic_id=_ZERO_UUID, is_internal=False, partitions=(),
                                          topic_authorized_operations=operations))
                    continue
            if topic is None:
                answered.append(build(m.MetadataResponseTopic, error_code=ErrorCode.unknown_topic_or_partition,
                                      name=name, topic_id=_ZERO_UUID, is_internal=False, partitions=(),
                                      topic_authorized_operations=operations))
                continue
            me = (self.broker.node_id,)
            partitions = tuple(
                build(m.MetadataResponsePartition, error_code=ErrorCode.none, partition_index=p,
                      leader_id=self.broker.node_id, leader_epoch=-1, replica_nodes=me, isr_nodes=me,
                      offline_replicas=())
                for p in range(topic.partition_count))
            answered.append(build(m.MetadataResponseTopic, error_code=ErrorCode.none, name=name, topic_id=_ZERO_UUID,
                                  is_internal=False, partitions=partitions, topic_authorized_operations=operations))
        return self._metadata_answer(m, body, [*by_id, *answered])

    def _metadata_answer(self, m: Any, body: Any, topics: list[Any]) -> Any:
        return build(m.MetadataResponse, throttle_time=NO_WAIT, brokers=(self._broker(m.MetadataResponseBroker),),
                     cluster_id="outbox", controller_id=self.broker.node_id, topics=tuple(topics),
                     cluster_authorized_operations=authorized_operations(
                         acl.CLUSTER, getattr(body, "include_cluster_authorized_operations", False)))

    def _metadata_invalid(self, m: Any, body: Any) -> Any:
        """Versions 10 and 11 carry a topic id field that is not served before version 12: a
        topic named without a name, or with an id, makes the whole request invalid, and Kafka
        answers every topic it names INVALID_REQUEST, a null name as "" (the answer's name is
        not nullable). Nothing of the request is done: no topic is acted on."""
        for t in body.topics:
            if t.name is not None:
                access().not_acted_on(Operation.DESCRIBE, acl.topic(t.name))
        return self._metadata_answer(m, body, [
            build(m.MetadataResponseTopic, error_code=ErrorCode.invalid_request, name=t.name or "",
                  topic_id=t.topic_id or _ZERO_UUID, is_internal=False, partitions=(),
                  topic_authorized_operations=NOT_REQUESTED)
            for t in body.topics])

    def _auto_creates(self, body: Any, name: str) -> bool:
        """Whether a Metadata naming the missing topic `name` creates it: the listener's
        OUTBOX_KAFKA_AUTO_CREATE_TOPICS, the request's allow_auto_topic_creation (from version 4;
        earlier ones always allow it, as in Kafka), and CREATE on the cluster or the topic."""
        return (self.settings.kafka_auto_create_topics and getattr(body, "allow_auto_topic_creation", True)
                and (access().allows(Operation.CREATE, acl.CLUSTER)
                     or access().allows(Operation.CREATE, acl.topic(name))))

    def _broker(self, cls: type) -> Any:
        return build(cls, node_id=self.broker.node_id, host=self.broker.host, port=self.broker.port, rack=None)

    # --- FindCoordinator -------------------------------------------------------------------

    def find_coordinator(self, body: Any, version: int) -> Any:
        m = response_module(ApiKey.FIND_COORDINATOR, version)
        assert m is not None
        b = self.broker
        resource = coordinator_resource(body)
        # A key_type of no coordinator served: every key INVALID_REQUEST and no broker named, as
        # Kafka answers it (answered NONE with this broker, the client took it for a coordinator).
        unknown = None if resource is not None else f"key_type {body.key_type} is none of 0 (group), 1 (transaction)"

        def answer(key: str) -> dict[str, Any]:
            if resource is None:
                return {"error_code": ErrorCode.invalid_request, "error_message": unknown,
                        "node_id": -1, "host": "", "port": -1}
            code = refusal_code(Operation.DESCRIBE, resource(key)) or ErrorCode.none
            return {"error_code": code, "error_message": None, "node_id": b.node_id, "host": b.host, "port": b.port}

        if version >= 4:
            return build(m.FindCoordinatorResponse, throttle_time=NO_WAIT, coordinators=tuple(
                build(m.Coordinator, key=key, **answer(key)) for key in body.coordinator_keys))
        return build(m.FindCoordinatorResponse, throttle_time=NO_WAIT, **answer(body.key))

    # --- InitProducerId --------------------------------------------------------------------

    def init_producer_id(self, body: Any, version: int) -> Any:
        m = response_module(ApiKey.INIT_PRODUCER_ID, version)
        assert m is not None

        def answer(code: ErrorCode, producer_id: int = -1, producer_epoch: int = -1) -> Any:
            return build(m.InitProducerIdResponse, throttle_time=NO_WAIT, error_code=code, producer_id=producer_id,
                         producer_epoch=producer_epoch)

        if body.transactional_id is None:
            denied = refusal_code(Operation.IDEMPOTENT_WRITE, CLUSTER, granted=access().may_write_some_topic)
        else:
            denied = refusal_code(Operation.WRITE, acl.transactional_id(body.transactional_id))
        if denied is not None:
            return answer(denied)
        current = getattr(body, "producer_id", -1)
        recovering = current >= 0
        try:
            got = self.services.coordinator.init_producer_id(
                transactional_id=body.transactional_id,
                transaction_timeout_ms=(None if body.transactional_id is None
                                        else body.transaction_timeout // datetime.timedelta(milliseconds=1)),
                producer_id=current if recovering else None,
                producer_epoch=getattr(body, "producer_epoch", -1) if recovering else None,
                # Who asks, as the HTTP door passes it: an id without a transactional id is its
                # holder's only (the service's rule, for both doors).
                principal=access().principal.name,
                # Kafka's InitProducerId does not say which transaction version the client
                # speaks: its later requests do, and each transaction takes the version of the
                # request that begins it, each EndTxn decides by its own (docs/ARCHITECTURE.md,
                # "Transactions over the Kafka door").
                transaction_version=transaction_version(ApiKey.INIT_PRODUCER_ID, version))
        except OutboxError as e:
            return answer(transactional_code(e, ApiKey.INIT_PRODUCER_ID, version))
        return answer(ErrorCode.none, got.producer_id, got.producer_epoch)

    # --- AddPartitionsToTxn, AddOffsetsToTxn, TxnOffsetCommit, EndTxn ---------------------

    def add_partitions_to_txn(self, body: Any, version: int) -> Any:
        m = response_module(ApiKey.ADD_PARTITIONS_TO_TXN, version)
        assert m is not None
        wanted = [(t.name, p) for t in body.v3_and_below_topics for p in t.partitions]
        # As Kafka: without WRITE on the transactional id every partition is refused with it;
        # else a topic without WRITE is refused and the others not attempted.
        denied: dict[str, ErrorCode] = {}
        refused: dict[tuple[str, int], Any] = {}
        every = refusal_code(Operation.WRITE, acl.transactional_id(body.v3_and_below_transactional_id))
        if every is None:
            denied = {t.name: code for t in body.v3_and_below_topics
                      if (code := refusal_code(Operation.WRITE, acl.topic(t.name))) is not None}
            every = ErrorCode.operation_not_attempted if denied else ErrorCode.none
        try:
            if every is ErrorCode.none:
                refused = self.services.coordinator.add_partitions(
                    body.v3_and_below_transactional_id, body.v3_and_below_producer_id,
                    body.v3_and_below_producer_epoch, wanted,
                    transaction_version=transaction_version(ApiKey.ADD_PARTITIONS_TO_TXN, version))
        except OutboxError as e:
            code = transactional_code(e, ApiKey.ADD_PARTITIONS_TO_TXN, version)
            refused, every = {}, code
        else:
            if any(refused.values()):
                # One partition refused: the others were not attempted (nothing begun), as Kafka answers.
                every = ErrorCode.operation_not_attempted

        def code_of(key: tuple[str, int]) -> ErrorCode:
            e = refused.get(key)
            return denied.get(key[0], every) if e is None else coordinator_error_code(e)

        return build(m.AddPartitionsToTxnResponse, throttle_time=NO_WAIT, results_by_topic_v3_and_below=tuple(
            build(m.AddPartitionsToTxnTopicResult, name=t.name, results_by_partition=tuple(
                build(m.AddPartitionsToTxnPartitionResult, partition_index=p,
                      partition_error_code=code_of((t.name, p)))
                for p in t.partitions))
            for t in body.v3_and_below_topics))

    def add_offsets_to_txn(self, body: Any, version: int) -> Any:
        """Kafka adds the group's offsets partition to the transaction here; the service stages
        offsets with the transaction itself (TxnOffsetCommit), so this only begins or checks it."""
        m = response_module(ApiKey.ADD_OFFSETS_TO_TXN, version)
        assert m is not None
        denied = (refusal_code(Operation.WRITE, acl.transactional_id(body.transactional_id))
                  or refusal_code(Operation.READ, acl.group(body.group_id)))
        if denied is not None:
            return build(m.AddOffsetsToTxnResponse, throttle_time=NO_WAIT, error_code=denied)
        try:
            spoken = transaction_version(ApiKey.ADD_OFFSETS_TO_TXN, version)
            self.services.coordinator.begin_or_join(body.transactional_id, body.producer_id, body.producer_epoch,
                                                    transaction_version=spoken)
        except OutboxError as e:
            return build(m.AddOffsetsToTxnResponse, throttle_time=NO_WAIT,
                         error_code=transactional_code(e, ApiKey.ADD_OFFSETS_TO_TXN, version))
        return build(m.AddOffsetsToTxnResponse, throttle_time=NO_WAIT, error_code=ErrorCode.none)

    def txn_offset_commit(self, body: Any, version: int) -> Any:
        m = response_module(ApiKey.TXN_OFFSET_COMMIT, version)
        assert m is not None
        generation_id = getattr(body, "generation_id", -1)
        member_id = getattr(body, "member_id", "")
        instance_id = getattr(body, "group_instance_id", None)  # from version 3 (KIP-345)
        group_metadata = GroupMetadata.given(generation_id, member_id, instance_id)
        # As Kafka: the transactional id, then the group, refuse every partition; a topic
        # without READ is refused and the offsets of the others staged.
        denied: dict[str, ErrorCode] = {}
        code = (refusal_code(Operation.WRITE, acl.transactional_id(body.transactional_id))
                or refusal_code(Operation.READ, acl.group(body.group_id)) or ErrorCode.none)
        if code is ErrorCode.none:
            denied = {t.name: topic_code for t in body.topics
                      if (topic_code := refusal_code(Operation.READ, acl.topic(t.name))) is not None}
        allowed = [t for t in body.topics if t.name not in denied]
        try:
            if code is ErrorCode.none and any(t.partitions for t in allowed):
                # Version 5 (transaction version 2) begins the transaction on an idle id, as
                # Kafka's group coordinator adds the offsets to it without AddOffsetsToTxn.
                self.services.coordinator.add_offsets(body.transactional_id, body.producer_id,
                                                      body.producer_epoch, body.group_id,
                                                      group_offsets.offsets_once(allowed), group_metadata,
                                                      transaction_version=transaction_version(
                                                          ApiKey.TXN_OFFSET_COMMIT, version),
                                                      each_partition=True)
        except OutboxError as e:
            code = transactional_code(e, ApiKey.TXN_OFFSET_COMMIT, version)
        return build(m.TxnOffsetCommitResponse, throttle_time=NO_WAIT, topics=tuple(
            build(m.TxnOffsetCommitResponseTopic, name=t.name, partitions=tuple(
                build(m.TxnOffsetCommitResponsePartition, partition_index=p.partition_index,
                      error_code=denied.get(t.name) or metadata_code(p.committed_metadata, code))
                for p in t.partitions))
            for t in body.topics))

    def end_txn(self, body: Any, version: int) -> Any:
        m = response_module(ApiKey.END_TXN, version)
        assert m is not None
        if (denied := refusal_code(Operation.WRITE, acl.transactional_id(body.transactional_id))) is not None:
            return build(m.EndTxnResponse, throttle_time=NO_WAIT, error_code=denied)
        try:
            ended = self.services.coordinator.end_transaction(
                body.transactional_id, body.producer_id, body.producer_epoch, commit=body.committed,
                transaction_version=transaction_version(ApiKey.END_TXN, version))
        except OutboxError as e:
            code = transactional_code(e, ApiKey.END_TXN, version, every_stale_epoch_fenced=(
                transaction_version(ApiKey.END_TXN, version) is TransactionVersion.V2))
            return build(m.EndTxnResponse, throttle_time=NO_WAIT, error_code=code)
        # Version 5 answers the producer id and epoch the producer goes on with: under
        # transaction version 2 every Commit and Abort bumps the epoch (a new producer id once
        # it is exhausted), and the client takes them from here.
        return build(m.EndTxnResponse, throttle_time=NO_WAIT, error_code=ErrorCode.none,
                     producer_id=ended.meta.producer_id, producer_epoch=ended.meta.producer_epoch)

    # --- Fetch -----------------------------------------------------------------------------

    def fetch_now(self, body: Any, version: int) -> tuple[Any, int, list[tuple[int, int]], bool]:
        """The Fetch's answer with what is there now: (answer, the bytes of its batches that
        hold records, the partitions read as (topic_id, partition), for a wait on them, whether
        reading a partition failed). A batch of no record (a read past records removed, up to
        its bound: LogBatch.next_offset) is not counted toward min_bytes: a client that does
        not step over it would otherwise be answered at once, again and again, a database read
        a turn, until something readable arrives; it still gets it after max_wait_ms.
        server.Connection waits for max_wait_ms/min_bytes and asks again, unless a read failed:
        Kafka's broker answers such a Fetch at once, so that the client sees the error (an
        offset out of range to reset) without waiting out max_wait_ms on the other partitions."""
        m = response_module(ApiKey.FETCH, version)
        assert m is not None
        isolation = isolation_level(body)
        # The client's limits, within the service's (Kafka's broker fetch.max.bytes): a Fetch
        # answer never holds more than these, but for the first record of the first partition.
        left = max(0, min(getattr(body, "max_bytes", 2**31 - 1), self.settings.fetch_max_bytes_limit))
        partition_limit = self.settings.fetch_max_partition_bytes_limit
        total, filled, keys, topics, read_failed = 0, 0, [], [], False
        fetched = fetch_partitions(body.topics)
        # A topic named with no partition is neither checked nor answered, as Kafka's Fetch
        # (its answer is its partitions'); left unchecked, it closed the connection unanswered.
        topics_not_acted_on(Operation.READ, (t.topic for t in body.topics), (topic for topic, _ in fetched))
        for topic, named in fetched:
            answered = []
            # Checked whatever the isolation level: the listener holds every answer to its checks.
            denied = refusal_code(Operation.READ, acl.topic(topic)) or (
                ErrorCode.invalid_request if isolation is None else None)
            for p in named:
                if denied is not None:
                    answered.append(build(m.PartitionData, partition_index=p.partition,
                                          error_code=denied, high_watermark=-1,
                                          last_stable_offset=-1, log_start_offset=-1, aborted_transactions=None,
                                          records=_NO_RECORDS))
                    continue
                # KIP-74: only the answer's first record may exceed max_bytes. Once the answer
                # holds records, a partition whose first record does not fit in what is left
                # answers none (its offsets still), or one answer could hold a too-large record
                # per partition: the read leaves it unread (min_one).
                try:
                    read = self.services.log.read_in_offset_order(
                        topic, p.partition, offset=p.fetch_offset, isolation=isolation,
                        max_bytes=max(0, min(p.partition_max_bytes, partition_limit, left)),
                        max_records=self.settings.fetch_max_records_limit, min_one=total == 0)
                except OutboxError as e:
                    # Kafka's broker answers at once when a read fails (an offset out of range);
                    # an unknown topic or partition it never reads (it answers that one beside
                    # the others), and a Fetch waiting on other partitions still waits.
                    read_failed = read_failed or error_code(e) is not ErrorCode.unknown_topic_or_partition
                    answered.append(build(m.PartitionData, partition_index=p.partition, error_code=error_code(e),
                                          high_watermark=-1, last_stable_offset=-1, log_start_offset=-1,
                                          aborted_transactions=None, records=_NO_RECORDS))
                    continue
                keys.append((read.topic_id, p.partition))
                data = records.batches_bytes(read.batches)
                aborted_met = read.aborted_transactions
                # The read counts the records' bytes; their batches' framing counts too.
                if total > 0 and read.batches and records.first_record_bytes(read.batches) > left:
                    data, aborted_met = _NO_RECORDS, []
                left -= len(data)
                total += len(data)
                if read.batches and read.batches[0].next_offset is None:
                    filled += len(data)
                aborted = None
                if isolation is IsolationLevel.READ_COMMITTED:
                    aborted = tuple(build(m.AbortedTransaction, producer_id=a.producer_id, first_offset=a.first_offset)
                                    for a in aborted_met)
                answered.append(build(m.PartitionData, partition_index=p.partition, error_code=ErrorCode.none,
                                      high_watermark=read.high_watermark, last_stable_offset=read.last_stable_offset,
                                      log_start_offset=read.log_start_offset, aborted_transactions=aborted,
                                      records=data))
            topics.append(build(m.FetchableTopicResponse, topic=topic, partitions=tuple(answered)))
        answer = build(m.FetchResponse, throttle_time=NO_WAIT, error_code=ErrorCode.none, session_id=0,
                       responses=tuple(topics))
        return answer, filled, keys, read_failed

    # --- ListOffsets -----------------------------------------------------------------------

    def list_offsets(self, body: Any, version: int) -> Any:
        m = response_module(ApiKey.LIST_OFFSETS, version)
        assert m is not None
        isolation = isolation_level(body)
        topics = []
        twice = set(duplicated((t.name, p.partition_index) for t in body.topics for p in t.partitions))
        for t in body.topics:
            answered = []
            denied = refusal_code(Operation.DESCRIBE, acl.topic(t.name)) or (
                ErrorCode.invalid_request if isolation is None else None)
            for p in t.partitions:
                if denied is not None:
                    code, offset, timestamp = denied, -1, _NO_TIMESTAMP
                elif (t.name, p.partition_index) in twice:
                    # As Kafka: every entry of a partition named more than once, none read.
                    code, offset, timestamp = ErrorCode.invalid_request, -1, _NO_TIMESTAMP
                else:
                    code, offset, timestamp = self._list_offset(t.name, p.partition_index, p.timestamp, isolation)
                answered.append(build(m.ListOffsetsPartitionResponse, partition_index=p.partition_index,
                                      error_code=code, timestamp=timestamp, offset=offset, leader_epoch=-1))
            topics.append(build(m.ListOffsetsTopicResponse, name=t.name, partitions=tuple(answered)))
        return build(m.ListOffsetsResponse, throttle_time=NO_WAIT, topics=tuple(topics))

    def _list_offset(self, topic: str, partition: int, timestamp: int,
                     isolation: IsolationLevel) -> tuple[ErrorCode, int, int]:
        """(error code, offset, timestamp) for one partition."""
        if timestamp < 0 and timestamp not in (_LATEST, _EARLIEST):
            # -3 (the largest timestamp) and later special values are not served
            return ErrorCode.unsupported_version, -1, _NO_TIMESTAMP
        try:
            got = self.services.log.partition_offsets(topic, partition, isolation=isolation,
                                                      timestamp_ms=timestamp if timestamp >= 0 else None)
        except OutboxError as e:
            return error_code(e), -1, _NO_TIMESTAMP
        if timestamp == _EARLIEST:
            return ErrorCode.none, got.log_start_offset, _NO_TIMESTAMP
        if timestamp == _LATEST:
            return ErrorCode.none, offset_order_upper_bound(isolation, got.high_watermark,
                                                            got.last_stable_offset), _NO_TIMESTAMP
        if got.found is None:
            return ErrorCode.none, -1, _NO_TIMESTAMP  # Kafka's answer when no record is that recent
        return ErrorCode.none, got.found[0], got.found[1]


def fetch_partitions(topics: Any) -> list[tuple[str, list[Any]]]:
    """A Fetch's partitions as Kafka's broker takes them (its request's fetchData, a map):
    protocol.partitions_once, each read from the offset and limits it was last named with."""
    return partitions_once((t.topic, p.partition, p) for t in topics for p in t.partitions)


def api_versions_answer(version: int, code: ErrorCode) -> Any:
    """The versions served and (version 3 and later) the features, as a Kafka 4 broker answers:
    a client that reads `transaction.version` finalized at 2 speaks transaction version 2."""
    m = response_module(ApiKey.API_VERSIONS, version)
    assert m is not None
    features: dict[str, Any] = {}
    if hasattr(m, "FinalizedFeatureKey"):
        features = {
            "supported_features": tuple(build(m.SupportedFeatureKey, name=name, min_version=lo, max_version=hi)
                                        for name, (lo, hi) in sorted(supported_features(version).items())),
            "finalized_features_epoch": FINALIZED_FEATURES_EPOCH,
            "finalized_features": tuple(build(m.FinalizedFeatureKey, name=name, min_version_level=level,
                                              max_version_level=level)
                                        for name, level in sorted(FINALIZED_FEATURES.items())),
        }
    return build(m.ApiVersionsResponse, error_code=code, throttle_time=NO_WAIT, api_keys=tuple(
        build(m.ApiVersion, api_key=k, min_version=lo, max_version=hi) for k, (lo, hi) in sorted(SERVED.items())),
        **features)

