"""Guarantee 16 at the Kafka door: SASL/PLAIN with an API key (over TLS with the HTTP door's
certificate), and every request held to the same ACLs as over HTTP (app.kafka.auth), on both
databases. Real clients (confluent-kafka, kafka-python) where a client shows the behaviour;
the wire itself (kio) where the exact answer, or the lack of one, is the point."""

from __future__ import annotations

import logging
import datetime
import socket
import ssl
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition
from cryptography import x509
from kio.schema.errors import ErrorCode
from prometheus_client import REGISTRY

from tests.helpers import create_topic
from tests.kafka.conftest import ask, closed, frame, read_frame
from tests.kafka.secured import Secured, start_secured

pytestmark = pytest.mark.usefixtures("cheap_scrypt")

TIMEOUT_S = 20
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


def _failures() -> float:
    return REGISTRY.get_sample_value("outbox_authentication_failures_total", {"method": "api_key"}) or 0.0


def _refusals(resource_type: str, operation: str) -> float:
    return REGISTRY.get_sample_value("outbox_authorization_refusals_total",
                                     {"resource_type": resource_type, "operation": operation}) or 0.0


def _sasl(s: socket.socket, user: str, key: str) -> Any:
    """SaslHandshake v1 (PLAIN) and SaslAuthenticate v2 on the raw socket: the latter's answer."""
    from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
    from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

    handshake = ask(s, 17, 1, SaslHandshakeRequest(mechanism="PLAIN"))
    assert (handshake.error_code, handshake.mechanisms) == (ErrorCode.none, MECHANISMS)
    return ask(s, 36, 2, SaslAuthenticateRequest(auth_bytes=f"\0{user}\0{key}".encode()), correlation_id=8)


def _consume(config: dict[str, Any], topic: str, count: int) -> list[Any]:
    c = Consumer({**config, "group.id": "test", "enable.auto.commit": False, "fetch.wait.max.ms": 100})
    try:
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        got: list[Any] = []
        for _ in range(TIMEOUT_S * 5):
            m = c.poll(0.2)
            if m is not None and m.error() is None:
                got.append(m)
            if len(got) == count:
                break
        return got
    finally:
        c.close()


# --- authentication ----------------------------------------------------------------------


def test_confluent_kafka_with_a_right_key_produces_and_consumes_over_sasl_ssl(secured_tls: Secured) -> None:
    w = secured_tls
    w.grant("User:alice", "topic", "orders", "write", "read")
    p = Producer({**w.client_config("alice"), "linger.ms": 0, "message.timeout.ms": 10_000})
    reports: list[Any] = []
    p.produce("orders", value=b'{"n": 1}', key=b"k", partition=0,
              on_delivery=lambda err, msg: reports.append((err, msg.offset())))
    assert p.flush(TIMEOUT_S) == 0
    assert reports == [(None, 0)]
    got = _consume(w.client_config("alice"), "orders", 1)
    assert [(m.offset(), m.key(), m.value()) for m in got] == [(0, b"k", b'{"n": 1}')]
    assert [(r["offset"], r["key"], r["value"]) for r in w.stored()] == [(0, "k", {"n": 1})]


def test_the_tls_listener_refuses_a_client_that_does_not_speak_tls(secured_tls: Secured) -> None:
    with secured_tls.connect() as s:
        s.sendall(frame(18, 3, _api_versions()))
        assert closed(s)


def test_kafka_python_with_a_right_key_produces_and_consumes_over_sasl_plaintext(secured: Secured) -> None:
    assert kafka_python_round_trip(secured, "PLAIN") == (0, [(0, b"k", b'"v"')])


