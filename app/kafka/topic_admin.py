"""Kafka's topic administration over the services the HTTP door calls: CreateTopics,
DeleteTopics, CreatePartitions, DescribeConfigs, AlterConfigs, IncrementalAlterConfigs and
DeleteRecords as /v1/topics (the transaction descriptions are app.kafka.transaction_descriptions).
Each topic (partition) of a request is answered on its own, as Kafka does: one's refusal leaves
the others' outcome as it is. A topic a CreateTopics, DeleteTopics or
CreatePartitions names twice is answered once, INVALID_REQUEST, and acted on not at all
(answered_once), with no ACL asked for it (auth.Access.not_acted_on).

A topic's config keys are the service's (app.domain.topic_config) spelt as Kafka spells
them, dots for underscores: `retention_ms` is `retention.ms`, `cleanup_policy` is
`cleanup.policy`; the service's own keys read the same way (`value.format`,
`check.expected.offsets`). A value is text, parsed as the HTTP door and the CLI parse it
(parse_config_text)."""

from __future__ import annotations

import enum
import functools
import uuid
from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode

from app.domain import acl
from app.domain.acl import Operation

from app.domain.errors import (
    InvalidConfig,
    InvalidRequest,
    OutboxError,
    TopicAlreadyExists,
    TopicHasOpenTransactions,
)
from app.domain.topic_admin import only_describable
from app.domain.types import CleanupPolicy, ValueFormat
from app.domain.topic_config import CONFIG_KEYS, ConfigTextError, TopicConfig, new_topic_config, parse_config_text
from app.kafka.api_keys import ApiKey
from app.kafka.auth import ConfigResourceType, access, config_resource, refusal_code, topics_not_acted_on
from app.kafka.errors import error_code
from app.kafka.protocol import NO_WAIT, answered_once, build, partitions_once, response_module

_ZERO_UUID = uuid.UUID(int=0)
# Kafka topic configs that tune how a broker lays its log out in files: segments, their indexes,
# flushes to disk, the record format the files hold (message.format.version, which Kafka 3.0 and
# later ignore as well: a Fetch here always answers v2 record batches). The log here is rows of
# a database table, whose storage the database lays out: CreateTopics and AlterConfigs take
# these (Kafka Streams and librdkafka's tests send segment.bytes, segment.ms and
# message.format.version) and they change nothing; they are neither stored nor described.
FILE_LAYOUT_CONFIGS = frozenset({
    "segment.bytes", "segment.ms", "segment.jitter.ms", "segment.index.bytes", "index.interval.bytes",
    "flush.messages", "flush.ms", "preallocate", "file.delete.delay.ms", "message.format.version"})
# Kafka topic configs refused with their own reason rather than as unknown keys: a setting
# taken must act, and these would not.
REFUSED_CONFIGS = {
    # Kafka's broker recompresses a topic's batches to its codec as they are appended. Here a
    # batch's records are stored decompressed, one row each, and every Fetch answers them
    # uncompressed: a codec could be stored and described, never applied.
    "compression.type": "records are stored decompressed and every Fetch answers them uncompressed, so a "
                        "topic codec would never be applied; compress on the producer (its batches are taken "
                        "in gzip, snappy, lz4 and zstd)",
}
# What Kafka's controller answers a topic (or, DeleteTopics v6 and later, a topic id) that one
# CreateTopics, DeleteTopics or CreatePartitions names more than once: INVALID_REQUEST, once,
# and none of its entries acted on (which of two counts or configs was meant?).
DUPLICATE_TOPIC = "Duplicate topic name."
DUPLICATE_TOPIC_ID = "Duplicate topic id."
# What Kafka's controller answers a DeleteTopics v6 entry naming its topic both ways (a name and a
# non-zero id) or neither way (no name, the all-zero id): INVALID_REQUEST, each such entry on its own,
# none acted on, no ACL asked; it is no copy of another entry naming that name or id.
NO_TOPIC_NAMED = "Neither topic name nor id were specified."
TOPIC_NAMED_BOTH_WAYS = "You may not specify both topic name and topic id."
# Records are bytes in Kafka: a topic a Kafka client creates takes any key and value unless its
# CreateTopics names `value.format=json`. The HTTP door's and the CLI's default stays json.
KAFKA_VALUE_FORMAT = ValueFormat.BYTES


