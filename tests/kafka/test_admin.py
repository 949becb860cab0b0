"""Administration through Kafka's admin APIs: CreateTopics, DeleteTopics, CreatePartitions,
DescribeConfigs, IncrementalAlterConfigs, DeleteRecords through librdkafka's AdminClient
(confluent-kafka), DescribeTransactions and ListTransactions in raw frames; each checked
against what the HTTP door of the same process describes. On SQLite and PostgreSQL."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
)
from kio.schema.errors import ErrorCode

from app.kafka.protocol import request_class
from tests.helpers import batch, begin, create_topic, ident, init_producer, send
from tests.kafka.conftest import Listener, ask

pytestmark = pytest.mark.kafka

TIMEOUT_S = 20


@pytest.fixture
def admin(kafka: Listener) -> AdminClient:
    return AdminClient({"bootstrap.servers": kafka.bootstrap})


def _done(futures: dict[Any, Any]) -> dict[Any, Any]:
    """Each future's result, or the KafkaError it failed with."""
    out = {}
    for key, future in futures.items():
        try:
            out[key] = future.result(TIMEOUT_S)
        except KafkaException as e:
            out[key] = e.args[0]
    return out


def _described(kafka: Listener, topic: str) -> dict[str, Any]:
    r = kafka.client.get(f"/v1/topics/{topic}")
    assert r.status_code == 200, r.text
    return r.json()


def test_create_topics_makes_the_topic_with_its_partitions_and_config(kafka: Listener, admin: AdminClient) -> None:
    got = _done(admin.create_topics([NewTopic("orders", 3, 1, config={"retention.ms": "60000",
                                                                      "cleanup.policy": "compact"})]))
    assert got == {"orders": None}
    topic = _described(kafka, "orders")
    assert topic["partition_count"] == 3
    assert (topic["config"]["retention_ms"], topic["config"]["cleanup_policy"]) == (60000, "compact")


def test_a_topic_created_through_kafka_is_bytes_and_takes_records_that_are_not_json(
        kafka: Listener, admin: AdminClient) -> None:
    assert _done(admin.create_topics([NewTopic("blobs", 1, 1)])) == {"blobs": None}
    assert _described(kafka, "blobs")["config"]["value_format"] == "bytes"
    p = Producer({"bootstrap.servers": kafka.bootstrap, "linger.ms": 0, "message.timeout.ms": 10_000})
    reports: list[Any] = []
    p.produce("blobs", value=b"\xff\x00not json", partition=0,
              on_delivery=lambda err, msg: reports.append((err, msg.offset())))
    assert p.flush(TIMEOUT_S) == 0
    assert reports == [(None, 0)]
    r = kafka.client.get("/v1/topics/blobs/partitions/0/records", params={"isolation": "read_uncommitted"})
    assert [x["value"] for x in r.json()["records"]] == [{"type": "BINARY", "data": "/wBub3QganNvbg=="}]


def test_a_topic_created_through_kafka_with_value_format_json_is_json(kafka: Listener, admin: AdminClient) -> None:
    assert _done(admin.create_topics([NewTopic("orders", 1, 1, config={"value.format": "json"})])) == {"orders": None}
    assert _described(kafka, "orders")["config"]["value_format"] == "json"


def test_a_topic_created_over_http_without_a_format_stays_json(kafka: Listener) -> None:
    assert kafka.client.post("/v1/topics", json={"name": "orders", "partitions": 1}).status_code == 201
    assert _described(kafka, "orders")["config"]["value_format"] == "json"


