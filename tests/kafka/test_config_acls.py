"""The Kafka door's config APIs under Kafka's config operations, with authentication on, on SQLite
and PostgreSQL: DescribeConfigs needs DESCRIBE_CONFIGS (on the topic; on the cluster for the
broker), AlterConfigs and IncrementalAlterConfigs ALTER_CONFIGS (on the topic; on the cluster
for the broker), and a topic CreateTopics created is answered its configs only with
DESCRIBE_CONFIGS on it. ALTER_CONFIGS implies DESCRIBE_CONFIGS; DESCRIBE does not."""

from __future__ import annotations

import datetime
import logging
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from tests.kafka.conftest import ask
from tests.kafka.secured import Secured
from tests.kafka.test_security import _sasl

pytestmark = [pytest.mark.kafka, pytest.mark.usefixtures("cheap_scrypt")]

TOPIC, GROUP, BROKER, BROKER_LOGGER, CLIENT_METRICS = 2, 3, 4, 8, 16  # Kafka's ConfigResource types


def _deny(w: Secured, resource_type: str, name: str, operation: str) -> None:
    r = w.client.post("/v1/acls", headers=w.headers(), json={"acls": [
        {"principal": "User:alice", "resource_type": resource_type, "resource_name": name, "pattern_type": "literal",
         "operation": operation, "permission": "deny"}]})
    assert r.status_code < 300, r.text


def _as_alice(w: Secured, api_key: int, version: int, body: Any) -> Any:
    with w.connect() as s:
        assert _sasl(s, "alice", w.keys["alice"]).error_code == ErrorCode.none
        return ask(s, api_key, version, body)


def _describe_configs_request(resource_type: int, name: str) -> Any:
    from kio.schema.describe_configs.v4.request import DescribeConfigsRequest, DescribeConfigsResource

    return DescribeConfigsRequest(resources=(DescribeConfigsResource(
        resource_type=resource_type, resource_name=name, configuration_keys=("retention.ms",)),),
        include_synonyms=False, include_documentation=False)


def _describe_configs(w: Secured, resource_type: int, name: str) -> list[tuple[str, ErrorCode, int]]:
    """(resource name, error code, how many configs) of DescribeConfigs v4 as alice."""
    answer = _as_alice(w, 32, 4, _describe_configs_request(resource_type, name))
    return [(r.resource_name, r.error_code, len(r.configs)) for r in answer.results]


def _describe_configs_twice(w: Secured, resource_type: int, name: str) -> list[list[tuple[str, ErrorCode, int]]]:
    """_describe_configs asked twice on one connection: the second answer shows the first left it open."""
    with w.connect() as s:
        assert _sasl(s, "alice", w.keys["alice"]).error_code == ErrorCode.none
        answers = [ask(s, 32, 4, _describe_configs_request(resource_type, name)) for _ in range(2)]
    return [[(r.resource_name, r.error_code, len(r.configs)) for r in a.results] for a in answers]


def _broker_retention(w: Secured, resource_type: int = BROKER) -> list[tuple[str, ErrorCode]]:
    """(resource name, error code) of IncrementalAlterConfigs v1 as alice: a broker config SET
    (to a resource of `resource_type` named "1")."""
    from kio.schema.incremental_alter_configs.v1.request import (
        AlterableConfig,
        AlterConfigsResource,
        IncrementalAlterConfigsRequest,
    )

    answer = _as_alice(w, 44, 1, IncrementalAlterConfigsRequest(validate_only=False, resources=(AlterConfigsResource(
        resource_type=resource_type, resource_name="1", configs=(
            AlterableConfig(name="log.retention.ms", config_operation=0, value="1000"),)),)))
    return [(r.resource_name, r.error_code) for r in answer.responses]


def test_describe_configs_of_a_topic_is_refused_with_describe_alone(secured: Secured) -> None:
    secured.grant("User:alice", "topic", "orders", "describe", "read", "write", "alter")
    assert _describe_configs(secured, TOPIC, "orders") == [("orders", ErrorCode.topic_authorization_failed, 0)]


@pytest.mark.parametrize("granted", ["describe_configs", "alter_configs"])
def test_describe_configs_of_a_topic_is_answered_with_describe_configs_or_alter_configs(
        secured: Secured, granted: str) -> None:
    secured.grant("User:alice", "topic", "orders", granted)
    assert _describe_configs(secured, TOPIC, "orders") == [("orders", ErrorCode.none, 1)]


def test_a_deny_of_describe_configs_refuses_describe_configs_despite_all(secured: Secured) -> None:
    secured.grant("User:alice", "topic", "orders", "all")
    _deny(secured, "topic", "orders", "describe_configs")
    assert _describe_configs(secured, TOPIC, "orders") == [("orders", ErrorCode.topic_authorization_failed, 0)]


def test_describe_configs_of_the_broker_needs_describe_configs_on_the_cluster_not_describe(
        secured: Secured) -> None:
    secured.grant("User:alice", "cluster", "outbox-cluster", "describe", "alter")
    assert _describe_configs(secured, BROKER, "1") == [("1", ErrorCode.cluster_authorization_failed, 0)]
    secured.grant("User:alice", "cluster", "outbox-cluster", "alter_configs")  # implies describe_configs
    assert _describe_configs(secured, BROKER, "1") == [("1", ErrorCode.none, 0)]