def assignment_refusal(replicas: list[tuple[int, tuple[int, ...]]], node_id: int,
                       replication_factor: int | None = None) -> str | None:
    """Why a manual replica assignment (partition, its brokers) is INVALID_REPLICA_ASSIGNMENT,
    or None: it names this broker alone for each partition, as Kafka's controller checks one
    against the brokers it knows (Metadata announces this one only: it leads every partition),
    once per partition, and with the same count of replicas in every partition
    (`replication_factor`: the count the topic's partitions already have)."""
    seen: set[int] = set()
    for partition, brokers in replicas:
        if partition in seen:
            return f"found multiple manual partition assignments for partition {partition}"
        seen.add(partition)
        if not brokers:
            return "the manual partition assignment includes an empty replica list"
        if unknown := sorted(set(brokers) - {node_id}):
            return (f"the manual partition assignment includes broker {unknown[0]}, but no such broker is "
                    f"registered: this broker ({node_id}) is the only one")
        if len(brokers) != len(set(brokers)):
            return f"the manual partition assignment includes the broker {node_id} more than once"
        if replication_factor is not None and len(brokers) != replication_factor:
            return (f"the manual partition assignment includes a partition with {len(brokers)} replica(s), "
                    f"but this is not consistent with the others, which have {replication_factor}")
        replication_factor = len(brokers)
    return None


class ConfigSource(enum.IntEnum):
    """DescribeConfigs' config_source: set on the topic, or the default."""

    DYNAMIC_TOPIC_CONFIG = 1
    DEFAULT_CONFIG = 5


class AlterOperation(enum.IntEnum):
    """IncrementalAlterConfigs' config_operation."""

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


# The one list config of a topic here, which APPEND and SUBTRACT change, and its values.
LIST_CONFIG = "cleanup.policy"
CLEANUP_POLICIES = frozenset(p.value for p in CleanupPolicy if "," not in p.value)


def kafka_name(key: str) -> str:
    return key.replace("_", ".")


def config_key(name: str) -> str:
    """The service's key of Kafka config `name`; INVALID_CONFIG for one the service has not."""
    if name in REFUSED_CONFIGS:
        raise InvalidConfig(f"topic config {name!r} is not served: {REFUSED_CONFIGS[name]}")
    key = name.replace(".", "_")
    if key not in CONFIG_KEYS:
        raise InvalidConfig(f"unknown topic config {name!r}; known: {', '.join(kafka_name(k) for k in CONFIG_KEYS)}")
    return key


def config_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, enum.Enum):
        return str(value.value)
    return str(value)


def parse_configs(pairs: dict[str, str | None]) -> dict[str, Any]:
    """Kafka's (name, text) pairs as the service's typed config values; INVALID_CONFIG else."""
    texts = {}
    for name, text in pairs.items():
        if text is None:
            raise InvalidConfig(f"topic config {name!r} has no value")
        texts[config_key(name)] = text
    try:
        return parse_config_text(texts)
    except ConfigTextError as e:
        raise InvalidConfig(str(e)) from None


def _topic_refused(m: Any, name: str, code: ErrorCode, message: str | None = None) -> Any:
    """CreateTopics' answer for a topic it did not create."""
    return build(m.CreatableTopicResult, name=name, topic_id=_ZERO_UUID, error_code=code, error_message=message,
                 topic_config_error_code=ErrorCode.none, num_partitions=-1, replication_factor=-1, configs=None)


def _topic_named_twice(m: Any, name: str) -> Any:
    """CreateTopics' answer for a topic it names more than once: not created, no ACL asked."""
    access().not_acted_on(Operation.CREATE, acl.topic(name))
    return _topic_refused(m, name, ErrorCode.invalid_request, DUPLICATE_TOPIC)