def test_create_topics_answers_each_topic_on_its_own(kafka: Listener, admin: AdminClient) -> None:
    create_topic(kafka.client, "taken", 1)
    got = _done(admin.create_topics([NewTopic("taken", 1, 1), NewTopic("fresh", 2, 1),
                                     NewTopic("bad/name", 1, 1), NewTopic("no-copies", 1, 0),
                                     NewTopic("odd", 1, 1, config={"retention.ms": "soon"}),
                                     NewTopic("unknown-key", 1, 1, config={"no.such.config": "1"})]))
    assert got["fresh"] is None
    assert {name: e.code() for name, e in got.items() if e is not None} == {
        "taken": KafkaError.TOPIC_ALREADY_EXISTS,
        "bad/name": KafkaError.TOPIC_EXCEPTION,
        "no-copies": KafkaError.INVALID_REPLICATION_FACTOR,
        "odd": KafkaError.INVALID_CONFIG,
        "unknown-key": KafkaError.INVALID_CONFIG,
    }
    names = {t["name"] for t in kafka.client.get("/v1/topics").json()["topics"]}
    assert names == {"taken", "fresh"}


def test_create_topics_takes_any_replication_factor_and_makes_one_replica(kafka: Listener, admin: AdminClient) -> None:
    assert _done(admin.create_topics([NewTopic("orders", 2, 3)])) == {"orders": None}
    metadata = admin.list_topics("orders", timeout=TIMEOUT_S)
    assert [p.replicas for p in metadata.topics["orders"].partitions.values()] == [[0], [0]]


def test_create_topics_takes_kafka_s_file_layout_configs_and_stores_none_of_them(
        kafka: Listener, admin: AdminClient) -> None:
    config = {"segment.bytes": "20000", "segment.ms": "60000", "max.message.bytes": "10000"}
    assert _done(admin.create_topics([NewTopic("orders", 1, 1, config=config)])) == {"orders": None}
    stored = _described(kafka, "orders")["config"]
    assert stored["max_message_bytes"] == 10000
    assert "segment_bytes" not in stored and "segment_ms" not in stored


def test_create_topics_with_validate_only_creates_nothing(kafka: Listener, admin: AdminClient) -> None:
    assert _done(admin.create_topics([NewTopic("checked", 2, 1)], validate_only=True)) == {"checked": None}
    assert kafka.client.get("/v1/topics/checked").status_code == 404
    create_topic(kafka.client, "exists", 1)
    (error,) = _done(admin.create_topics([NewTopic("exists", 1, 1)], validate_only=True)).values()
    assert error.code() == KafkaError.TOPIC_ALREADY_EXISTS


def test_create_topics_refuses_compression_type_saying_why_and_creates_nothing(kafka: Listener) -> None:
    cls = request_class(19, 7)
    mod = __import__(cls.__module__, fromlist=["x"])  # type: ignore[union-attr]
    body = cls(timeout=datetime.timedelta(0), validate_only=False, topics=(mod.CreatableTopic(  # type: ignore[misc]
        name="orders", num_partitions=1, replication_factor=1, assignments=(),
        configs=(mod.CreatableTopicConfig(name="compression.type", value="lz4"),)),))
    with kafka.connect() as s:
        (answer,) = ask(s, 19, 7, body).topics
    assert answer.error_code == ErrorCode.invalid_config
    assert answer.error_message.startswith("topic config 'compression.type' is not served: records are stored "
                                           "decompressed and every Fetch answers them uncompressed")
    assert kafka.client.get("/v1/topics/orders").status_code == 404


def test_create_topics_takes_a_manual_assignment_naming_this_broker_alone(kafka: Listener, admin: AdminClient) -> None:
    got = _done(admin.create_topics([NewTopic("orders", 3, replica_assignment=[[0], [0], [0]])]))
    assert got == {"orders": None}
    assert _described(kafka, "orders")["partition_count"] == 3
    metadata = admin.list_topics("orders", timeout=TIMEOUT_S)
    assert [p.replicas for p in metadata.topics["orders"].partitions.values()] == [[0], [0], [0]]


def test_create_topics_refuses_an_assignment_naming_another_broker_or_one_twice_and_creates_nothing(
        kafka: Listener, admin: AdminClient) -> None:
    got = _done(admin.create_topics([NewTopic("elsewhere", 2, replica_assignment=[[0], [1]]),
                                     NewTopic("twice", 1, replica_assignment=[[0, 0]])]))
    assert {name: e.code() for name, e in got.items()} == {
        "elsewhere": KafkaError.INVALID_REPLICA_ASSIGNMENT,
        "twice": KafkaError.INVALID_REPLICA_ASSIGNMENT,
    }
    assert kafka.client.get("/v1/topics").json()["topics"] == []


