"""The Kafka door is counted and logged as the HTTP door is: outbox_kafka_requests and
outbox_kafka_request_duration_seconds by API, outbox_kafka_errors by API and Kafka's error name,
open connections and why they closed; and one access log line per request (OUTBOX_ACCESS_LOG).
Counters are process-wide, so each test reads what its own requests added."""

from __future__ import annotations

import logging
import struct
import time
from collections.abc import Callable

import pytest
from kio.schema.errors import ErrorCode
from prometheus_client import REGISTRY

from app.kafka.protocol import request_class
from app.logs import ACCESS_LOGGER
from tests.helpers import create_topic
from tests.kafka.conftest import Listener, ask, closed, frame, join_group_v8, listener_with
from tests.kafka.test_wire import _produce, _records

pytestmark = pytest.mark.kafka


def _sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def _added(name: str, **labels: str) -> Callable[[], float]:
    """How much the sample has grown since this was called."""
    before = _sample(name, **labels)
    return lambda: _sample(name, **labels) - before


def _api_versions(s: object, correlation_id: int = 7) -> None:
    m = request_class(18, 3)
    assert m is not None
    assert ask(s, 18, 3, m(client_software_name="t", client_software_version="1"), correlation_id).error_code \
        == ErrorCode.none  # type: ignore[arg-type]


def test_each_request_is_counted_and_timed_by_api(kafka: Listener) -> None:
    create_topic(kafka.client, "orders")
    produces = _added("outbox_kafka_requests_total", api="Produce")
    timed = _added("outbox_kafka_request_duration_seconds_count", api="Produce")
    versions = _added("outbox_kafka_requests_total", api="ApiVersions")
    with kafka.connect() as s:
        _api_versions(s)
        for _ in range(3):
            ask(s, 0, 9, _produce("orders", 0, _records([b'"a"'])))
    assert (produces(), timed(), versions()) == (3, 3, 1)


def test_error_codes_in_answers_are_counted_by_api_and_kafka_name(kafka: Listener) -> None:
    create_topic(kafka.client, "orders")
    unknown = _added("outbox_kafka_errors_total", api="Produce", error="UNKNOWN_TOPIC_OR_PARTITION")
    invalid = _added("outbox_kafka_errors_total", api="Produce", error="INVALID_RECORD")
    with kafka.connect() as s:
        ask(s, 0, 9, _produce("orders", 3, _records([b'"a"'])))
        ask(s, 0, 9, _produce("orders", 0, _records([b"not json"])))
        ask(s, 0, 9, _produce("orders", 0, _records([b'"fine"'])))
    assert (unknown(), invalid()) == (1, 1)


def test_a_version_not_served_is_counted_as_unsupported(kafka: Listener) -> None:
    unsupported = _added("outbox_kafka_requests_total", api="unsupported")
    with kafka.connect() as s:
        s.sendall(frame(11, 8, join_group_v8()))
        assert closed(s)
    assert unsupported() == 1


def test_open_connections_are_a_gauge_and_closed_ones_counted_by_reason(kafka: Listener) -> None:
    too_large = _added("outbox_kafka_connections_closed_total", reason="too_large")
    by_client = _added("outbox_kafka_connections_closed_total", reason="client")
    opened = _sample("outbox_kafka_connections")
    with kafka.connect() as s:
        _api_versions(s)  # answered: the connection is open by now
        assert _sample("outbox_kafka_connections") == opened + 1
        s.sendall(struct.pack(">i", kafka.services.settings.kafka_socket_request_max_bytes + 1))
        assert closed(s)
    with kafka.connect() as s:
        _api_versions(s)
    _eventually(lambda: too_large() == 1 and by_client() == 1 and _sample("outbox_kafka_connections") == opened)


