"""Guarantee 16 at the Kafka door with SASL SCRAM-SHA-256 and SCRAM-SHA-512: the user name the
principal's, the password one of its API keys, as with SASL/PLAIN (tests/kafka/test_security.py,
whose service with keys and a listener, tests/kafka/secured.py, this shares), on both databases. Real clients
(confluent-kafka's librdkafka, kafka-python, aiokafka) produce and consume; the wire (kio, with scramp's
client for the SCRAM messages) shows the exact refusals."""

from __future__ import annotations

import asyncio
import base64
import struct
import time
from typing import Any

import pytest
from confluent_kafka import KafkaError, Producer
from kio.schema.errors import ErrorCode
from sqlalchemy import update

from app.domain.scram import NO_MATCH
from app.storage.tables import api_keys
from tests.kafka.conftest import ask, closed, frame, read_frame
from tests.kafka.secured import Secured
from tests.kafka.test_security import MECHANISMS, TIMEOUT_S, _consume, _failures, _sasl, kafka_python_round_trip

pytestmark = pytest.mark.usefixtures("cheap_scrypt")  # PLAIN's scrypt; SCRAM's PBKDF2 is not changed

SCRAM = ["SCRAM-SHA-256", "SCRAM-SHA-512"]


def _config(w: Secured, who: str, mechanism: str, key: str | None = None) -> dict[str, Any]:
    return {**w.client_config(who, key), "sasl.mechanism": mechanism}


def _handshake(s: Any, mechanism: str) -> None:
    from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

    assert ask(s, 17, 1, SaslHandshakeRequest(mechanism=mechanism)).error_code == ErrorCode.none


def _authenticate(s: Any, token: bytes, correlation_id: int) -> Any:
    from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest

    return ask(s, 36, 2, SaslAuthenticateRequest(auth_bytes=token), correlation_id=correlation_id)


def _scram(s: Any, mechanism: str, user: str, key: str) -> tuple[Any, Any]:
    """A whole SCRAM exchange with scramp's client over SaslHandshake v1 and SaslAuthenticate
    v2: (the answer to client-first, the answer to client-final, or None if the first failed)."""
    from scramp import ScramClient

    _handshake(s, mechanism)
    client = ScramClient([mechanism], user, key)
    first = _authenticate(s, client.get_client_first().encode(), 8)
    if first.error_code != ErrorCode.none:
        return first, None
    client.set_server_first(first.auth_bytes.decode())
    final = _authenticate(s, client.get_client_final().encode(), 9)
    if final.error_code == ErrorCode.none:
        client.set_server_final(final.auth_bytes.decode())  # raises unless the server knew the key
    return first, final


# --- real clients --------------------------------------------------------------------------


@pytest.mark.parametrize("mechanism", SCRAM)
def test_confluent_kafka_with_scram_produces_and_consumes_over_sasl_ssl(secured_tls: Secured, mechanism: str) -> None:
    from confluent_kafka import Producer

    w = secured_tls
    w.grant("User:alice", "topic", "orders", "write", "read")
    p = Producer({**_config(w, "alice", mechanism), "linger.ms": 0, "message.timeout.ms": 10_000})
    reports: list[Any] = []
    for n in (1, 2):
        p.produce("orders", value=f'{{"n": {n}}}'.encode(), key=b"k", partition=0,
                  on_delivery=lambda err, msg: reports.append((err, msg.offset())))
    assert p.flush(TIMEOUT_S) == 0
    assert reports == [(None, 0), (None, 1)]
    got = _consume(_config(w, "alice", mechanism), "orders", 2)
    assert [(m.offset(), m.key(), m.value()) for m in got] == [(0, b"k", b'{"n": 1}'), (1, b"k", b'{"n": 2}')]
    assert [(r["offset"], r["value"]) for r in w.stored()] == [(0, {"n": 1}), (1, {"n": 2})]


@pytest.mark.parametrize("mechanism", SCRAM)
def test_kafka_python_with_scram_produces_and_consumes(secured: Secured, mechanism: str) -> None:
    assert kafka_python_round_trip(secured, mechanism) == (0, [(0, b"k", b'"v"')])