def _create_topic_frame(kafka: Listener, num_partitions: int, replication_factor: int,
                        assignments: list[tuple[int, list[int]]]) -> tuple[ErrorCode, str | None]:
    cls = request_class(19, 7)
    mod = __import__(cls.__module__, fromlist=["x"])  # type: ignore[union-attr]
    body = cls(timeout=datetime.timedelta(0), validate_only=False, topics=(mod.CreatableTopic(  # type: ignore[misc]
        name="orders", num_partitions=num_partitions, replication_factor=replication_factor, configs=(),
        assignments=tuple(mod.CreatableReplicaAssignment(partition_index=p, broker_ids=tuple(b))
                          for p, b in assignments)),))
    with kafka.connect() as s:
        (answer,) = ask(s, 19, 7, body).topics
    return answer.error_code, answer.error_message


def test_create_topics_with_an_assignment_and_a_partition_count_is_an_invalid_request(kafka: Listener) -> None:
    code, _ = _create_topic_frame(kafka, 2, -1, [(0, [0]), (1, [0])])
    assert code == ErrorCode.invalid_request
    assert kafka.client.get("/v1/topics/orders").status_code == 404


def test_create_topics_with_an_assignment_not_one_replica_list_a_partition_from_0_is_refused(kafka: Listener) -> None:
    assert _create_topic_frame(kafka, -1, -1, [(0, [0]), (2, [0])]) == (
        ErrorCode.invalid_replica_assignment, "partitions should be a consecutive 0-based integer sequence")
    assert _create_topic_frame(kafka, -1, -1, [(0, [0]), (0, [0])])[0] == ErrorCode.invalid_replica_assignment
    assert _create_topic_frame(kafka, -1, -1, [(0, [0]), (1, [])])[0] == ErrorCode.invalid_replica_assignment
    assert kafka.client.get("/v1/topics/orders").status_code == 404


def test_create_partitions_takes_a_manual_assignment_naming_this_broker_alone(
        kafka: Listener, admin: AdminClient) -> None:
    create_topic(kafka.client, "orders", 1)
    assert _done(admin.create_partitions([NewPartitions("orders", 3, replica_assignment=[[0], [0]])])) == {
        "orders": None}
    assert _described(kafka, "orders")["partition_count"] == 3


def test_create_partitions_refuses_an_assignment_of_another_broker_or_count_and_adds_nothing(
        kafka: Listener, admin: AdminClient) -> None:
    create_topic(kafka.client, "orders", 1)
    (elsewhere,) = _done(admin.create_partitions([NewPartitions("orders", 2, replica_assignment=[[1]])])).values()
    (short,) = _done(admin.create_partitions([NewPartitions("orders", 3, replica_assignment=[[0]])])).values()
    (two,) = _done(admin.create_partitions([NewPartitions("orders", 2, replica_assignment=[[0, 0]])])).values()
    assert [e.code() for e in (elsewhere, short, two)] == [KafkaError.INVALID_REPLICA_ASSIGNMENT] * 3
    assert _described(kafka, "orders")["partition_count"] == 1


def test_create_partitions_grows_the_topic_and_refuses_to_shrink_it(kafka: Listener, admin: AdminClient) -> None:
    create_topic(kafka.client, "orders", 2)
    assert _done(admin.create_partitions([NewPartitions("orders", 4)])) == {"orders": None}
    assert _described(kafka, "orders")["partition_count"] == 4
    (error,) = _done(admin.create_partitions([NewPartitions("orders", 3)])).values()
    assert error.code() == KafkaError.INVALID_PARTITIONS
    assert _done(admin.create_partitions([NewPartitions("orders", 6)], validate_only=True)) == {"orders": None}
    assert _described(kafka, "orders")["partition_count"] == 4


