"""A Send's answer, exactly: the route writes it as JSON itself (app.api.routers.records), so
these hold it to SendResponse, the model openapi.yaml documents."""

from __future__ import annotations

from typing import Any

from app.api.schemas.records import SendResponse
from tests.helpers import batch, begin, create_topic, init_producer, send


def _answer(response: Any) -> dict[str, Any]:
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/json"
    body: dict[str, Any] = response.json()
    assert SendResponse.model_validate(body).model_dump(exclude_none=True) == body
    return body


def test_a_plain_send_answers_each_batchs_offsets_and_no_transaction(client: Any) -> None:
    create_topic(client, "orders", partitions=2)
    send(client, [batch("orders", 1, ["x"])])
    answer = _answer(send(client, [batch("orders", 0, [1, 2, 3]), batch("orders", 1, ["a", "b"])]))
    assert answer == {"results": [
        {"topic": "orders", "partition": 0, "base_offset": 0, "last_offset": 2, "record_count": 3,
         "duplicate": False},
        {"topic": "orders", "partition": 1, "base_offset": 1, "last_offset": 2, "record_count": 2,
         "duplicate": False},
    ]}


def test_a_retried_idempotent_send_answers_its_first_offsets_as_a_duplicate(client: Any) -> None:
    create_topic(client, "orders")
    producer = init_producer(client)
    first = _answer(send(client, [batch("orders", 0, [1, 2], base_sequence=0)], producer))
    again = _answer(send(client, [batch("orders", 0, [1, 2], base_sequence=0)], producer))
    assert first["results"] == [{"topic": "orders", "partition": 0, "base_offset": 0, "last_offset": 1,
                                 "record_count": 2, "duplicate": False}]
    assert again == {"results": [{"topic": "orders", "partition": 0, "base_offset": 0, "last_offset": 1,
                                  "record_count": 2, "duplicate": True}]}


def test_a_transactional_send_answers_the_transaction_it_joined(client: Any) -> None:
    create_topic(client, "orders")
    producer = init_producer(client, "tx-answer")
    begun = begin(client, "tx-answer", producer)
    answer = _answer(send(client, [batch("orders", 0, ["a"], base_sequence=0)], producer, tid="tx-answer"))
    assert answer["txn_id"] == begun["txn_id"]
    assert answer["results"] == [{"topic": "orders", "partition": 0, "base_offset": 0, "last_offset": 0,
                                  "record_count": 1, "duplicate": False}]