def _partitions_answer(m: Any, name: str, code: ErrorCode, message: str | None = None) -> Any:
    """CreatePartitions' answer for a topic: grown (or, validate_only, found growable) with no
    error, or refused with `code`."""
    return build(m.CreatePartitionsTopicResult, name=name, error_code=code, error_message=message)


def _partitions_named_twice(m: Any, name: str) -> Any:
    """CreatePartitions' answer for a topic it names more than once: not grown, no ACL asked."""
    access().not_acted_on(Operation.ALTER, acl.topic(name))
    return _partitions_answer(m, name, ErrorCode.invalid_request, DUPLICATE_TOPIC)


def _deleted_topic(entry: tuple[str | None, uuid.UUID]) -> str | uuid.UUID | None:
    """The topic a DeleteTopics entry (name, topic id) names, by which copies of it are found:
    its name, or (v6 and later) its id; None for an entry naming it both ways or neither way,
    which is refused on its own (TOPIC_NAMED_BOTH_WAYS, NO_TOPIC_NAMED)."""
    name, topic_id = entry
    if (name is None) == (topic_id == _ZERO_UUID):
        return None
    return topic_id if name is None else name


class TopicAdminApis:
    def __init__(self, services: Any, node_id: int) -> None:
        self.services = services
        self.settings = services.settings
        self.node_id = node_id  # this broker's, the one a manual replica assignment may name
        self.handlers: dict[ApiKey, Callable[[Any, int], Any]] = {
            ApiKey.CREATE_TOPICS: self.create_topics, ApiKey.DELETE_TOPICS: self.delete_topics,
            ApiKey.DELETE_RECORDS: self.delete_records, ApiKey.DESCRIBE_CONFIGS: self.describe_configs,
            ApiKey.ALTER_CONFIGS: self.alter_configs, ApiKey.CREATE_PARTITIONS: self.create_partitions,
            ApiKey.INCREMENTAL_ALTER_CONFIGS: self.incremental_alter_configs}

    def _defaults(self) -> TopicConfig:
        """A topic's config where nothing was set through this door: max_message_bytes the
        service's, value_format bytes."""
        return new_topic_config({}, self.settings.message_max_bytes, KAFKA_VALUE_FORMAT)

    # --- CreateTopics ----------------------------------------------------------------------

    def create_topics(self, body: Any, version: int) -> Any:
        m = response_module(ApiKey.CREATE_TOPICS, version)
        assert m is not None
        # CREATE on the cluster, or on the topic, as /v1/topics asks.
        cluster = access().allows(Operation.CREATE, acl.CLUSTER)
        return build(m.CreateTopicsResponse, throttle_time=NO_WAIT, topics=tuple(
            _topic_named_twice(m, t.name) if twice else self._create_topic(m, t, body.validate_only, cluster)
            for t, twice in answered_once(body.topics, key=lambda t: t.name)))

    def _create_topic(self, m: Any, t: Any, validate_only: bool, cluster: bool) -> Any:
        def refused(code: ErrorCode, message: str | None = None) -> Any:
            return _topic_refused(m, t.name, code, message)

        topic = acl.topic(t.name)
        if (denied := refusal_code(Operation.CREATE, topic, granted=lambda: cluster)) is not None:
            return refused(denied)
        try:
            count = self.settings.kafka_num_partitions if t.num_partitions == -1 else t.num_partitions
            if t.assignments:
                # As Kafka's controller: the assignment says the count and the replicas, and
                # neither may be given besides; partitions 0 to count - 1, each on this broker.
                if t.replication_factor != -1 or t.num_partitions != -1:
                    raise InvalidRequest("a manual partition assignment was specified, but the replication factor "
                                         "and the partition count were not both set to -1")
                replicas = [(a.partition_index, tuple(a.broker_ids)) for a in t.assignments]
                why = assignment_refusal(replicas, self.node_id)
                if why is None and sorted(p for p, _ in replicas) != list(range(len(replicas))):
                    why = "partitions should be a consecutive 0-based integer sequence"
                if why is not None:
                    return refused(ErrorCode.invalid_replica_assignment, why)
                count = len(replicas)
            elif t.replication_factor == 0 or t.replication_factor < -1:
                return refused(ErrorCode.invalid_replication_factor,
                               "the replication factor is -1 (the broker's) or at least 1")
            # Any replication factor from 1 up is taken: every partition is one copy, in the
            # database, as durable as the database is (its fsync, its replicas), which a count of
            # brokers cannot add to. The topic is answered and described with its one replica.
            given = parse_configs({c.name: c.value for c in t.configs if c.name not in FILE_LAYOUT_CONFIGS})
            config = new_topic_config(given, self.settings.message_max_bytes, KAFKA_VALUE_FORMAT)
            created = self.services.topics.create(t.name, count, config, validate_only=validate_only)
        except TopicAlreadyExists as e:
            # Only a principal that may describe the topic learns that it exists (Kafka's rule).
            hidden = refusal_code(Operation.DESCRIBE, topic, audited=False)
            return refused(hidden) if hidden is not None else refused(error_code(e), e.message)
        except OutboxError as e:
            return refused(error_code(e), e.message)
        config_error, partitions, replication_factor = ErrorCode.none, created.partition_count, 1
        if not hasattr(m, "CreatableTopicConfigs"):  # versions before 5 answer no configs
            configs: tuple | None = None
        elif refusal_code(Operation.DESCRIBE_CONFIGS, topic, audited=False) is not None:
            # Created, but its configs, partition count and replication factor (versions 5 and
            # later) are shown only to a principal that may describe its configs, as Kafka's
            # controller answers: a config is not the creator's to read by creating.
            config_error, partitions, replication_factor, configs = ErrorCode.topic_authorization_failed, -1, -1, ()
        else:
            configs = self._created_configs(m, created.config, given)
        return build(m.CreatableTopicResult, name=t.name, topic_id=_ZERO_UUID, error_code=ErrorCode.none,
                     error_message=None, topic_config_error_code=config_error,
                     num_partitions=partitions, replication_factor=replication_factor, configs=configs)

    @staticmethod
    def _created_configs(m: Any, config: TopicConfig, given: dict[str, Any]) -> tuple:
        return tuple(
            build(m.CreatableTopicConfigs, name=kafka_name(key), value=config_text(getattr(config, key)),
                  read_only=key == "value_format", is_sensitive=False,
                  config_source=ConfigSource.DYNAMIC_TOPIC_CONFIG if key in given else ConfigSource.DEFAULT_CONFIG)
            for key in CONFIG_KEYS)

    def auto_create(self, name: str) -> None:
        """Kafka's auto.create.topics.enable (OUTBOX_KAFKA_AUTO_CREATE_TOPICS): `name` created as a
        CreateTopics without configs or a partition count makes it; one another request created
        meanwhile is as good."""
        try:
            self.services.topics.create(name, self.settings.kafka_num_partitions, self._defaults())
        except TopicAlreadyExists:
            pass

    # --- DeleteTopics ----------------------------------------------------------------------

    def delete_topics(self, body: Any, version: int) -> Any:
        m = response_module(ApiKey.DELETE_TOPICS, version)
        assert m is not None
        # The wire's all-zero id is read as None.
        named = ([(t.name, t.topic_id or _ZERO_UUID) for t in body.topics] if hasattr(body, "topics")
                 else [(name, _ZERO_UUID) for name in body.topic_names])
        # The names entries name alone: such an entry makes the name's check (or, named twice,
        # declares it not acted on), which an entry naming it both ways must not stand in for.
        by_name = {name for name, topic_id in named if topic_id == _ZERO_UUID}
        results = []
        for entry, twice in answered_once(named, key=_deleted_topic):
            name, topic_id = entry
            code, message = ErrorCode.none, None
            if _deleted_topic(entry) is None:  # named both ways or neither way
                if name is None:
                    code, message = ErrorCode.invalid_request, NO_TOPIC_NAMED
                else:
                    if name not in by_name:
                        access().not_acted_on(Operation.DELETE, acl.topic(name))
                    code, message = ErrorCode.invalid_request, TOPIC_NAMED_BOTH_WAYS
            elif twice and name is None:
                code, message = ErrorCode.invalid_request, DUPLICATE_TOPIC_ID
            elif twice:
                access().not_acted_on(Operation.DELETE, acl.topic(name))
                code, message = ErrorCode.invalid_request, DUPLICATE_TOPIC
            elif name is None:
                # Topics have no ids here (Metadata answers all zero): only names can be deleted.
                code, message = ErrorCode.unknown_topic_id, "topics are deleted by name: they have no ids here"
            elif (denied := refusal_code(Operation.DELETE, acl.topic(name))) is not None:
                code = denied
            else:
                try:
                    self.services.topics.delete(name)
                except TopicHasOpenTransactions as e:
                    # Naming only the transactional ids the principal may describe, as the HTTP door.
                    shown = only_describable(e, access().allows)
                    code, message = error_code(shown), shown.message
                except OutboxError as e:
                    code, message = error_code(e), e.message
            results.append(build(m.DeletableTopicResult, name=name, topic_id=topic_id, error_code=code,
                                 error_message=message))
        return build(m.DeleteTopicsResponse, throttle_time=NO_WAIT, responses=tuple(results))

    # --- CreatePartitions ------------------------------------------------------------------

    def create_partitions(self, body: Any, version: int) -> Any:
        m = response_module(ApiKey.CREATE_PARTITIONS, version)
        assert m is not None
        results = [_partitions_named_twice(m, t.name) if twice else self._create_partitions(m, t, body.validate_only)
                   for t, twice in answered_once(body.topics, key=lambda t: t.name)]
        return build(m.CreatePartitionsResponse, throttle_time=NO_WAIT, results=tuple(results))

    def _create_partitions(self, m: Any, t: Any, validate_only: bool) -> Any:
        try:
            if (denied := refusal_code(Operation.ALTER, acl.topic(t.name))) is not None:
                return _partitions_answer(m, t.name, denied)
            if t.assignments is not None and (why := self._partitions_assignment_refusal(t)) is not None:
                return _partitions_answer(m, t.name, ErrorCode.invalid_replica_assignment, why)
            self.services.topics.create_partitions(t.name, t.count, validate_only=validate_only)
        except OutboxError as e:
            return _partitions_answer(m, t.name, error_code(e), e.message)
        return _partitions_answer(m, t.name, ErrorCode.none)

    def _partitions_assignment_refusal(self, t: Any) -> str | None:
        """Why CreatePartitions' manual assignment of the partitions it adds to topic `t` is
        refused, or None: one per partition added, each on this broker alone, as the topic's
        others (one replica each). A count that adds none is the topic service's to answer
        (INVALID_PARTITIONS), as an unknown topic is (raised here)."""
        existing = self.services.topics.get(t.name).partition_count
        if t.count <= existing:
            return None
        if len(t.assignments) != t.count - existing:
            return (f"attempted to add {t.count - existing} additional partition(s), but only "
                    f"{len(t.assignments)} assignment(s) were specified")
        return assignment_refusal([(existing + i, tuple(a.broker_ids)) for i, a in enumerate(t.assignments)],
                                  self.node_id, replication_factor=1)

    # --- DescribeConfigs -------------------------------------------------------------------

    def describe_configs(self, body: Any, version: int) -> Any:
        m = response_module(ApiKey.DESCRIBE_CONFIGS, version)
        assert m is not None
        return build(m.DescribeConfigsResponse, throttle_time=NO_WAIT, results=tuple(
            self._describe_configs(m, r) for r in body.resources))

    def _describe_configs(self, m: Any, r: Any) -> Any:
        def result(code: ErrorCode, message: str | None, configs: tuple = ()) -> Any:
            return build(m.DescribeConfigsResult, error_code=code, error_message=message,
                         resource_type=r.resource_type, resource_name=r.resource_name, configs=configs)

        guard = config_resource(r.resource_type, r.resource_name)
        if guard is not None and (denied := refusal_code(Operation.DESCRIBE_CONFIGS, guard)) is not None:
            return result(denied, None)
        if r.resource_type == ConfigResourceType.BROKER:
            # The broker's settings are the service's (OUTBOX_*), not Kafka configs: none to show.
            return result(ErrorCode.none, None)
        if r.resource_type != ConfigResourceType.TOPIC:
            return result(ErrorCode.invalid_request, f"resource type {r.resource_type} has no configs here")
        try:
            topic, _ = self.services.topics.describe(r.resource_name)
            keys = CONFIG_KEYS if r.configuration_keys is None else [config_key(n) for n in r.configuration_keys]
        except OutboxError as e:
            return result(error_code(e), e.message)
        defaults = self._defaults()
        return result(ErrorCode.none, None, tuple(
            build(m.DescribeConfigsResourceResult, name=kafka_name(key), value=config_text(getattr(topic.config, key)),
                  read_only=key == "value_format", is_sensitive=False, synonyms=(), config_type=0,
                  documentation=None,
                  config_source=(ConfigSource.DEFAULT_CONFIG if getattr(topic.config, key) == getattr(defaults, key)
                                 else ConfigSource.DYNAMIC_TOPIC_CONFIG))
            for key in keys))

    # --- AlterConfigs, IncrementalAlterConfigs ---------------------------------------------

    def alter_configs(self, body: Any, version: int) -> Any:
        """AlterConfigs, the non-incremental one: a topic's config becomes the configs named,
        every other back to its default (value.format, fixed when the topic was created, kept).
        Kafka's file layout configs are taken and change nothing, as CreateTopics takes them."""
        m = response_module(ApiKey.ALTER_CONFIGS, version)
        assert m is not None
        return build(m.AlterConfigsResponse, throttle_time=NO_WAIT, responses=self._alter(
            m, body, lambda _config, configs: parse_configs(
                {c.name: c.value for c in configs if c.name not in FILE_LAYOUT_CONFIGS}), replace=True))

    def incremental_alter_configs(self, body: Any, version: int) -> Any:
        m = response_module(ApiKey.INCREMENTAL_ALTER_CONFIGS, version)
        assert m is not None
        return build(m.IncrementalAlterConfigsResponse, throttle_time=NO_WAIT, responses=self._alter(
            m, body, self._changes, replace=False))

    def _alter(self, m: Any, body: Any, changes: Callable[[TopicConfig, Any], dict[str, Any]], *,
               replace: bool) -> tuple:
        """Each resource's answer, altered on its own through TopicService.alter_config, as
        PATCH /v1/topics/{topic} alters it (`replace`: AlterConfigs' whole config). `changes`
        (the topic's config, the resource's configs) runs under the topic's row lock, on the
        config the last alter committed: APPEND and SUBTRACT of two requests at once both apply."""
        results = []
        for r in body.resources:
            code, message = ErrorCode.none, None
            guard = config_resource(r.resource_type, r.resource_name)
            try:
                if guard is not None and (denied := refusal_code(Operation.ALTER_CONFIGS, guard)) is not None:
                    results.append(build(m.AlterConfigsResourceResponse, error_code=denied, error_message=None,
                                         resource_type=r.resource_type, resource_name=r.resource_name))
                    continue
                if r.resource_type != ConfigResourceType.TOPIC:
                    # Taking a broker config and doing nothing with it would be a lie: the
                    # service's settings are read at start, none can change under it.
                    raise InvalidRequest("only topic configs can be altered: the broker's are the service's "
                                         "settings (OUTBOX_*), read when it starts; refused: "
                                         + ", ".join(sorted(c.name for c in r.configs)))
                # The topic first, its configs after, as Kafka checks them: a missing topic is
                # UNKNOWN_TOPIC_OR_PARTITION (from the lock) whatever configs the request names.
                self.services.topics.alter_config(r.resource_name, functools.partial(changes, configs=r.configs),
                                                  validate_only=body.validate_only, replace=replace)
            except OutboxError as e:
                code, message = error_code(e), e.message
            results.append(build(m.AlterConfigsResourceResponse, error_code=code, error_message=message,
                                 resource_type=r.resource_type, resource_name=r.resource_name))
        return tuple(results)

    def _changes(self, config: TopicConfig, configs: Any) -> dict[str, Any]:
        """SET a value; DELETE: back to the default; APPEND and SUBTRACT add values to or take
        them from a list config's, as Kafka's do: cleanup.policy, the service's one list (of
        delete and compact), whose values are the topic's `config`, the one it has when the
        request is applied (TopicService.alter_config calls this under the row lock)."""
        changes: dict[str, Any] = {}
        setting: dict[str, str | None] = {}
        defaults = self._defaults()
        policies = set(config.cleanup_policy.value.split(","))
        for c in configs:
            if c.config_operation == AlterOperation.SET:
                setting[c.name] = c.value
            elif c.config_operation == AlterOperation.DELETE:
                key = config_key(c.name)
                changes[key] = getattr(defaults, key)
            elif c.name == LIST_CONFIG and c.config_operation in (AlterOperation.APPEND, AlterOperation.SUBTRACT):
                named = {v.strip() for v in (c.value or "").split(",") if v.strip()}
                if not named or not named <= CLEANUP_POLICIES:
                    raise InvalidConfig(f"{LIST_CONFIG} takes {' and '.join(sorted(CLEANUP_POLICIES))}, "
                                        f"not {c.value!r}")
                policies = policies | named if c.config_operation == AlterOperation.APPEND else policies - named
                if not policies:
                    raise InvalidConfig(f"{LIST_CONFIG} would be empty: a topic is delete, compact or both")
                setting[c.name] = ",".join(sorted(policies))
            else:
                raise InvalidRequest(f"config operation {c.config_operation} is not served for {c.name!r}: "
                                     f"SET (0) and DELETE (1) are, and APPEND (2) and SUBTRACT (3) for {LIST_CONFIG}")
        changes.update(parse_configs(setting))
        return changes

    # --- DeleteRecords ---------------------------------------------------------------------

    def delete_records(self, body: Any, version: int) -> Any:
        m = response_module(ApiKey.DELETE_RECORDS, version)
        assert m is not None
        topics = []
        # As Kafka's handleDeleteRecordsRequest: the partitions into a map, so a partition named
        # more than once is answered and written once, up to the offset it was last named with;
        # each topic answered once, as Kafka's.
        deleted = partitions_once(((t.name, p.partition_index, p) for t in body.topics for p in t.partitions),
                                  each_topic_once=True)
        # Every topic checked before any log start moves: a topic named with no partition is
        # acted on by no entry, and answered by none, as Kafka's (which checks each
        # partition's topic). Checked among the deletions, it was left unchecked, found so after
        # the others had moved, and the connection closed unanswered.
        topics_not_acted_on(Operation.DELETE, (t.name for t in body.topics), (topic for topic, _ in deleted))
        denials = {topic: refusal_code(Operation.DELETE, acl.topic(topic)) for topic, _ in deleted}
        access().hold_to_rules(ApiKey.DELETE_RECORDS, body)
        for topic, named in deleted:
            answered = []
            denied = denials[topic]
            for p in named:
                code, low = denied or ErrorCode.none, -1
                if denied is not None:
                    answered.append(build(m.DeleteRecordsPartitionResult, partition_index=p.partition_index,
                                          low_watermark=low, error_code=code))
                    continue
                try:
                    # Kafka's -1, the high watermark: as far as the log start may go (None).
                    low = self.services.topics.delete_records(
                        topic, p.partition_index, None if p.offset == -1 else int(p.offset))
                except OutboxError as e:
                    code = error_code(e)
                answered.append(build(m.DeleteRecordsPartitionResult, partition_index=p.partition_index,
                                      low_watermark=low, error_code=code))
            topics.append(build(m.DeleteRecordsTopicResult, name=topic, partitions=tuple(answered)))
        return build(m.DeleteRecordsResponse, throttle_time=NO_WAIT, topics=tuple(topics))