def test_describe_configs_shows_the_topic_config_in_kafka_s_names(kafka: Listener, admin: AdminClient) -> None:
    kafka.client.post("/v1/topics", json={"name": "orders", "partitions": 1, "config": {"retention_ms": 60000}})
    (entries,) = _done(admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, "orders")])).values()
    assert entries["retention.ms"].value == "60000"
    assert entries["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert (entries["cleanup.policy"].value, entries["cleanup.policy"].source) == (
        "delete", ConfigSource.DEFAULT_CONFIG.value)
    assert entries["value.format"].value == "json" and entries["value.format"].is_read_only
    config = _described(kafka, "orders")["config"]
    assert {name.replace(".", "_"): e.value for name, e in entries.items()} == {
        key: (str(v).lower() if isinstance(v, bool) else str(v)) for key, v in config.items()}


def test_describe_configs_of_a_missing_topic_is_unknown(admin: AdminClient) -> None:
    (error,) = _done(admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, "nope")])).values()
    assert error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_incremental_alter_configs_sets_and_deletes_keys(kafka: Listener, admin: AdminClient) -> None:
    kafka.client.post("/v1/topics", json={"name": "orders", "partitions": 1,
                                          "config": {"retention_ms": 60000, "retention_bytes": 4096}})
    resource = ConfigResource(ConfigResource.Type.TOPIC, "orders", incremental_configs=[
        ConfigEntry("retention.ms", "120000", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("retention.bytes", None, incremental_operation=AlterConfigOpType.DELETE)])
    assert list(_done(admin.incremental_alter_configs([resource])).values()) == [None]
    config = _described(kafka, "orders")["config"]
    assert (config["retention_ms"], config["retention_bytes"]) == (120000, -1)


def test_incremental_alter_configs_refuses_what_the_topic_cannot_take_and_changes_nothing(
        kafka: Listener, admin: AdminClient) -> None:
    create_topic(kafka.client, "orders", 1)
    before = _described(kafka, "orders")["config"]
    for entry in (ConfigEntry("value.format", "bytes", incremental_operation=AlterConfigOpType.SET),
                  ConfigEntry("retention.ms", "-5", incremental_operation=AlterConfigOpType.SET),
                  ConfigEntry("retention.ms", "1000", incremental_operation=AlterConfigOpType.APPEND),
                  ConfigEntry("cleanup.policy", "shred", incremental_operation=AlterConfigOpType.APPEND),
                  ConfigEntry("cleanup.policy", "delete", incremental_operation=AlterConfigOpType.SUBTRACT)):
        resource = ConfigResource(ConfigResource.Type.TOPIC, "orders", incremental_configs=[entry])
        (error,) = _done(admin.incremental_alter_configs([resource])).values()
        assert error.code() in (KafkaError.INVALID_CONFIG, KafkaError.INVALID_REQUEST), entry
    assert _described(kafka, "orders")["config"] == before


def test_incremental_alter_configs_appends_to_and_subtracts_from_cleanup_policy(
        kafka: Listener, admin: AdminClient) -> None:
    """cleanup.policy is a list in Kafka (delete, compact): APPEND adds to the topic's, SUBTRACT
    takes from it, as librdkafka's own suite (0011) makes a topic compacted and back."""
    create_topic(kafka.client, "orders", 1)

    def alter(operation: AlterConfigOpType) -> str:
        resource = ConfigResource(ConfigResource.Type.TOPIC, "orders", incremental_configs=[
            ConfigEntry("cleanup.policy", "compact", incremental_operation=operation)])
        assert list(_done(admin.incremental_alter_configs([resource])).values()) == [None]
        return _described(kafka, "orders")["config"]["cleanup_policy"]

    assert alter(AlterConfigOpType.APPEND) == "compact,delete"
    assert alter(AlterConfigOpType.APPEND) == "compact,delete"
    assert alter(AlterConfigOpType.SUBTRACT) == "delete"


def _alter_configs(kafka: Listener, topic: str, configs: dict[str, str | None], *, validate_only: bool = False,
                   version: int = 2) -> tuple[ErrorCode, str | None]:
    """AlterConfigs (API 33, the non-incremental one) of one topic, written with kio: its
    resource's (error code, error message)."""
    cls = request_class(33, version)
    assert cls is not None
    mod = __import__(cls.__module__, fromlist=["x"])
    body = cls(validate_only=validate_only, resources=(mod.AlterConfigsResource(
        resource_type=2, resource_name=topic,
        configs=tuple(mod.AlterableConfig(name=n, value=v) for n, v in configs.items())),))
    with kafka.connect() as s:
        (answer,) = ask(s, 33, version, body).responses
    assert (answer.resource_type, answer.resource_name) == (2, topic)
    return answer.error_code, answer.error_message


def test_alter_configs_sets_the_configs_named_and_every_other_back_to_its_default(kafka: Listener) -> None:
    kafka.client.post("/v1/topics", json={"name": "orders", "partitions": 1,
                                          "config": {"retention_ms": 60000, "retention_bytes": 4096}})
    before = _described(kafka, "orders")["config"]
    assert _alter_configs(kafka, "orders", {"retention.ms": "120000", "cleanup.policy": "compact"}) == (
        ErrorCode.none, None)
    # retention.bytes back to its default (-1); value.format, fixed at creation, kept.
    assert _described(kafka, "orders")["config"] == {**before, "retention_ms": 120000, "retention_bytes": -1,
                                                     "cleanup_policy": "compact"}


def test_alter_configs_with_validate_only_changes_nothing(kafka: Listener) -> None:
    create_topic(kafka.client, "orders", 1)
    before = _described(kafka, "orders")["config"]
    assert _alter_configs(kafka, "orders", {"retention.ms": "120000"}, validate_only=True) == (ErrorCode.none, None)
    assert _described(kafka, "orders")["config"] == before


def test_alter_configs_refuses_an_unknown_config_and_changes_nothing(kafka: Listener) -> None:
    create_topic(kafka.client, "orders", 1)
    before = _described(kafka, "orders")["config"]
    code, message = _alter_configs(kafka, "orders", {"retention.ms": "120000", "no.such.config": "1"})
    assert code == ErrorCode.invalid_config and message is not None and "no.such.config" in message
    assert _described(kafka, "orders")["config"] == before


def test_alter_configs_refuses_what_the_topic_cannot_take_and_changes_nothing(kafka: Listener) -> None:
    create_topic(kafka.client, "orders", 1)
    before = _described(kafka, "orders")["config"]
    for configs in ({"value.format": "bytes"}, {"retention.ms": "-5"}, {"retention.ms": None}):
        assert _alter_configs(kafka, "orders", configs)[0] == ErrorCode.invalid_config, configs
    assert _described(kafka, "orders")["config"] == before


def test_alter_configs_takes_kafka_s_file_layout_configs_and_stores_none_of_them(kafka: Listener) -> None:
    create_topic(kafka.client, "orders", 1)
    before = _described(kafka, "orders")["config"]
    assert _alter_configs(kafka, "orders", {"message.format.version": "0.10.0.0", "segment.bytes": "20000"}) == (
        ErrorCode.none, None)
    assert _described(kafka, "orders")["config"] == before


def test_alter_configs_of_a_missing_topic_is_unknown(kafka: Listener) -> None:
    assert _alter_configs(kafka, "nope", {"retention.ms": "1000"})[0] == ErrorCode.unknown_topic_or_partition


def test_alter_configs_of_a_missing_topic_is_unknown_before_its_configs_are_checked(kafka: Listener) -> None:
    code, _ = _alter_configs(kafka, "nope", {"compression.type": "lz4", "offset.metadata.max.bytes": "12345"})
    assert code == ErrorCode.unknown_topic_or_partition


def test_alter_configs_of_the_broker_is_refused(kafka: Listener) -> None:
    cls = request_class(33, 0)
    mod = __import__(cls.__module__, fromlist=["x"])  # type: ignore[union-attr]
    body = cls(validate_only=False, resources=(mod.AlterConfigsResource(  # type: ignore[misc]
        resource_type=4, resource_name="0", configs=(mod.AlterableConfig(name="log.retention.ms", value="1"),)),))
    with kafka.connect() as s:
        (answer,) = ask(s, 33, 0, body).responses
    assert (answer.error_code, answer.error_message) == (
        ErrorCode.invalid_request, "only topic configs can be altered: the broker's are the service's settings "
        "(OUTBOX_*), read when it starts; refused: log.retention.ms")


def test_every_served_version_of_alter_configs_is_answered(kafka: Listener) -> None:
    create_topic(kafka.client, "orders", 1)
    for version in range(3):
        assert _alter_configs(kafka, "orders", {"retention.ms": str(1000 + version)}, version=version) == (
            ErrorCode.none, None), version
        assert _described(kafka, "orders")["config"]["retention_ms"] == 1000 + version


def test_delete_records_moves_the_log_start(kafka: Listener, admin: AdminClient) -> None:
    create_topic(kafka.client, "orders", 1)
    assert send(kafka.client, [batch("orders", 0, ["a", "b", "c", "d"])]).status_code == 200
    (result,) = _done(admin.delete_records([TopicPartition("orders", 0, 2)])).values()
    assert result.low_watermark == 2
    (partition,) = _described(kafka, "orders")["partitions"]
    assert partition["log_start_offset"] == 2
    (result,) = _done(admin.delete_records([TopicPartition("orders", 0, -1)])).values()
    assert result.low_watermark == 4  # -1: as far as it may go, the last stable offset


def test_delete_records_below_minus_one_is_offset_out_of_range_and_moves_nothing(kafka: Listener,
                                                                                admin: AdminClient) -> None:
    create_topic(kafka.client, "orders", 2)
    assert send(kafka.client, [batch("orders", 0, ["a", "b", "c"]), batch("orders", 1, ["d"])]).status_code == 200
    got = _done(admin.delete_records([TopicPartition("orders", 0, -1001), TopicPartition("orders", 1, 1)]))
    assert got[TopicPartition("orders", 0)].code() == KafkaError.OFFSET_OUT_OF_RANGE
    assert got[TopicPartition("orders", 1)].low_watermark == 1
    assert [p["log_start_offset"] for p in _described(kafka, "orders")["partitions"]] == [0, 1]


def test_delete_records_across_a_committed_transaction_is_offset_out_of_range_and_moves_nothing(
        kafka: Listener, admin: AdminClient) -> None:
    # A transaction's record at 0, plain records at 1 and 2, its COMMIT marker at 3: read in
    # commit order (over HTTP) the transaction comes after both, at 3.
    create_topic(kafka.client, "orders", 1)
    p = init_producer(kafka.client, "tx")
    begin(kafka.client, "tx", p)
    assert send(kafka.client, [batch("orders", 0, ["T"], 0)], p, "tx").status_code == 200
    assert send(kafka.client, [batch("orders", 0, ["p1", "p2"])]).status_code == 200
    assert kafka.client.post("/v1/transactions/tx/commit", json=ident(p)).status_code == 200

    (refused,) = _done(admin.delete_records([TopicPartition("orders", 0, 2)])).values()

    assert refused.code() == KafkaError.OFFSET_OUT_OF_RANGE
    (partition,) = _described(kafka, "orders")["partitions"]
    assert partition["log_start_offset"] == 0
    r = kafka.client.get("/v1/topics/orders/partitions/0/records", params={"offset": 2})
    assert [x["value"] for x in r.json()["records"]] == ["p2", "T"]
    (result,) = _done(admin.delete_records([TopicPartition("orders", 0, 4)])).values()
    assert result.low_watermark == 4


def test_delete_records_to_minus_one_stops_below_a_transaction_committed_across_the_last_stable_offset(
        kafka: Listener, admin: AdminClient) -> None:
    # a's record at 0, b's at 1 (b stays open: the last stable offset is 1), a's marker at 2.
    create_topic(kafka.client, "orders", 1)
    producers = {}
    for tid, value in (("a", "a0"), ("b", "b1")):
        producers[tid] = init_producer(kafka.client, tid)
        begin(kafka.client, tid, producers[tid])
        assert send(kafka.client, [batch("orders", 0, [value], 0)], producers[tid], tid).status_code == 200
    assert kafka.client.post("/v1/transactions/a/commit", json=ident(producers["a"])).status_code == 200

    (result,) = _done(admin.delete_records([TopicPartition("orders", 0, -1)])).values()

    assert result.low_watermark == 0  # 1 would take a0 from a reader in commit order at 1
    r = kafka.client.get("/v1/topics/orders/partitions/0/records", params={"offset": 1})
    assert [x["value"] for x in r.json()["records"]] == ["a0"]


def test_delete_topics_deletes_by_name(kafka: Listener, admin: AdminClient) -> None:
    create_topic(kafka.client, "orders", 1)
    got = _done(admin.delete_topics(["orders", "nope"]))
    assert got["orders"] is None
    assert got["nope"].code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    assert kafka.client.get("/v1/topics/orders").status_code == 404


# --- DescribeTransactions and ListTransactions (no Python client speaks them: raw frames) -------


def _open_transaction(kafka: Listener, tid: str) -> dict[str, Any]:
    """A version 1 transaction of `tid` over HTTP, open with one record in orders/1."""
    p = init_producer(kafka.client, tid)
    begin(kafka.client, tid, p)
    assert send(kafka.client, [batch("orders", 1, ["a"], 0)], p, tid).status_code == 200
    return p


def test_describe_transactions_shows_the_open_transaction_and_its_partitions(kafka: Listener) -> None:
    from kio.schema.describe_transactions.v0.request import DescribeTransactionsRequest
    from kio.schema.errors import ErrorCode

    create_topic(kafka.client, "orders", 2)
    p = _open_transaction(kafka, "pay-1")
    with kafka.connect() as s:
        answer = ask(s, 65, 0, DescribeTransactionsRequest(transactional_ids=("pay-1", "nobody")))
    found, missing = answer.transaction_states
    assert (found.error_code, found.transaction_state, found.producer_id, found.producer_epoch) == (
        ErrorCode.none, "Ongoing", p["producer_id"], p["producer_epoch"])
    assert [(t.topic, tuple(t.partitions)) for t in found.topics] == [("orders", (1,))]
    described = kafka.client.get("/v1/transactions/pay-1").json()
    assert round(found.transaction_start_time.timestamp() * 1000) == described["txn_started_ms"]
    assert found.transaction_timeout.total_seconds() * 1000 == described["transaction_timeout_ms"]
    assert missing.error_code == ErrorCode.transactional_id_not_found


def test_list_transactions_filters_by_state_and_producer(kafka: Listener) -> None:
    from kio.schema.errors import ErrorCode
    from kio.schema.list_transactions.v1.request import ListTransactionsRequest

    create_topic(kafka.client, "orders", 2)
    open_one = _open_transaction(kafka, "open-1")
    init_producer(kafka.client, "idle-1")
    with kafka.connect() as s:
        every = ask(s, 66, 1, ListTransactionsRequest(state_filters=(), producer_id_filters=(), duration_filter=-1))
        ongoing = ask(s, 66, 1, ListTransactionsRequest(state_filters=("Ongoing", "Sleeping"), producer_id_filters=(),
                                                         duration_filter=-1))
        by_producer = ask(s, 66, 1, ListTransactionsRequest(state_filters=(),
                                                             producer_id_filters=(open_one["producer_id"],),
                                                             duration_filter=-1))
    assert every.error_code == ErrorCode.none
    assert sorted((t.transactional_id, t.transaction_state) for t in every.transaction_states) == [
        ("idle-1", "Empty"), ("open-1", "Ongoing")]
    assert [t.transactional_id for t in ongoing.transaction_states] == ["open-1"]
    assert ongoing.unknown_state_filters == ("Sleeping",)
    assert [t.transactional_id for t in by_producer.transaction_states] == ["open-1"]


def test_list_transactions_duration_filter_is_kafka_s_began_more_than_that_long_ago(kafka: Listener, clock) -> None:  # type: ignore[no-untyped-def]
    """As Kafka's coordinator: the start time alone decides, whatever the state now (a committed
    transaction keeps its start), strictly longer than the duration, and an id that began no
    transaction counts as begun at -1."""
    from kio.schema.list_transactions.v1.request import ListTransactionsRequest

    done = init_producer(kafka.client, "done-1")
    begin(kafka.client, "done-1", done)
    assert kafka.client.post("/v1/transactions/done-1/commit", json=ident(done)).json()["state"] == "CompleteCommit"
    init_producer(kafka.client, "idle-1")
    clock.advance(5_000)
    begin(kafka.client, "open-1", init_producer(kafka.client, "open-1"))

    def listed(states: tuple[str, ...], duration_ms: int) -> list[tuple[str, str]]:
        with kafka.connect() as s:
            answer = ask(s, 66, 1, ListTransactionsRequest(state_filters=states, producer_id_filters=(),
                                                            duration_filter=duration_ms))
        assert answer.error_code == ErrorCode.none
        return sorted((t.transactional_id, t.transaction_state) for t in answer.transaction_states)

    assert listed((), 4_999) == [("done-1", "CompleteCommit"), ("idle-1", "Empty")]
    assert listed((), 5_000) == [("idle-1", "Empty")]
    assert listed(("CompleteCommit",), 0) == [("done-1", "CompleteCommit")]
    assert listed(("Ongoing",), 0) == []
    assert listed(("Ongoing",), -1) == [("open-1", "Ongoing")]


def test_describe_producers_shows_each_producer_s_state_and_open_transaction(kafka: Listener) -> None:
    from kio.schema.describe_producers.v0.request import DescribeProducersRequest, TopicRequest
    from kio.schema.errors import ErrorCode

    create_topic(kafka.client, "orders", 2)
    idem = init_producer(kafka.client)
    assert send(kafka.client, [batch("orders", 1, ["x", "y"], 0)], idem).status_code == 200
    txn = _open_transaction(kafka, "pay-1")  # its record at orders/1 offset 2
    with kafka.connect() as s:
        answer = ask(s, 61, 0, DescribeProducersRequest(topics=(
            TopicRequest(name="orders", partition_indexes=(1, 0, 7)),)))
    (topic,) = answer.topics
    one, zero, seven = topic.partitions
    assert one.error_code == ErrorCode.none
    assert sorted((p.producer_id, p.producer_epoch, p.last_sequence, p.current_txn_start_offset)
                  for p in one.active_producers) == sorted([
                      (idem["producer_id"], idem["producer_epoch"], 1, -1),
                      (txn["producer_id"], txn["producer_epoch"], 0, 2)])
    assert (zero.error_code, zero.active_producers) == (ErrorCode.none, ())
    assert seven.error_code == ErrorCode.unknown_topic_or_partition


def test_list_transactions_by_producer_finds_one_past_ten_thousand_other_ids(kafka: Listener, db_url: str) -> None:
    """The producer id filter is SQL's, before any cap: the list once read the first 10,000 ids
    and filtered those, so a producer whose id sorted later was never found."""
    from kio.schema.list_transactions.v1.request import ListTransactionsRequest

    from tests.integration.test_transaction_list_pages import OTHERS, _store

    _store(db_url, [f"aaa-{i:05d}" for i in range(OTHERS)])
    late = init_producer(kafka.client, "zz-1")
    with kafka.connect() as s:
        answer = ask(s, 66, 1, ListTransactionsRequest(state_filters=(), producer_id_filters=(late["producer_id"],),
                                                        duration_filter=-1))
    assert answer.error_code == ErrorCode.none
    assert [(t.transactional_id, t.producer_id) for t in answer.transaction_states] == [("zz-1", late["producer_id"])]