def kafka_python_round_trip(w: Secured, mechanism: str) -> tuple[int, list[tuple[int, bytes, bytes]]]:
    """kafka-python as User:bob over SASL `mechanism`: one record produced into orders-0, then
    read back from the start: (the produced offset, [(offset, key, value)] read)."""
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KafkaTopicPartition

    w.grant("User:bob", "topic", "orders", "write", "read")
    sasl = {"bootstrap_servers": w.bootstrap, "security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": mechanism,
            "sasl_plain_username": "User:bob", "sasl_plain_password": w.keys["bob"]}
    producer = KafkaProducer(request_timeout_ms=10_000, **sasl)
    try:
        offset = producer.send("orders", value=b'"v"', key=b"k", partition=0).get(TIMEOUT_S).offset
    finally:
        producer.close(5)
    consumer = KafkaConsumer(enable_auto_commit=False, consumer_timeout_ms=TIMEOUT_S * 1000, **sasl)
    try:
        tp = KafkaTopicPartition("orders", 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        got = []
        for m in consumer:
            got.append((m.offset, m.key, m.value))
            break
    finally:
        consumer.close()
    return offset, got


def test_confluent_kafka_with_a_wrong_key_fails_with_the_authentication_error(secured: Secured) -> None:
    errors: list[Any] = []
    before = _failures()
    wrong = "outbox_0123456789abcdef_" + "x" * 43
    p = Producer({**secured.client_config("alice", wrong), "error_cb": errors.append,
                  "message.timeout.ms": 5_000})
    p.produce("orders", value=b"1", partition=0)
    p.flush(6)
    assert KafkaError._AUTHENTICATION in [e.code() for e in errors]
    assert _failures() > before
    assert secured.stored() == []


def test_a_wrong_key_is_answered_sasl_authentication_failed_and_the_connection_closed(
        secured: Secured, caplog: pytest.LogCaptureFixture) -> None:
    before = _failures()
    wrong = secured.keys["alice"][:-4] + "AAAA"
    with secured.connect() as s:
        answer = _sasl(s, "alice", wrong)
        assert answer.error_code == ErrorCode.sasl_authentication_failed
        assert answer.error_message == "authentication failed: the API key is unknown, revoked or wrong"
        assert closed(s)
    assert _failures() == before + 1
    assert wrong not in caplog.text and wrong[-20:] not in caplog.text


def test_a_key_of_another_principal_than_the_user_name_is_refused(secured: Secured) -> None:
    with secured.connect() as s:
        answer = _sasl(s, "bob", secured.keys["alice"])
        assert answer.error_code == ErrorCode.sasl_authentication_failed
        assert answer.error_message == ("authentication failed: the API key belongs to another principal than the "
                                        "user name given")
        assert closed(s)


def test_the_user_name_may_be_the_principal_with_its_type(secured: Secured) -> None:
    with secured.connect() as s:
        answer = _sasl(s, "User:alice", secured.keys["alice"])
        assert (answer.error_code, answer.error_message) == (ErrorCode.none, None)


def test_a_mechanism_not_served_is_refused_naming_those_served(secured: Secured) -> None:
    from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

    with secured.connect() as s:
        answer = ask(s, 17, 1, SaslHandshakeRequest(mechanism="GSSAPI"))
        assert (answer.error_code, answer.mechanisms) == (ErrorCode.unsupported_sasl_mechanism, MECHANISMS)
        assert closed(s)


def test_after_a_version_0_handshake_the_bare_token_authenticates(secured: Secured) -> None:
    from kio.schema.metadata.v12.request import MetadataRequest
    from kio.schema.sasl_handshake.v0.request import SaslHandshakeRequest

    secured.grant("User:alice", "topic", "orders", "describe")
    with secured.connect() as s:
        assert ask(s, 17, 0, SaslHandshakeRequest(mechanism="PLAIN")).error_code == ErrorCode.none
        token = f"\0alice\0{secured.keys['alice']}".encode()
        s.sendall(struct.pack(">i", len(token)) + token)
        assert read_frame(s) == b""  # success: an empty token
        answer = ask(s, 3, 12, MetadataRequest(topics=None, allow_auto_topic_creation=False,
                                                include_topic_authorized_operations=False))
        assert [t.name for t in answer.topics] == ["orders"]


def _api_versions() -> Any:
    from kio.schema.api_versions.v3.request import ApiVersionsRequest

    return ApiVersionsRequest(client_software_name="test", client_software_version="1")


def test_before_authentication_api_versions_is_answered_and_lists_the_sasl_apis(secured: Secured) -> None:
    with secured.connect() as s:
        answer = ask(s, 18, 3, _api_versions())
        served = {k.api_key: (k.min_version, k.max_version) for k in answer.api_keys}
        assert (served[17], served[36]) == ((0, 1), (0, 2))


@pytest.mark.parametrize("api", ["produce", "fetch", "metadata"])
def test_an_unauthenticated_request_closes_the_connection_and_reaches_no_engine(
        secured: Secured, api: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
    from kio.schema.metadata.v12.request import MetadataRequest
    from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData

    services = secured.client.app.state.services
    reached: list[str] = []
    monkeypatch.setattr(services.log, "send", lambda *a, **k: reached.append("send"))
    monkeypatch.setattr(services.log, "read_in_offset_order", lambda *a, **k: reached.append("read"))
    monkeypatch.setattr(services.topics, "list", lambda *a, **k: reached.append("list"))
    requests = {
        "produce": (0, 9, ProduceRequest(transactional_id=None, acks=-1, timeout=datetime.timedelta(seconds=5),
                                         topic_data=(TopicProduceData(name="orders", partition_data=(
                                             PartitionProduceData(index=0, records=b"\0" * 70),)),))),
        "fetch": (1, 12, FetchRequest(replica_id=-1, max_wait=datetime.timedelta(0), min_bytes=0, max_bytes=1000,
                                      isolation_level=0, session_id=0, session_epoch=-1, topics=(FetchTopic(
                                          topic="orders", partitions=(FetchPartition(
                                              partition=0, current_leader_epoch=-1, fetch_offset=0, last_fetched_epoch=-1,
                                              log_start_offset=-1, partition_max_bytes=1000),)),),
                                      forgotten_topics_data=(), rack_id="")),
        "metadata": (3, 12, MetadataRequest(topics=None, allow_auto_topic_creation=False,
                                            include_topic_authorized_operations=False)),
    }
    api_key, version, body = requests[api]
    with secured.connect() as s:
        s.sendall(frame(api_key, version, body))
        assert closed(s)
    assert reached == []


def test_a_client_closed_again_and_again_before_authentication_is_one_log_line_a_while(
        secured: Secured, caplog: pytest.LogCaptureFixture) -> None:
    # A client without SASL on a SASL listener reconnects at its backoff: a line each time
    # made 26 lines in 10 s. The first is logged; the others are counted into the next.
    from kio.schema.metadata.v12.request import MetadataRequest

    metadata = MetadataRequest(topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False)
    with caplog.at_level(logging.INFO, logger="app.kafka"):
        for _ in range(5):
            with secured.connect() as s:
                s.sendall(frame(3, 12, metadata))
                assert closed(s)
    said = [r.getMessage() for r in caplog.records if "closing the connection" in r.getMessage()]
    assert len(said) == 1, said
    assert said[0].startswith("Kafka listener: closing the connection from 127.0.0.1:")
    assert said[0].endswith(": API key 3 before SASL authentication")


# --- authorization -----------------------------------------------------------------------


def test_a_principal_without_write_gets_topic_authorization_failed_and_nothing_is_written(secured: Secured) -> None:
    w = secured
    w.grant("User:alice", "topic", "orders", "read")
    before = _refusals("topic", "write")
    p = Producer({**w.client_config("alice"), "linger.ms": 0, "message.timeout.ms": 10_000, "retries": 0})
    reports: list[Any] = []
    p.produce("orders", value=b"1", partition=0, on_delivery=lambda err, msg: reports.append(err and err.code()))
    p.flush(TIMEOUT_S)
    assert reports == [KafkaError.TOPIC_AUTHORIZATION_FAILED]
    assert w.stored() == []
    assert _refusals("topic", "write") >= before + 1


def test_metadata_lists_only_the_topics_the_principal_may_describe(secured: Secured) -> None:
    from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic

    secured.grant("User:alice", "topic", "orders", "read")
    with secured.connect() as s:
        assert _sasl(s, "alice", secured.keys["alice"]).error_code == ErrorCode.none
        every = ask(s, 3, 12, MetadataRequest(topics=None, allow_auto_topic_creation=False,
                                               include_topic_authorized_operations=False))
        named = ask(s, 3, 12, MetadataRequest(topics=tuple(MetadataRequestTopic(topic_id=None, name=n)
                                                           for n in ("audit", "orders", "missing")),
                                              allow_auto_topic_creation=False,
                                              include_topic_authorized_operations=False))
    assert [(t.name, t.error_code) for t in every.topics] == [("orders", ErrorCode.none)]
    assert [(t.name, t.error_code) for t in named.topics] == [
        ("audit", ErrorCode.topic_authorization_failed), ("orders", ErrorCode.none),
        ("missing", ErrorCode.topic_authorization_failed)]


# Kafka's AclOperation codes: a KIP-430 authorized-operations field sets bit `code` for each
# operation allowed; INT32_MIN says the request did not ask for it.
READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE = 3, 4, 5, 6, 7, 8
CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE = 9, 10, 11, 12
NOT_REQUESTED = -2147483648


def _bits(*codes: int) -> int:
    return sum(1 << c for c in codes)


def _metadata_v10(s: socket.socket, *names: str, topic_operations: bool, cluster_operations: bool) -> Any:
    from kio.schema.metadata.v10.request import MetadataRequest, MetadataRequestTopic

    return ask(s, 3, 10, MetadataRequest(
        topics=tuple(MetadataRequestTopic(topic_id=None, name=n) for n in names), allow_auto_topic_creation=False,
        include_cluster_authorized_operations=cluster_operations, include_topic_authorized_operations=topic_operations))


def test_metadata_answers_a_topics_authorized_operations_when_asked(secured: Secured) -> None:
    secured.grant("User:alice", "topic", "orders", "read", "describe")
    with secured.connect() as s:
        assert _sasl(s, "alice", secured.keys["alice"]).error_code == ErrorCode.none
        asked = _metadata_v10(s, "orders", "audit", topic_operations=True, cluster_operations=False)
        unasked = _metadata_v10(s, "orders", "audit", topic_operations=False, cluster_operations=False)
    # A topic refused keeps INT32_MIN, as in Kafka: its operations are not the principal's to see.
    assert [(t.name, t.error_code, t.topic_authorized_operations) for t in asked.topics] == [
        ("orders", ErrorCode.none, _bits(READ, DESCRIBE)),
        ("audit", ErrorCode.topic_authorization_failed, NOT_REQUESTED)]
    assert [t.topic_authorized_operations for t in unasked.topics] == [NOT_REQUESTED, NOT_REQUESTED]


def test_metadata_answers_the_clusters_authorized_operations_when_asked_and_none_without_describe(
        secured: Secured) -> None:
    secured.grant("User:alice", "cluster", "outbox-cluster", "idempotent_write")
    with secured.connect() as s:
        assert _sasl(s, "alice", secured.keys["alice"]).error_code == ErrorCode.none
        undescribable = _metadata_v10(s, topic_operations=False, cluster_operations=True)
        secured.grant("User:alice", "cluster", "outbox-cluster", "alter")  # ALTER implies DESCRIBE
        asked = _metadata_v10(s, topic_operations=False, cluster_operations=True)
        unasked = _metadata_v10(s, topic_operations=False, cluster_operations=False)
    assert undescribable.cluster_authorized_operations == 0
    assert asked.cluster_authorized_operations == _bits(ALTER, DESCRIBE, IDEMPOTENT_WRITE)
    assert unasked.cluster_authorized_operations == NOT_REQUESTED


def test_describe_groups_answers_a_groups_authorized_operations_when_asked(secured: Secured) -> None:
    from kio.schema.describe_groups.v5.request import DescribeGroupsRequest

    secured.grant("User:alice", "group", "billing", "read")  # READ implies DESCRIBE
    with secured.connect() as s:
        assert _sasl(s, "alice", secured.keys["alice"]).error_code == ErrorCode.none
        asked = ask(s, 15, 5, DescribeGroupsRequest(groups=("billing", "payroll"), include_authorized_operations=True))
        unasked = ask(s, 15, 5, DescribeGroupsRequest(groups=("billing",), include_authorized_operations=False))
    assert sorted((g.group_id, g.error_code, g.authorized_operations) for g in asked.groups) == [
        ("billing", ErrorCode.none, _bits(READ, DESCRIBE)),
        ("payroll", ErrorCode.group_authorization_failed, NOT_REQUESTED)]
    assert [g.authorized_operations for g in unasked.groups] == [NOT_REQUESTED]


def test_without_authentication_every_operation_of_a_topic_and_of_the_cluster_is_authorized(kafka: Any) -> None:
    create_topic(kafka.client, "orders")
    with kafka.connect() as s:
        answer = _metadata_v10(s, "orders", topic_operations=True, cluster_operations=True)
    # As the HTTP door's authorized-operations answers: those a binding may name, ALL left out.
    assert [(t.name, t.topic_authorized_operations) for t in answer.topics] == [
        ("orders", _bits(READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS))]
    assert answer.cluster_authorized_operations == _bits(CREATE, CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS,
                                                         IDEMPOTENT_WRITE, ALTER, DESCRIBE)


def test_all_answers_kafkas_eight_operations_of_a_topic_and_seven_of_the_cluster(secured: Secured) -> None:
    # librdkafka's DescribeTopics and DescribeCluster ask them with Metadata.
    secured.grant("User:alice", "topic", "orders", "all")
    secured.grant("User:alice", "cluster", "outbox-cluster", "all")
    with secured.connect() as s:
        assert _sasl(s, "alice", secured.keys["alice"]).error_code == ErrorCode.none
        metadata = _metadata_v10(s, "orders", topic_operations=True, cluster_operations=True)
    assert [(t.name, t.topic_authorized_operations) for t in metadata.topics] == [
        ("orders", _bits(READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS))]
    assert metadata.cluster_authorized_operations == _bits(
        CREATE, CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE, ALTER, DESCRIBE)


def test_a_transactional_producer_without_write_on_its_transactional_id_is_refused(secured: Secured) -> None:
    w = secured
    w.grant("User:alice", "topic", "orders", "write")
    w.grant("User:alice", "transactional_id", "tx", "describe")  # FindCoordinator's: InitProducerId is reached
    before = _refusals("transactional_id", "write")
    p = Producer({**w.client_config("alice"), "transactional.id": "tx", "message.timeout.ms": 10_000})
    with pytest.raises(KafkaException) as e:
        p.init_transactions(TIMEOUT_S)
    assert e.value.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    assert _refusals("transactional_id", "write") == before + 1
    r = w.client.get("/v1/transactions/tx", headers=w.headers())
    assert r.status_code == 404, r.text


def test_find_coordinator_without_describe_on_the_transactional_id_is_refused(secured: Secured) -> None:
    from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest

    secured.grant("User:alice", "transactional_id", "tx", "describe")
    with secured.connect() as s:
        assert _sasl(s, "alice", secured.keys["alice"]).error_code == ErrorCode.none
        answer = ask(s, 10, 4, FindCoordinatorRequest(key_type=1, coordinator_keys=("tx", "other")))
    assert [(c.key, c.error_code) for c in answer.coordinators] == [
        ("tx", ErrorCode.none), ("other", ErrorCode.transactional_id_authorization_failed)]


def test_fetch_without_read_is_answered_topic_authorization_failed(secured: Secured) -> None:
    from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic

    w = secured
    r = w.client.post("/v1/records", headers=w.headers(), json={"batches": [
        {"topic": "orders", "partition": 0, "records": [{"value": 1}]}]})
    assert r.status_code == 200, r.text
    w.grant("User:alice", "topic", "orders", "describe")
    with w.connect() as s:
        assert _sasl(s, "alice", w.keys["alice"]).error_code == ErrorCode.none
        answer = ask(s, 1, 12, FetchRequest(
            replica_id=-1, max_wait=datetime.timedelta(0), min_bytes=0, max_bytes=100_000, isolation_level=0,
            session_id=0, session_epoch=-1, topics=(FetchTopic(topic="orders", partitions=(FetchPartition(
                partition=0, current_leader_epoch=-1, fetch_offset=0, last_fetched_epoch=-1, log_start_offset=-1,
                partition_max_bytes=100_000),)),), forgotten_topics_data=(), rack_id=""))
    (partition,) = answer.responses[0].partitions
    assert (partition.error_code, partition.records) == (ErrorCode.topic_authorization_failed, b"")


def test_a_listener_without_authentication_answers_a_sasl_handshake_illegal_sasl_state(kafka: Any) -> None:
    from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

    with kafka.connect() as s:
        answer = ask(s, 17, 1, SaslHandshakeRequest(mechanism="PLAIN"))
    assert answer.error_code == ErrorCode.illegal_sasl_state


def test_the_listener_speaks_tls_with_the_http_doors_certificate(secured_tls: Secured,
                                                                 certificate: tuple[Path, Path]) -> None:
    context = ssl.create_default_context(cafile=str(certificate[0]))
    with secured_tls.connect() as raw, context.wrap_socket(raw, server_hostname="127.0.0.1") as s:
        peer = x509.load_der_x509_certificate(s.getpeercert(binary_form=True))
        assert peer.subject.rfc4514_string() == "CN=outbox-test"
        answer = ask(s, 18, 3, _api_versions())  # type: ignore[arg-type]
        assert answer.error_code == ErrorCode.none


def test_the_transactional_apis_answer_each_missing_acl_with_its_code_and_change_nothing(secured: Secured) -> None:
    from kio.schema.add_offsets_to_txn.v3.request import AddOffsetsToTxnRequest
    from kio.schema.add_partitions_to_txn.v3.request import AddPartitionsToTxnRequest, AddPartitionsToTxnTopic
    from kio.schema.init_producer_id.v4.request import InitProducerIdRequest
    from kio.schema.txn_offset_commit.v3.request import (
        TxnOffsetCommitRequest,
        TxnOffsetCommitRequestPartition,
        TxnOffsetCommitRequestTopic,
    )

    w = secured
    w.grant("User:alice", "transactional_id", "tx", "write")
    w.grant("User:alice", "topic", "orders", "write")
    with w.connect() as s:
        assert _sasl(s, "alice", w.keys["alice"]).error_code == ErrorCode.none
        other = ask(s, 22, 4, InitProducerIdRequest(transactional_id="other", transaction_timeout=datetime.timedelta(
            seconds=60), producer_id=-1, producer_epoch=-1))
        assert other.error_code == ErrorCode.transactional_id_authorization_failed
        got = ask(s, 22, 4, InitProducerIdRequest(transactional_id="tx", transaction_timeout=datetime.timedelta(
            seconds=60), producer_id=-1, producer_epoch=-1))
        assert got.error_code == ErrorCode.none
        ident = {"producer_id": got.producer_id, "producer_epoch": got.producer_epoch}
        added = ask(s, 24, 3, AddPartitionsToTxnRequest(
            v3_and_below_transactional_id="tx", v3_and_below_producer_id=got.producer_id,
            v3_and_below_producer_epoch=got.producer_epoch, v3_and_below_topics=(
                AddPartitionsToTxnTopic(name="orders", partitions=(0,)),
                AddPartitionsToTxnTopic(name="audit", partitions=(0,)))))
        assert [(t.name, [p.partition_error_code for p in t.results_by_partition])
                for t in added.results_by_topic_v3_and_below] == [
            ("orders", [ErrorCode.operation_not_attempted]), ("audit", [ErrorCode.topic_authorization_failed])]
        offsets = ask(s, 25, 3, AddOffsetsToTxnRequest(transactional_id="tx", group_id="g", **ident))
        assert offsets.error_code == ErrorCode.group_authorization_failed
        staged = ask(s, 28, 3, TxnOffsetCommitRequest(
            transactional_id="tx", group_id="g", generation_id=-1, member_id="", group_instance_id=None,
            topics=(TxnOffsetCommitRequestTopic(name="orders", partitions=(TxnOffsetCommitRequestPartition(
                partition_index=0, committed_offset=1, committed_leader_epoch=-1, committed_metadata=None),)),),
            **ident))
        assert [p.error_code for t in staged.topics for p in t.partitions] == [ErrorCode.group_authorization_failed]
    described = w.client.get("/v1/transactions/tx", headers=w.headers()).json()
    assert (described["state"], described["partitions"]) == ("Empty", [])


def test_an_idempotent_producer_without_write_on_any_topic_is_refused_on_the_cluster(secured: Secured) -> None:
    from kio.schema.init_producer_id.v4.request import InitProducerIdRequest

    secured.grant("User:alice", "topic", "orders", "read")
    with secured.connect() as s:
        assert _sasl(s, "alice", secured.keys["alice"]).error_code == ErrorCode.none
        answer = ask(s, 22, 4, InitProducerIdRequest(transactional_id=None, transaction_timeout=datetime.timedelta(
            seconds=60), producer_id=-1, producer_epoch=-1))
    assert (answer.error_code, answer.producer_id) == (ErrorCode.cluster_authorization_failed, -1)


def test_a_listener_without_tls_warns_that_keys_cross_the_network_in_clear_text(
        secured: Secured, caplog: pytest.LogCaptureFixture) -> None:
    assert ("Kafka listener: SASL_PLAINTEXT: API keys cross the network in clear text; set OUTBOX_TLS_CERT_FILE "
            "to serve SASL_SSL") in [r.getMessage() for r in caplog.get_records("setup")]


def test_a_waiting_fetch_counts_its_refusal_once(secured: Secured) -> None:
    import threading

    from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic

    w = secured
    w.grant("User:alice", "topic", "orders", "read")
    before = _refusals("topic", "read")

    def topic(name: str) -> Any:
        return FetchTopic(topic=name, partitions=(FetchPartition(
            partition=0, current_leader_epoch=-1, fetch_offset=0, last_fetched_epoch=-1, log_start_offset=-1,
            partition_max_bytes=100_000),))

    def append() -> None:
        w.client.post("/v1/records", headers=w.headers(), json={"batches": [
            {"topic": "orders", "partition": 0, "records": [{"value": 1}]}]})

    with w.connect() as s:
        assert _sasl(s, "alice", w.keys["alice"]).error_code == ErrorCode.none
        # Woken by the append, the Fetch reads again, and asks about `audit` again.
        timer = threading.Timer(0.5, append)
        timer.start()
        answer = ask(s, 1, 12, FetchRequest(
            replica_id=-1, max_wait=datetime.timedelta(seconds=3), min_bytes=10**6, max_bytes=100_000,
            isolation_level=0, session_id=0, session_epoch=-1, topics=(topic("orders"), topic("audit")),
            forgotten_topics_data=(), rack_id=""))
        timer.join()
    assert [(t.topic, t.partitions[0].error_code) for t in answer.responses] == [
        ("orders", ErrorCode.none), ("audit", ErrorCode.topic_authorization_failed)]
    assert _refusals("topic", "read") == before + 1


# --- administration and consumer groups: the same ACLs ---------------------------------------


def test_create_topics_needs_create_on_the_cluster_or_the_topic(secured: Secured) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    w = secured
    w.grant("User:alice", "topic", "mine", "create")
    admin = AdminClient(w.client_config("alice"))
    futures = admin.create_topics([NewTopic("mine", 1, 1), NewTopic("theirs", 1, 1)])
    assert futures["mine"].result(TIMEOUT_S) is None
    with pytest.raises(KafkaException) as e:
        futures["theirs"].result(TIMEOUT_S)
    assert e.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    names = {t["name"] for t in w.client.get("/v1/topics", headers=w.headers()).json()["topics"]}
    assert "mine" in names and "theirs" not in names


def test_auto_create_topics_needs_create_on_the_cluster_or_the_topic(db_url: str, clock: Any) -> None:
    from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic

    for w in start_secured(db_url, clock, kafka_auto_create_topics=True):
        w.grant("User:alice", "topic", "mine", "describe", "create")
        w.grant("User:alice", "topic", "theirs", "describe")
        with w.connect() as s:
            assert _sasl(s, "alice", w.keys["alice"]).error_code == ErrorCode.none
            answer = ask(s, 3, 12, MetadataRequest(
                topics=tuple(MetadataRequestTopic(topic_id=None, name=n) for n in ("mine", "theirs")),
                allow_auto_topic_creation=True, include_topic_authorized_operations=False), correlation_id=9)
        assert [(t.name, t.error_code, len(t.partitions)) for t in answer.topics] == [
            ("mine", ErrorCode.none, 1), ("theirs", ErrorCode.unknown_topic_or_partition, 0)]
        names = {t["name"] for t in w.client.get("/v1/topics", headers=w.headers()).json()["topics"]}
        assert "mine" in names and "theirs" not in names


def test_delete_topics_and_alter_configs_without_acls_change_nothing(secured: Secured) -> None:
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

    w = secured
    w.grant("User:alice", "topic", "orders", "describe")
    admin = AdminClient(w.client_config("alice"))
    with pytest.raises(KafkaException) as e:
        admin.delete_topics(["orders"])["orders"].result(TIMEOUT_S)
    assert e.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    resource = ConfigResource(ConfigResource.Type.TOPIC, "orders", incremental_configs=[
        ConfigEntry("retention.ms", "1000", incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(KafkaException) as e:
        list(admin.incremental_alter_configs([resource]).values())[0].result(TIMEOUT_S)
    assert e.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    described = w.client.get("/v1/topics/orders", headers=w.headers()).json()
    assert described["config"]["retention_ms"] != 1000


def test_alter_configs_without_alter_configs_on_the_topic_is_refused_and_changes_nothing(secured: Secured) -> None:
    from kio.schema.alter_configs.v2.request import AlterableConfig, AlterConfigsRequest, AlterConfigsResource

    w = secured
    w.grant("User:alice", "topic", "orders", "describe", "alter")
    before = w.client.get("/v1/topics/orders", headers=w.headers()).json()["config"]
    with w.connect() as s:
        assert _sasl(s, "alice", w.keys["alice"]).error_code == ErrorCode.none
        answer = ask(s, 33, 2, AlterConfigsRequest(validate_only=False, resources=(AlterConfigsResource(
            resource_type=2, resource_name="orders", configs=(AlterableConfig(name="retention.ms", value="1000"),)),)))
    assert [(r.resource_name, r.error_code) for r in answer.responses] == [
        ("orders", ErrorCode.topic_authorization_failed)]
    assert w.client.get("/v1/topics/orders", headers=w.headers()).json()["config"] == before


def test_alter_configs_with_alter_configs_on_the_topic_alters_it(secured: Secured) -> None:
    from kio.schema.alter_configs.v2.request import AlterableConfig, AlterConfigsRequest, AlterConfigsResource

    w = secured
    w.grant("User:alice", "topic", "orders", "alter_configs")
    with w.connect() as s:
        assert _sasl(s, "alice", w.keys["alice"]).error_code == ErrorCode.none
        answer = ask(s, 33, 2, AlterConfigsRequest(validate_only=False, resources=(AlterConfigsResource(
            resource_type=2, resource_name="orders", configs=(AlterableConfig(name="retention.ms", value="1000"),)),)))
    assert [(r.resource_name, r.error_code) for r in answer.responses] == [("orders", ErrorCode.none)]
    assert w.client.get("/v1/topics/orders", headers=w.headers()).json()["config"]["retention_ms"] == 1000


def test_join_group_without_read_on_the_group_is_refused_and_joins_nothing(secured: Secured) -> None:
    from kio.schema.join_group.v7.request import JoinGroupRequest, JoinGroupRequestProtocol

    w = secured
    w.grant("User:alice", "topic", "orders", "read")
    with w.connect() as s:
        assert _sasl(s, "alice", w.keys["alice"]).error_code == ErrorCode.none
        answer = ask(s, 11, 7, JoinGroupRequest(
            group_id="billing", session_timeout=datetime.timedelta(seconds=10),
            rebalance_timeout=datetime.timedelta(seconds=10), member_id="", group_instance_id=None,
            protocol_type="consumer", protocols=(JoinGroupRequestProtocol(name="range", metadata=b""),)))
    assert answer.error_code == ErrorCode.group_authorization_failed
    r = w.client.get("/v1/groups/billing", headers=w.headers())
    assert r.status_code == 404 or r.json()["members"] == [], r.text


def test_list_transactions_shows_only_the_transactional_ids_the_principal_may_describe(secured: Secured) -> None:
    from kio.schema.list_transactions.v1.request import ListTransactionsRequest

    w = secured
    for tid in ("mine", "theirs"):
        r = w.client.post("/v1/producers", headers=w.headers(), json={"transactional_id": tid})
        assert r.status_code == 200, r.text
    w.grant("User:alice", "transactional_id", "mine", "describe")
    with w.connect() as s:
        assert _sasl(s, "alice", w.keys["alice"]).error_code == ErrorCode.none
        answer = ask(s, 66, 1, ListTransactionsRequest(state_filters=(), producer_id_filters=(), duration_filter=-1))
    assert [t.transactional_id for t in answer.transaction_states] == ["mine"]


def test_list_groups_walks_every_chunk_for_the_groups_the_principal_may_describe_and_logs_its_cap(
        secured: Secured, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """ListGroups cannot page: it walks every group id in chunks, the states filter and the ACLs
    applied per chunk, so that a group the principal may describe is found behind any number of
    others; only the matches are capped, and a cut answer is logged."""
    from kio.schema.list_groups.v4.request import ListGroupsRequest

    import app.kafka.groups as kafka_groups
    from app.services import group_service

    w = secured
    for g in ("a1", "a2", "a3", "a4", "a5", "zz-mine"):
        r = w.client.post(f"/v1/groups/{g}/offsets", headers=w.headers(),
                          json={"offsets": [{"topic": "orders", "partition": 0, "offset": 0}]})
        assert r.status_code < 300, r.text
    r = w.client.post("/v1/groups/b-web/members", headers=w.headers(), json={"topics": ["orders"]})
    assert r.status_code == 200, r.text  # a member: Stable, where the others are Empty
    w.grant("User:alice", "group", "zz-mine", "describe")
    w.grant("User:alice", "group", "b-web", "describe")
    # Chunks of two, and a page's bound of HTTP reached long before zz-mine: the door has none.
    monkeypatch.setattr(group_service, "GROUP_LIST_CHUNK", 2)
    monkeypatch.setattr(group_service, "GROUP_LIST_EXAMINED_MAX", 2)
    caplog.set_level(logging.WARNING, logger="app.kafka")

    def listed(*states: str) -> list[str]:
        with w.connect() as s:
            assert _sasl(s, "alice", w.keys["alice"]).error_code == ErrorCode.none
            answer = ask(s, 16, 4, ListGroupsRequest(states_filter=states))
        assert answer.error_code == ErrorCode.none
        return [g.group_id for g in answer.groups]

    def cut() -> list[str]:
        return [r.getMessage() for r in caplog.records if r.getMessage().startswith("ListGroups answered")]

    assert listed() == ["b-web", "zz-mine"]
    assert listed("empty") == ["zz-mine"]
    assert cut() == []

    monkeypatch.setattr(kafka_groups, "LIST_GROUPS_MAX", 1)
    # The states filter before the cap: b-web, first in id order, takes no place when filtered out.
    assert listed("Empty") == ["zz-mine"]
    assert cut() == []
    assert listed() == ["b-web"]
    (logged,) = cut()
    assert "first 1 matching group ids, up to 'b-web'; more match" in logged


def _open_transaction(w: Secured, tid: str, *writes: tuple[str, int]) -> None:
    """As admin over HTTP: `tid`'s transaction, open with one record in each (topic, partition)."""
    p = w.client.post("/v1/producers", headers=w.headers(), json={"transactional_id": tid})
    assert p.status_code == 200, p.text
    ident = {"producer_id": p.json()["producer_id"], "producer_epoch": p.json()["producer_epoch"]}
    r = w.client.post(f"/v1/transactions/{tid}/begin", headers=w.headers(), json=ident)
    assert r.status_code == 200, r.text
    r = w.client.post("/v1/records", headers=w.headers(), json={**ident, "transactional_id": tid, "batches": [
        {"topic": topic, "partition": partition, "base_sequence": 0, "records": [{"value": "in txn"}]}
        for topic, partition in writes]})
    assert r.status_code == 200, r.text


def test_describe_transactions_leaves_out_the_topics_the_principal_may_not_describe(secured: Secured) -> None:
    from kio.schema.describe_transactions.v0.request import DescribeTransactionsRequest

    w = secured
    r = w.client.post("/v1/topics", headers=w.headers(), json={"name": "secret", "partitions": 2})
    assert r.status_code == 201, r.text
    _open_transaction(w, "tx-secret", ("secret", 1), ("orders", 0))
    w.grant("User:bob", "transactional_id", "tx-secret", "describe")
    w.grant("User:bob", "topic", "orders", "describe")
    with w.connect() as s:
        assert _sasl(s, "bob", w.keys["bob"]).error_code == ErrorCode.none
        answer = ask(s, 65, 0, DescribeTransactionsRequest(transactional_ids=("tx-secret",)))
    (described,) = answer.transaction_states
    assert (described.error_code, described.transaction_state) == (ErrorCode.none, "Ongoing")
    assert [(t.topic, tuple(t.partitions)) for t in described.topics] == [("orders", (0,))]
    # The HTTP door's description of the same transaction to the same principal.
    http = w.client.get("/v1/transactions/tx-secret", headers=w.headers("bob")).json()
    assert [(p["topic"], p["partition"]) for p in http["partitions"]] == [("orders", 0)]


def test_delete_topics_refused_for_open_transactions_names_only_the_transactional_ids_the_principal_may_describe(
        secured: Secured) -> None:
    from kio.schema.delete_topics.v5.request import DeleteTopicsRequest

    w = secured
    _open_transaction(w, "tx-leak", ("orders", 0))
    _open_transaction(w, "tx-mine", ("orders", 0))
    w.grant("User:alice", "topic", "orders", "delete")
    w.grant("User:alice", "transactional_id", "tx-mine", "describe")
    with w.connect() as s:
        assert _sasl(s, "alice", w.keys["alice"]).error_code == ErrorCode.none
        answer = ask(s, 20, 5, DeleteTopicsRequest(topic_names=("orders",), timeout=datetime.timedelta(0)))
    assert [(t.name, t.error_code, t.error_message) for t in answer.responses] == [(
        "orders", ErrorCode.invalid_txn_state,
        "the topic is in unfinished transactions (tx-mine, 1 other(s)): wait for them to commit or abort, "
        "or have an operator abort them, then delete the topic")]
    # The HTTP door's refusal of the same deletion to the same principal.
    http = w.client.delete("/v1/topics/orders", headers=w.headers("alice")).json()
    assert (http["message"], http["details"]["transactional_ids"]) == (answer.responses[0].error_message, ["tx-mine"])


def _idempotent_producer(s: socket.socket, producer_id: int = -1, producer_epoch: int = -1) -> Any:
    """InitProducerId v4 without a transactional id (KIP-360's bump with an id and epoch)."""
    from kio.schema.init_producer_id.v4.request import InitProducerIdRequest

    return ask(s, 22, 4, InitProducerIdRequest(transactional_id=None, transaction_timeout=datetime.timedelta(
        seconds=60), producer_id=producer_id, producer_epoch=producer_epoch))


def _idempotent_produce(s: socket.socket, producer_id: int, value: bytes) -> tuple[ErrorCode, int]:
    """Produce v9 of one record to orders/0 at epoch 0 and sequence 0: (error code, base offset)."""
    from tests.kafka.test_wire import _partition_answer, _produce, _records

    p = _partition_answer(ask(s, 0, 9, _produce("orders", 0, _records(
        [value], producer_id=producer_id, producer_epoch=0, base_sequence=0))))
    return p.error_code, p.base_offset


@contextmanager
def _bob_and_alice(w: Secured) -> Iterator[tuple[socket.socket, socket.socket]]:
    """Two connections, bob's and alice's, each authenticated and allowed to write to orders."""
    for who in ("alice", "bob"):
        w.grant(f"User:{who}", "topic", "orders", "write")
    with w.connect() as bob, w.connect() as alice:
        assert _sasl(bob, "bob", w.keys["bob"]).error_code == ErrorCode.none
        assert _sasl(alice, "alice", w.keys["alice"]).error_code == ErrorCode.none
        yield bob, alice


def test_an_idempotent_producer_id_handed_to_one_principal_is_unknown_to_another_s_produce(secured: Secured) -> None:
    # Producer ids are small sequential numbers: held by nobody in particular, another principal
    # sent at its sequence 0 and the holder's own first batch was answered as its duplicate.
    w = secured
    with _bob_and_alice(w) as (bob, alice):
        init = _idempotent_producer(bob)
        assert init.error_code == ErrorCode.none
        assert _idempotent_produce(alice, init.producer_id, b'"alice"') == (ErrorCode.unknown_producer_id, -1)
        assert _idempotent_produce(bob, init.producer_id, b'"bob"') == (ErrorCode.none, 0)
    assert [r["value"] for r in w.stored()] == ["bob"]


def test_an_idempotent_producer_id_handed_to_one_principal_cannot_be_bumped_by_another(secured: Secured) -> None:
    w = secured
    with _bob_and_alice(w) as (bob, alice):
        init = _idempotent_producer(bob)
        stolen = _idempotent_producer(alice, init.producer_id, init.producer_epoch)
        bumped = _idempotent_producer(bob, init.producer_id, init.producer_epoch)
    assert (stolen.error_code, stolen.producer_id) == (ErrorCode.unknown_producer_id, -1)
    assert (bumped.error_code, bumped.producer_id, bumped.producer_epoch) == (
        ErrorCode.none, init.producer_id, init.producer_epoch + 1)


def test_an_idempotent_producer_id_handed_out_at_the_kafka_door_is_its_principal_s_at_the_http_door(
        secured: Secured) -> None:
    w = secured
    for who in ("alice", "bob"):
        w.grant(f"User:{who}", "topic", "orders", "write")
    with w.connect() as bob:
        assert _sasl(bob, "bob", w.keys["bob"]).error_code == ErrorCode.none
        init = _idempotent_producer(bob)

    def send(who: str) -> Any:
        return w.client.post("/v1/records", headers=w.headers(who), json={
            "producer_id": init.producer_id, "producer_epoch": 0,
            "batches": [{"topic": "orders", "partition": 0, "base_sequence": 0, "records": [{"value": who}]}]})

    other, own = send("alice"), send("bob")
    assert (other.status_code, other.json()["error_code"]) == (409, "UNKNOWN_PRODUCER_ID")
    assert (own.status_code, own.json()["results"][0]["base_offset"]) == (200, 0)


def test_without_authentication_an_idempotent_producer_id_of_the_kafka_door_is_the_anonymous_caller_s(
        kafka: Any) -> None:
    # As over HTTP with authentication off: every caller is User:ANONYMOUS, one holder.
    create_topic(kafka.client, "orders")
    with kafka.connect() as s:
        init = _idempotent_producer(s)
        assert _idempotent_produce(s, init.producer_id, b'"a"') == (ErrorCode.none, 0)
    sent = kafka.client.post("/v1/records", json={"producer_id": init.producer_id, "producer_epoch": 0, "batches": [
        {"topic": "orders", "partition": 0, "base_sequence": 1, "records": [{"value": "b"}]}]})
    assert (sent.status_code, sent.json()["results"][0]["base_offset"]) == (200, 1)


def test_find_coordinator_version_0_is_held_to_describe_on_the_group(secured: Secured) -> None:
    from kio.schema.find_coordinator.v0.request import FindCoordinatorRequest

    secured.grant("User:alice", "group", "g", "describe")
    with secured.connect() as s:
        assert _sasl(s, "alice", secured.keys["alice"]).error_code == ErrorCode.none
        allowed = ask(s, 10, 0, FindCoordinatorRequest(key="g"))
        refused = ask(s, 10, 0, FindCoordinatorRequest(key="other"), correlation_id=8)
    assert (allowed.error_code, allowed.port) == (ErrorCode.none, secured.port)
    assert refused.error_code == ErrorCode.group_authorization_failed


def test_offset_fetch_version_1_without_describe_on_the_group_answers_it_in_every_partition(secured: Secured) -> None:
    # Version 1 has no field for the group's error: Kafka answers it in each partition asked for.
    from kio.schema.offset_fetch.v1.request import OffsetFetchRequest, OffsetFetchRequestTopic

    secured.grant("User:alice", "topic", "orders", "describe")
    with secured.connect() as s:
        assert _sasl(s, "alice", secured.keys["alice"]).error_code == ErrorCode.none
        answer = ask(s, 9, 1, OffsetFetchRequest(group_id="g", topics=(
            OffsetFetchRequestTopic(name="orders", partition_indexes=(0, 1)),)))
    assert [(t.name, p.partition_index, p.committed_offset, p.error_code) for t in answer.topics
            for p in t.partitions] == [("orders", 0, -1, ErrorCode.group_authorization_failed),
                                       ("orders", 1, -1, ErrorCode.group_authorization_failed)]