async def _aiokafka_produce_and_consume(sasl: dict[str, Any]) -> tuple[int, list[tuple[int, bytes, bytes]]]:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

    producer = AIOKafkaProducer(request_timeout_ms=10_000, **sasl)
    await producer.start()
    try:
        offset = (await producer.send_and_wait("orders", value=b'"v"', key=b"k", partition=0)).offset
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(enable_auto_commit=False, **sasl)
    await consumer.start()
    try:
        tp = TopicPartition("orders", 0)
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        m = await asyncio.wait_for(consumer.getone(), TIMEOUT_S)
    finally:
        await consumer.stop()
    return offset, [(m.offset, m.key, m.value)]


@pytest.mark.parametrize("mechanism", SCRAM)
def test_aiokafka_with_scram_produces_and_consumes(secured: Secured, mechanism: str) -> None:
    secured.grant("User:bob", "topic", "orders", "write", "read")
    sasl = {"bootstrap_servers": secured.bootstrap, "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": mechanism, "sasl_plain_username": "bob", "sasl_plain_password": secured.keys["bob"]}
    assert asyncio.run(_aiokafka_produce_and_consume(sasl)) == (0, [(0, b"k", b'"v"')])


def test_confluent_kafka_with_a_wrong_key_over_scram_fails_with_the_authentication_error(secured: Secured) -> None:
    errors: list[Any] = []
    before = _failures()
    p = Producer({**_config(secured, "alice", "SCRAM-SHA-512", secured.keys["bob"]), "error_cb": errors.append,
                  "message.timeout.ms": 5_000})
    p.produce("orders", value=b"1", partition=0)
    p.flush(6)
    assert KafkaError._AUTHENTICATION in [e.code() for e in errors]
    assert _failures() > before
    assert secured.stored() == []


def test_a_principal_authenticated_with_scram_is_held_to_its_acls(secured: Secured) -> None:
    w = secured
    w.grant("User:alice", "topic", "orders", "read")
    p = Producer({**_config(w, "alice", "SCRAM-SHA-256"), "linger.ms": 0, "message.timeout.ms": 10_000,
                  "retries": 0})
    reports: list[Any] = []
    p.produce("orders", value=b"1", partition=0, on_delivery=lambda err, msg: reports.append(err and err.code()))
    p.flush(TIMEOUT_S)
    assert reports == [KafkaError.TOPIC_AUTHORIZATION_FAILED]
    assert w.stored() == []


# --- the wire ------------------------------------------------------------------------------


@pytest.mark.parametrize("mechanism", SCRAM)
def test_scram_authenticates_in_two_rounds_and_the_principal_reads_what_its_acls_allow(
        secured: Secured, mechanism: str) -> None:
    from kio.schema.metadata.v12.request import MetadataRequest

    secured.grant("User:alice", "topic", "orders", "describe")
    with secured.connect() as s:
        first, final = _scram(s, mechanism, "alice", secured.keys["alice"])
        assert (first.error_code, final.error_code, final.error_message) == (ErrorCode.none, ErrorCode.none, None)
        assert final.auth_bytes.startswith(b"v=")
        answer = ask(s, 3, 12, MetadataRequest(topics=None, allow_auto_topic_creation=False,
                                                include_topic_authorized_operations=False))
        assert [t.name for t in answer.topics] == ["orders"]


def test_a_wrong_key_is_refused_at_the_proof_and_the_connection_closed(
        secured: Secured, caplog: pytest.LogCaptureFixture) -> None:
    before = _failures()
    wrong = secured.keys["alice"][:-4] + "AAAA"
    with secured.connect() as s:
        first, final = _scram(s, "SCRAM-SHA-256", "alice", wrong)
        assert first.error_code == ErrorCode.none
        assert (final.error_code, final.error_message) == (ErrorCode.sasl_authentication_failed,
                                                           f"authentication failed: {NO_MATCH}")
        assert closed(s)
    assert _failures() == before + 1
    assert wrong not in caplog.text and wrong[-20:] not in caplog.text


def test_another_principals_key_is_refused(secured: Secured) -> None:
    with secured.connect() as s:
        _, final = _scram(s, "SCRAM-SHA-256", "bob", secured.keys["alice"])
        assert (final.error_code, final.error_message) == (ErrorCode.sasl_authentication_failed,
                                                           f"authentication failed: {NO_MATCH}")
        assert closed(s)


