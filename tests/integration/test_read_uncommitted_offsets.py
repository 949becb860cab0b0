"""A read_uncommitted reader's offsets over HTTP: it reads records as they lie, so its positions
are Kafka's offsets, and its commits say so (`read_order: offset`). Stored in that order, they
are read back as the same offsets by readers in offset order (read_uncommitted readers, Kafka
consumers) and translated, or refused, for readers in commit order, as a Kafka consumer's are.
On SQLite and PostgreSQL.

The log of every test, orders/0: T1's record at 0, plain records P1 at 1 and P2 at 2, T1's
COMMIT marker at 3, a plain record P3 at 4. A read_uncommitted reader that has read T1's record
and P1 stops at 2; in commit order 2 means "P1 read, T1 not yet" and 3 "P1 and P2 read, T1 not
yet", so no commit position means the same."""

from __future__ import annotations

import pytest

from app.client import Consumer, Producer
from app.client.errors import ClientError
from tests.helpers import batch, begin, create_topic, ident, init_producer, send

GROUP = "billing"


@pytest.fixture
def straddled(client):  # type: ignore[no-untyped-def]
    create_topic(client, "orders")
    producer = init_producer(client, "t1")
    begin(client, "t1", producer)
    for r in (send(client, [batch("orders", 0, ["T1"], base_sequence=0)], producer, "t1"),
              send(client, [batch("orders", 0, ["P1"])]), send(client, [batch("orders", 0, ["P2"])])):
        assert r.status_code == 200, r.text
    r = client.post("/v1/transactions/t1/commit", json=ident(producer))
    assert r.status_code == 200, r.text
    r = send(client, [batch("orders", 0, ["P3"])])
    assert r.status_code == 200, r.text
    assert r.json()["results"][0]["base_offset"] == 4
    return client


def _offsets(client, **params):  # type: ignore[no-untyped-def]
    return client.get(f"/v1/groups/{GROUP}/offsets", params={"require_stable": "false", **params})


def test_a_commit_in_offset_order_is_stored_and_read_back_in_it(straddled) -> None:  # type: ignore[no-untyped-def]
    r = straddled.post(f"/v1/groups/{GROUP}/offsets", json={
        "offsets": [{"topic": "orders", "partition": 0, "offset": 2}], "read_order": "offset"})
    assert r.status_code == 200, r.text
    assert [(o["offset"], o["read_order"]) for o in r.json()["offsets"]] == [(2, "offset")]
    r = _offsets(straddled, read_order="offset")
    assert r.status_code == 200, r.text
    assert [(o["offset"], o["read_order"]) for o in r.json()["offsets"]] == [(2, "offset")]


def test_a_commit_in_offset_order_that_a_transaction_straddles_is_refused_in_commit_order(straddled) -> None:  # type: ignore[no-untyped-def]
    r = straddled.post(f"/v1/groups/{GROUP}/offsets", json={
        "offsets": [{"topic": "orders", "partition": 0, "offset": 2}], "read_order": "offset"})
    assert r.status_code == 200, r.text
    r = _offsets(straddled)  # commit order, the default
    assert r.status_code == 409, r.text
    assert r.json()["error_code"] == "INCONSISTENT_GROUP_PROTOCOL"


def test_a_commit_in_commit_order_is_refused_in_offset_order_where_a_transaction_straddles(straddled) -> None:  # type: ignore[no-untyped-def]
    r = straddled.post(f"/v1/groups/{GROUP}/offsets", json={
        "offsets": [{"topic": "orders", "partition": 0, "offset": 2}]})
    assert r.status_code == 200, r.text
    assert r.json()["offsets"][0]["read_order"] == "commit"
    r = _offsets(straddled, read_order="offset")
    assert r.status_code == 409, r.text
    assert r.json()["error_code"] == "INCONSISTENT_GROUP_PROTOCOL"


def test_an_unknown_read_order_is_refused(straddled) -> None:  # type: ignore[no-untyped-def]
    r = straddled.post(f"/v1/groups/{GROUP}/offsets", json={
        "offsets": [{"topic": "orders", "partition": 0, "offset": 2}], "read_order": "time"})
    assert r.status_code == 422, r.text
    assert r.json()["error_code"] == "INVALID_REQUEST"
    assert _offsets(straddled).json()["offsets"] == []
    r = _offsets(straddled, read_order="time")
    assert r.status_code == 422, r.text
    assert r.json()["error_code"] == "INVALID_REQUEST"


def test_the_client_librarys_read_uncommitted_consumer_resumes_where_it_stopped(straddled) -> None:  # type: ignore[no-untyped-def]
    first = Consumer("http://testserver", GROUP, isolation="read_uncommitted", client=straddled)
    first.assign([("orders", 0)])
    got = [r.value for r in first.poll(1.0)]
    first.commit({("orders", 0): 2})  # T1's record and P1 done
    first.close()
    assert got == ["T1", "P1", "P2", "P3"]
    again = Consumer("http://testserver", GROUP, isolation="read_uncommitted", client=straddled)
    again.assign([("orders", 0)])
    assert [r.value for r in again.poll(1.0)] == ["P2", "P3"]
    again.close()
    # A read_committed consumer of the group would skip T1 or read P1 again from any commit
    # position: refused, not started.
    other = Consumer("http://testserver", GROUP, client=straddled)
    with pytest.raises(ClientError) as refused:
        other.assign([("orders", 0)])  # reads the group's committed offsets
    other.close()
    assert refused.value.error_code == "INCONSISTENT_GROUP_PROTOCOL"


def test_offsets_a_read_uncommitted_consumer_sends_to_a_transaction_are_staged_in_offset_order(straddled) -> None:  # type: ignore[no-untyped-def]
    consumer = Consumer("http://testserver", GROUP, isolation="read_uncommitted", client=straddled)
    consumer.assign([("orders", 0)])
    producer = Producer("http://testserver", transactional_id="eos", client=straddled)
    producer.init_transactions()
    producer.begin_transaction()
    producer.send_offsets_to_transaction({("orders", 0): 2}, consumer.group_metadata())
    producer.commit_transaction()
    producer.close()
    consumer.close()
    r = _offsets(straddled, read_order="offset")
    assert r.status_code == 200, r.text
    assert [(o["offset"], o["read_order"]) for o in r.json()["offsets"]] == [(2, "offset")]