def test_describe_configs_of_a_broker_logger_needs_describe_configs_on_the_cluster_then_is_invalid(
        secured: Secured) -> None:
    secured.grant("User:alice", "cluster", "outbox-cluster", "describe")
    assert _describe_configs_twice(secured, BROKER_LOGGER, "1") == [
        [("1", ErrorCode.cluster_authorization_failed, 0)]] * 2
    secured.grant("User:alice", "cluster", "outbox-cluster", "describe_configs")
    assert _describe_configs_twice(secured, BROKER_LOGGER, "1") == [[("1", ErrorCode.invalid_request, 0)]] * 2


@pytest.mark.parametrize("resource_type", [GROUP, CLIENT_METRICS])
@pytest.mark.parametrize("granted", [(), ("describe_configs",)])
def test_describe_configs_of_a_type_with_no_configs_is_invalid_whatever_is_granted(
        secured: Secured, resource_type: int, granted: tuple[str, ...]) -> None:
    if granted:
        secured.grant("User:alice", "cluster", "outbox-cluster", *granted)
    assert _describe_configs_twice(secured, resource_type, "g") == [[("g", ErrorCode.invalid_request, 0)]] * 2


def test_incremental_alter_configs_of_a_broker_logger_needs_alter_configs_on_the_cluster_then_is_invalid(
        secured: Secured) -> None:
    secured.grant("User:alice", "cluster", "outbox-cluster", "alter")
    assert _broker_retention(secured, BROKER_LOGGER) == [("1", ErrorCode.cluster_authorization_failed)]
    secured.grant("User:alice", "cluster", "outbox-cluster", "alter_configs")
    assert _broker_retention(secured, BROKER_LOGGER) == [("1", ErrorCode.invalid_request)]


@pytest.mark.parametrize("resource_type", [GROUP, CLIENT_METRICS])
def test_incremental_alter_configs_of_a_type_with_no_configs_is_invalid_with_nothing_granted(
        secured: Secured, resource_type: int) -> None:
    assert _broker_retention(secured, resource_type) == [("1", ErrorCode.invalid_request)]


def test_incremental_alter_configs_of_the_broker_needs_alter_configs_on_the_cluster_not_alter(
        secured: Secured) -> None:
    secured.grant("User:alice", "cluster", "outbox-cluster", "alter")
    assert _broker_retention(secured) == [("1", ErrorCode.cluster_authorization_failed)]
    secured.grant("User:alice", "cluster", "outbox-cluster", "alter_configs")
    # Past the gate: refused as every broker config is (the service's settings are read at start).
    assert _broker_retention(secured) == [("1", ErrorCode.invalid_request)]


def test_a_deny_of_alter_configs_on_the_cluster_refuses_a_broker_alter_despite_all(secured: Secured) -> None:
    secured.grant("User:alice", "cluster", "outbox-cluster", "all")
    _deny(secured, "cluster", "outbox-cluster", "alter_configs")
    assert _broker_retention(secured) == [("1", ErrorCode.cluster_authorization_failed)]


def _create(w: Secured, name: str) -> Any:
    from kio.schema.create_topics.v7.request import CreatableTopic, CreatableTopicConfig, CreateTopicsRequest

    answer = _as_alice(w, 19, 7, CreateTopicsRequest(topics=(CreatableTopic(
        name=name, num_partitions=2, replication_factor=1, assignments=(),
        configs=(CreatableTopicConfig(name="retention.ms", value="5000"),)),), timeout=datetime.timedelta(seconds=5),
        validate_only=False))
    (topic,) = answer.topics
    return topic


def test_create_topics_without_describe_configs_answers_no_configs_and_creates_the_topic(secured: Secured) -> None:
    secured.grant("User:alice", "topic", "fresh", "create", "describe")
    topic = _create(secured, "fresh")
    assert (topic.name, topic.error_code, topic.topic_config_error_code, topic.num_partitions,
            topic.replication_factor, topic.configs) == (
        "fresh", ErrorCode.none, ErrorCode.topic_authorization_failed, -1, -1, ())
    described = secured.client.get("/v1/topics/fresh", headers=secured.headers()).json()
    assert (described["partition_count"], described["config"]["retention_ms"]) == (2, 5000)


def test_create_topics_without_describe_configs_audits_no_refusal(
        secured: Secured, caplog: pytest.LogCaptureFixture) -> None:
    # Kafka hides a created topic's configs without logging a denial: nothing was refused.
    secured.grant("User:alice", "topic", "fresh", "create", "describe")
    caplog.set_level(logging.INFO, logger="outbox.audit")
    assert _create(secured, "fresh").topic_config_error_code == ErrorCode.topic_authorization_failed
    assert [r.resource for r in caplog.records if r.name == "outbox.audit" and r.allowed is False] == []


def test_create_topics_with_describe_configs_answers_the_topics_configs(secured: Secured) -> None:
    secured.grant("User:alice", "topic", "fresh", "create", "describe_configs")
    topic = _create(secured, "fresh")
    assert (topic.error_code, topic.topic_config_error_code, topic.num_partitions, topic.replication_factor) == (
        ErrorCode.none, ErrorCode.none, 2, 1)
    assert {c.name: c.value for c in topic.configs}["retention.ms"] == "5000"


def test_a_deny_of_describe_configs_answers_create_topics_no_configs_despite_all(secured: Secured) -> None:
    secured.grant("User:alice", "topic", "fresh", "all")
    _deny(secured, "topic", "fresh", "describe_configs")
    topic = _create(secured, "fresh")
    assert (topic.error_code, topic.topic_config_error_code, topic.num_partitions, topic.replication_factor,
            topic.configs) == (ErrorCode.none, ErrorCode.topic_authorization_failed, -1, -1, ())