def _server_first(w: Secured, user: str) -> tuple[bytes, int]:
    """The salt and iteration count the listener answers a client-first of `user` with."""
    with w.connect() as s:
        _handshake(s, "SCRAM-SHA-256")
        answer = _authenticate(s, f"n,,n={user},r=clientnonce".encode(), 8)
    assert answer.error_code == ErrorCode.none
    r, salt, i = answer.auth_bytes.decode().split(",")
    assert r.startswith("r=clientnonce") and len(r) > len("r=clientnonce")
    return base64.b64decode(salt[2:]), int(i[2:])


def test_an_unknown_user_gets_a_salt_as_a_known_one_does_and_is_refused_as_a_wrong_key_is(secured: Secured) -> None:
    salt, iterations = _server_first(secured, "mallory")
    assert (len(salt), iterations) == (16, 4096)
    assert _server_first(secured, "mallory") == (salt, iterations)  # the same at every try
    assert _server_first(secured, "alice")[0] != salt
    with secured.connect() as s:
        _, final = _scram(s, "SCRAM-SHA-256", "mallory", secured.keys["alice"])
        assert (final.error_code, final.error_message) == (ErrorCode.sasl_authentication_failed,
                                                           f"authentication failed: {NO_MATCH}")


def _as_before_0024(w: Secured, principal: str) -> None:
    """The principal's keys as migration 0024 leaves those created before it: no SCRAM credentials."""
    with w.client.app.state.services.db.write() as conn:
        conn.execute(update(api_keys).where(api_keys.c.principal == principal).values(
            scram_salt=None, scram_iterations=None, scram_sha_256_stored_key=None, scram_sha_256_server_key=None,
            scram_sha_512_stored_key=None, scram_sha_512_server_key=None))
    w.client.app.state.security.reload(unless_unchanged=False)


def test_a_key_without_scram_credentials_is_refused_naming_the_fix_and_still_authenticates_with_plain(
        secured: Secured) -> None:
    _as_before_0024(secured, "User:alice")
    with secured.connect() as s:
        _, final = _scram(s, "SCRAM-SHA-512", "alice", secured.keys["alice"])
        assert (final.error_code, final.error_message) == (ErrorCode.sasl_authentication_failed,
                                                           f"authentication failed: {NO_MATCH}")
        assert closed(s)
    assert "create a new key" in NO_MATCH
    with secured.connect() as s:
        _handshake(s, "PLAIN")
        plain = _authenticate(s, f"\0alice\0{secured.keys['alice']}".encode(), 8)
        assert (plain.error_code, plain.error_message) == (ErrorCode.none, None)


def test_the_principals_listing_tells_which_keys_have_scram_credentials(secured: Secured) -> None:
    _as_before_0024(secured, "User:alice")
    r = secured.client.get("/v1/principals", headers=secured.headers())
    assert r.status_code == 200, r.text
    assert {p["principal"]: [k["scram_credentials"] for k in p["api_keys"]] for p in r.json()["principals"]} == {
        "User:admin": [True], "User:alice": [False], "User:bob": [True]}


def test_a_second_key_of_the_principal_authenticates_too(secured: Secured) -> None:
    second = secured.client.app.state.services.security.create_api_key("alice", by="test").api_key
    for key in (secured.keys["alice"], second):
        with secured.connect() as s:
            _, final = _scram(s, "SCRAM-SHA-256", "alice", key)
            assert (final.error_code, final.error_message) == (ErrorCode.none, None)


@pytest.mark.parametrize("token", [b"", b"garbage", b"n,,n=alice", b"\xff\xfe\xfd",
                                   b"n,,n=alice,r=abc,tokenauth=true", b"p=tls-unique,,n=alice,r=abc"])
def test_a_client_first_message_that_cannot_be_served_is_refused_and_the_connection_closed(
        secured: Secured, token: bytes) -> None:
    before = _failures()
    with secured.connect() as s:
        _handshake(s, "SCRAM-SHA-256")
        answer = _authenticate(s, token, 8)
        assert answer.error_code == ErrorCode.sasl_authentication_failed
        assert answer.error_message.startswith("authentication failed: ")
        assert closed(s)
    assert _failures() == before + 1


