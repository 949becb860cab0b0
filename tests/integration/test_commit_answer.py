"""A Commit's answer, exactly: the route writes it as JSON itself (app.api.routers.transactions),
so these hold it to CommitResponse, the model openapi.yaml documents, as FastAPI would have
written it (`results` only when the Commit carried batches)."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient

from app.api.app import create_app
from app.api.schemas.transactions import CommitResponse
from tests.helpers import batch, begin, create_topic, ident, init_producer, send


def _answer(response: Any) -> dict[str, Any]:
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/json"
    body: dict[str, Any] = response.json()
    assert CommitResponse.model_validate(body).model_dump(mode="json", exclude_unset=True) == body
    return body


def _commit(client: Any, tid: str, producer: dict, **extra: Any) -> Any:
    return client.post(f"/v1/transactions/{tid}/commit", json={**ident(producer), **extra})


def test_a_commit_left_to_the_worker_answers_its_partitions_and_staged_offsets(settings: Any, clock: Any) -> None:
    with TestClient(create_app(settings.model_copy(update={"complete_inline": False}), clock)) as client:
        create_topic(client, "orders", partitions=2)
        producer = init_producer(client, "tx-answer")
        begun = begin(client, "tx-answer", producer)
        send(client, [batch("orders", 1, ["a", "b"], base_sequence=0)], producer, tid="tx-answer")
        staged = client.post("/v1/transactions/tx-answer/offsets", json={
            **ident(producer), "group_id": "g", "offsets": [{"topic": "orders", "partition": 0, "offset": 7}]})
        assert staged.status_code == 200, staged.text

        answer = _answer(_commit(client, "tx-answer", producer))

    assert "results" not in answer
    assert (answer["state"], answer["txn_id"], answer["producer_id"], answer["producer_epoch"],
            answer["transaction_version"]) == ("PrepareCommit", begun["txn_id"], producer["producer_id"],
                                               producer["producer_epoch"], 1)
    assert [(p["topic"], p["partition"], p["first_offset"]) for p in answer["partitions"]] == [("orders", 1, 0)]
    assert [(o["group_id"], o["topic"], o["partition"], o["offset"]) for o in answer["pending_offsets"]] == [
        ("g", "orders", 0, 7)]


def test_a_commit_carrying_batches_answers_each_batchs_offsets_and_the_next_epoch(client: Any) -> None:
    create_topic(client, "orders", partitions=2)
    producer = init_producer(client, "tx-answer", transaction_version=2)
    send(client, [batch("orders", 0, ["x"], base_sequence=0)], producer, tid="tx-answer")

    answer = _answer(_commit(client, "tx-answer", producer, batches=[
        batch("orders", 0, [1, 2, 3], base_sequence=1), batch("orders", 1, ["a"], base_sequence=0)]))

    assert (answer["state"], answer["producer_epoch"], answer["partitions"], answer["pending_offsets"]) == (
        "CompleteCommit", producer["producer_epoch"] + 1, [], [])
    assert answer["results"] == [
        {"topic": "orders", "partition": 0, "base_offset": 1, "last_offset": 3, "record_count": 3,
         "duplicate": False},
        {"topic": "orders", "partition": 1, "base_offset": 0, "last_offset": 0, "record_count": 1,
         "duplicate": False},
    ]


def test_a_commit_carrying_nothing_answers_no_results(client: Any) -> None:
    create_topic(client, "orders")
    producer = init_producer(client, "tx-answer", transaction_version=2)
    send(client, [batch("orders", 0, ["x"], base_sequence=0)], producer, tid="tx-answer")

    answer = _answer(_commit(client, "tx-answer", producer))

    assert "results" not in answer
    assert (answer["state"], answer["producer_epoch"]) == ("CompleteCommit", producer["producer_epoch"] + 1)