def test_each_request_has_an_access_log_line(kafka: Listener, caplog: pytest.LogCaptureFixture) -> None:
    create_topic(kafka.client, "orders")
    caplog.set_level(logging.INFO, logger=ACCESS_LOGGER)
    with kafka.connect() as s:
        ask(s, 0, 9, _produce("orders", 5, _records([b'"a"'])), correlation_id=41)
    (line,) = [r for r in caplog.records if r.name == ACCESS_LOGGER and getattr(r, "door", None) == "kafka"]
    assert (line.api, line.api_version, line.errors, line.principal, line.client_id, line.correlation_id) == (
        "Produce", 9, "UNKNOWN_TOPIC_OR_PARTITION", "User:ANONYMOUS", "test", 41)
    assert line.getMessage().startswith("kafka Produce v9 ")


def test_an_answer_s_error_message_ends_its_access_log_line(kafka: Listener, caplog: pytest.LogCaptureFixture) -> None:
    # Kafka's clients show the code alone ("Broker failed to validate record"): the reason is here.
    create_topic(kafka.client, "orders")
    caplog.set_level(logging.INFO, logger=ACCESS_LOGGER)
    with kafka.connect() as s:
        ask(s, 0, 9, _produce("orders", 0, _records([b"hello"])), correlation_id=42)
    (line,) = [r for r in caplog.records if r.name == ACCESS_LOGGER and getattr(r, "door", None) == "kafka"]
    said = ("record 0 of orders/0: a json topic's value must be JSON: unexpected character, expected a JSON "
            "value: line 1 column 1 (char 0)")
    assert (line.errors, line.error_message) == ("INVALID_RECORD", said)
    assert line.getMessage().endswith(f" correlation_id=42 error_message={said}")


@pytest.mark.parametrize("version", [3, 7])
def test_the_reason_ends_the_access_log_line_of_an_answer_whose_version_has_no_message_field(
        kafka: Listener, caplog: pytest.LogCaptureFixture, version: int) -> None:
    # A Produce answer carries an error message from version 8 on; kcat speaks 7. The reason
    # was then in neither the answer nor the log.
    create_topic(kafka.client, "orders")
    caplog.set_level(logging.INFO, logger=ACCESS_LOGGER)
    with kafka.connect() as s:
        answer = ask(s, 0, version, _produce("orders", 0, _records([b"hello"]), version=version), correlation_id=7)
    assert not hasattr(answer.responses[0].partition_responses[0], "error_message")
    (line,) = [r for r in caplog.records if r.name == ACCESS_LOGGER and getattr(r, "door", None) == "kafka"]
    said = ("record 0 of orders/0: a json topic's value must be JSON: unexpected character, expected a JSON "
            "value: line 1 column 1 (char 0)")
    assert (line.errors, line.error_message) == ("INVALID_RECORD", said)
    assert line.getMessage().endswith(f" correlation_id=7 error_message={said}")


def test_a_request_answered_without_error_ends_its_access_log_line_with_no_message(
        kafka: Listener, caplog: pytest.LogCaptureFixture) -> None:
    create_topic(kafka.client, "orders")
    caplog.set_level(logging.INFO, logger=ACCESS_LOGGER)
    with kafka.connect() as s:
        ask(s, 0, 7, _produce("orders", 0, _records([b"1"]), version=7), correlation_id=8)
    (line,) = [r for r in caplog.records if r.name == ACCESS_LOGGER and getattr(r, "door", None) == "kafka"]
    assert (line.errors, line.error_message) == ("none", None)
    assert line.getMessage().endswith(" correlation_id=8")


def test_no_access_log_line_when_the_access_log_is_off(kafka: Listener, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=ACCESS_LOGGER)
    with listener_with(kafka, access_log=False) as quiet, quiet.connect() as s:
        _api_versions(s)
    assert [r for r in caplog.records if r.name == ACCESS_LOGGER] == []


def _eventually(check: Callable[[], bool], timeout_s: float = 5.0) -> None:
    """The listener counts a closed connection when its task ends, a moment after the client
    sees it closed."""
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "not within the timeout"
        time.sleep(0.02)