def test_a_client_final_message_with_another_nonce_is_refused_and_the_connection_closed(secured: Secured) -> None:
    with secured.connect() as s:
        _handshake(s, "SCRAM-SHA-256")
        first = _authenticate(s, b"n,,n=alice,r=clientnonce", 8)
        assert first.error_code == ErrorCode.none
        final = _authenticate(s, b"c=biws,r=clientnonceX,p=" + base64.b64encode(b"x" * 32), 9)
        assert (final.error_code, final.error_message) == (
            ErrorCode.sasl_authentication_failed,
            "authentication failed: the SCRAM client-final nonce is not the one the server sent (librdkafka before "
            "2.6.1 sends it twice: upgrade the client, or use PLAIN over TLS)")
        assert closed(s)


def test_a_request_between_the_two_rounds_closes_the_connection(secured: Secured) -> None:
    from kio.schema.metadata.v12.request import MetadataRequest

    with secured.connect() as s:
        _handshake(s, "SCRAM-SHA-256")
        assert _authenticate(s, b"n,,n=alice,r=clientnonce", 8).error_code == ErrorCode.none
        s.sendall(frame(3, 12, MetadataRequest(topics=None, allow_auto_topic_creation=False,
                                               include_topic_authorized_operations=False)))
        assert closed(s)


def test_after_a_version_0_handshake_the_bare_scram_tokens_authenticate(secured: Secured) -> None:
    from kio.schema.metadata.v12.request import MetadataRequest
    from kio.schema.sasl_handshake.v0.request import SaslHandshakeRequest
    from scramp import ScramClient

    secured.grant("User:alice", "topic", "orders", "describe")
    client = ScramClient(["SCRAM-SHA-512"], "alice", secured.keys["alice"])
    with secured.connect() as s:
        assert ask(s, 17, 0, SaslHandshakeRequest(mechanism="SCRAM-SHA-512")).error_code == ErrorCode.none
        for send, receive in ((client.get_client_first, client.set_server_first),
                              (client.get_client_final, client.set_server_final)):
            token = send().encode()
            s.sendall(struct.pack(">i", len(token)) + token)
            answer = read_frame(s)
            assert answer is not None
            receive(answer.decode())
        answer = ask(s, 3, 12, MetadataRequest(topics=None, allow_auto_topic_creation=False,
                                                include_topic_authorized_operations=False))
        assert [t.name for t in answer.topics] == ["orders"]


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_a_connection_whose_key_is_revoked_is_closed_at_its_next_request(secured: Secured, mechanism: str) -> None:
    from kio.schema.metadata.v12.request import MetadataRequest

    w = secured
    w.grant("User:alice", "topic", "orders", "describe")
    metadata = MetadataRequest(topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False)
    key_id = w.keys["alice"].split("_")[1]
    with w.connect() as s:
        if mechanism == "PLAIN":
            assert _sasl(s, "alice", w.keys["alice"]).error_code == ErrorCode.none
        else:
            assert _scram(s, mechanism, "alice", w.keys["alice"])[1].error_code == ErrorCode.none
        assert [t.name for t in ask(s, 3, 12, metadata).topics] == ["orders"]
        r = w.client.delete(f"/v1/principals/User:alice/api-keys/{key_id}", headers=w.headers())
        assert r.status_code < 300, r.text
        s.sendall(frame(3, 12, metadata))
        assert closed(s)


@pytest.mark.parametrize("mechanism", SCRAM)
def test_a_failed_proof_delays_that_clients_next_exchange_for_the_principal_as_plain_does(
        secured: Secured, mechanism: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("app.services.security._FAILED_KEY_DELAY_S", 0.5)
    w = secured
    for user in ("alice", "mallory"):  # a principal, and a name that is none: alike
        with w.connect() as s:
            assert _scram(s, mechanism, user, w.keys["bob"])[1].error_code == ErrorCode.sasl_authentication_failed
        with w.connect() as s:  # at once, even with the right key: refused at the first message
            first, final = _scram(s, mechanism, user, w.keys.get(user, w.keys["bob"]))
            assert (first.error_code, final) == (ErrorCode.sasl_authentication_failed, None)
            assert "a moment ago" in first.error_message
    with w.connect() as s:  # another principal from the same client is not held back
        assert _scram(s, mechanism, "bob", w.keys["bob"])[1].error_code == ErrorCode.none
    time.sleep(0.6)
    with w.connect() as s:
        assert _scram(s, mechanism, "alice", w.keys["alice"])[1].error_code == ErrorCode.none
