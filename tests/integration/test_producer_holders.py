"""A producer id without a transactional id is its holder's alone: another principal can
neither bump its epoch (KIP-360) nor send with it, and learns nothing about it, on both
databases."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.api.app import create_app
from app.settings import Settings


@dataclass
class Two:
    client: TestClient
    alice: dict[str, str]
    bob: dict[str, str]

    def post(self, who: dict[str, str], url: str, body: Any) -> Any:
        return self.client.post(url, json=body, headers=who)


@pytest.fixture(autouse=True)
def cheap_scrypt(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("app.services.security._SCRYPT_N", 2)


@pytest.fixture
def two(db_url: str, clock: Any) -> Iterator[Two]:
    """alice may write `shared` and `alice-*`, bob `shared` and `bob`."""
    settings = Settings(database_url=db_url, run_coordinator=False, auto_migrate=False,
                        authentication="api_key", super_users="User:admin")
    app = create_app(settings, clock)
    with TestClient(app) as client:
        security = app.state.services.security
        keys = {name: {"Authorization": f"Bearer {security.create_api_key(name, by='test').api_key}"}
                for name in ("admin", "alice", "bob")}
        for topic in ("shared", "bob", "alice-1"):
            assert client.post("/v1/topics", json={"name": topic, "partitions": 1}, headers=keys["admin"]).status_code == 201
        acls = [{"principal": f"User:{who}", "resource_type": "topic", "resource_name": name, "pattern_type": pattern,
                 "operation": "write", "permission": "allow"}
                for who, name, pattern in (("alice", "shared", "literal"), ("alice", "alice-", "prefixed"),
                                           ("bob", "shared", "literal"), ("bob", "bob", "literal"))]
        acls.append({"principal": "User:bob", "resource_type": "transactional_id", "resource_name": "bob-tx",
                     "pattern_type": "literal", "operation": "write", "permission": "allow"})
        assert client.post("/v1/acls", json={"acls": acls}, headers=keys["admin"]).status_code < 300
        yield Two(client, keys["alice"], keys["bob"])


def _send(two: Two, who: dict[str, str], producer: dict[str, int], topic: str, sequence: int) -> Any:
    return two.post(who, "/v1/records", {**producer, "batches": [
        {"topic": topic, "partition": 0, "base_sequence": sequence, "records": [{"value": sequence}]}]})


def _idempotent(two: Two, who: dict[str, str]) -> dict[str, int]:
    r = two.post(who, "/v1/producers", {})
    assert r.status_code == 200, r.text
    return {"producer_id": r.json()["producer_id"], "producer_epoch": r.json()["producer_epoch"]}


def test_another_principal_cannot_bump_an_idempotent_producers_epoch(two: Two) -> None:
    bob = _idempotent(two, two.bob)
    assert _send(two, two.bob, bob, "bob", 0).status_code == 200

    r = two.post(two.alice, "/v1/producers", bob)

    assert r.status_code == 409
    assert r.json()["error_code"] == "UNKNOWN_PRODUCER_ID"
    # bob's producer was not fenced: its next batch is appended in epoch 0
    sent = _send(two, two.bob, bob, "bob", 1)
    assert sent.status_code == 200, sent.text
    assert sent.json()["results"][0]["base_offset"] == 1


def test_the_holder_bumps_its_own_idempotent_producers_epoch(two: Two) -> None:
    bob = _idempotent(two, two.bob)

    r = two.post(two.bob, "/v1/producers", bob)

    assert r.status_code == 200, r.text
    assert (r.json()["producer_id"], r.json()["producer_epoch"]) == (bob["producer_id"], 1)


def test_another_principal_cannot_send_with_an_idempotent_producer_id(two: Two) -> None:
    """On a topic both may write, a stranger's batch at the holder's next sequence would
    otherwise be taken as the holder's, and the holder's own retry answered as a duplicate."""
    bob = _idempotent(two, two.bob)
    assert _send(two, two.bob, bob, "shared", 0).status_code == 200

    r = _send(two, two.alice, bob, "shared", 1)

    assert r.status_code == 409
    assert r.json()["error_code"] == "UNKNOWN_PRODUCER_ID"
    sent = _send(two, two.bob, bob, "shared", 1)
    assert sent.json()["results"][0] == {"topic": "shared", "partition": 0, "base_offset": 1, "last_offset": 1,
                                         "record_count": 1, "duplicate": False}


def test_a_stranger_cannot_tell_a_transactional_producer_id_from_an_unknown_one(two: Two) -> None:
    r = two.post(two.bob, "/v1/producers", {"transactional_id": "bob-tx"})
    assert r.status_code == 200, r.text
    transactional = {"producer_id": r.json()["producer_id"], "producer_epoch": 0}
    unknown = {"producer_id": transactional["producer_id"] + 1000, "producer_epoch": 0}

    answers = [two.post(two.alice, "/v1/producers", p) for p in (transactional, unknown)]

    assert [a.status_code for a in answers] == [409, 409]
    assert [a.json()["error_code"] for a in answers] == ["UNKNOWN_PRODUCER_ID"] * 2
    assert [a.json()["message"].replace(str(p["producer_id"]), "N") for a, p in zip(answers, (transactional, unknown))] \
        == ["unknown producer id N; call InitProducerId"] * 2


def test_the_holder_of_a_transactional_producer_id_is_told_to_pass_its_transactional_id(two: Two) -> None:
    r = two.post(two.bob, "/v1/producers", {"transactional_id": "bob-tx"})
    producer = {"producer_id": r.json()["producer_id"], "producer_epoch": 0}

    answer = two.post(two.bob, "/v1/producers", producer)

    assert answer.status_code == 400
    assert "belongs to a transactional_id" in answer.json()["message"]
