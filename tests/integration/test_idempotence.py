"""Sequence numbers and producer epochs (docs/GUARANTEES.md#no-duplicates), on SQLite and PostgreSQL."""

from __future__ import annotations

import pytest

from tests.helpers import batch, begin, create_topic, fetch, ident, init_producer, send, values

# Each test's own database, as new, and one app for the module's tests: an app per test was
# a large part of a test's time here.
pytestmark = pytest.mark.shared_app


def _log_end(client, topic: str, partition: int = 0) -> int:  # type: ignore[no-untyped-def]
    return client.get(f"/v1/topics/{topic}").json()["partitions"][partition]["log_end_offset"]


def test_retried_send_returns_the_first_offsets_and_writes_nothing(client):  # type: ignore[no-untyped-def]
    create_topic(client, "t", 2)
    p = init_producer(client)
    request = [batch("t", 0, ["a", "b"], 0), batch("t", 1, ["c"], 0)]
    first = send(client, request, p).json()["results"]
    send(client, [batch("t", 0, ["other"])])  # someone else appends in between

    retry = send(client, request, p)

    assert retry.status_code == 200
    assert [(r["base_offset"], r["duplicate"]) for r in retry.json()["results"]] == [(0, True), (0, True)]
    assert [(r["base_offset"], r["duplicate"]) for r in first] == [(0, False), (0, False)]
    assert values(fetch(client, "t", 0)) == ["a", "b", "other"]
    assert (_log_end(client, "t", 0), _log_end(client, "t", 1)) == (3, 1)


def test_next_batch_continues_the_sequence(client):  # type: ignore[no-untyped-def]
    create_topic(client, "t", 1)
    p = init_producer(client)
    send(client, [batch("t", 0, ["a", "b"], 0)], p)
    r = send(client, [batch("t", 0, ["c"], 2)], p)
    assert r.status_code == 200 and r.json()["results"][0]["base_offset"] == 2
    assert [rec["sequence"] for rec in fetch(client, "t", 0)["records"]] == [0, 1, 2]


def test_a_retry_of_a_later_batch_returns_its_first_offsets_and_writes_nothing(client):  # type: ignore[no-untyped-def]
    create_topic(client, "t", 1)
    p = init_producer(client)
    send(client, [batch("t", 0, ["a", "b"], 0)], p)
    first = send(client, [batch("t", 0, ["c", "d"], 2)], p).json()["results"][0]
    send(client, [batch("t", 0, ["other"])])

    retry = send(client, [batch("t", 0, ["c", "d"], 2)], p)

    assert retry.status_code == 200
    assert (first["base_offset"], first["duplicate"]) == (2, False)
    assert (retry.json()["results"][0]["base_offset"], retry.json()["results"][0]["duplicate"]) == (2, True)
    assert values(fetch(client, "t", 0)) == ["a", "b", "c", "d", "other"]


def test_a_refused_request_does_not_advance_the_sequence_of_its_accepted_later_batch(client):  # type: ignore[no-untyped-def]
    create_topic(client, "t", 2)
    p = init_producer(client)
    send(client, [batch("t", 0, ["a"], 0), batch("t", 1, ["b"], 0)], p)
    # partition 0's batch is the next one; partition 1's leaves a gap and refuses the request
    r = send(client, [batch("t", 0, ["c"], 1), batch("t", 1, ["gap"], 5)], p)
    assert (r.status_code, r.json()["error_code"]) == (409, "OUT_OF_ORDER_SEQUENCE_NUMBER")
    assert (_log_end(client, "t", 0), _log_end(client, "t", 1)) == (1, 1)

    again = send(client, [batch("t", 0, ["c"], 1)], p)

    assert (again.status_code, again.json()["results"][0]["duplicate"]) == (200, False)
    assert values(fetch(client, "t", 0)) == ["a", "c"]


def test_a_gap_in_sequences_is_refused(client):  # type: ignore[no-untyped-def]
    create_topic(client, "t", 1)
    p = init_producer(client)
    send(client, [batch("t", 0, ["a"], 0)], p)
    r = send(client, [batch("t", 0, ["c"], 2)], p)
    assert (r.status_code, r.json()["error_code"]) == (409, "OUT_OF_ORDER_SEQUENCE_NUMBER")
    assert _log_end(client, "t") == 1


def test_first_batch_must_start_at_sequence_zero(client):  # type: ignore[no-untyped-def]
    create_topic(client, "t", 1)
    p = init_producer(client)
    r = send(client, [batch("t", 0, ["a"], 5)], p)
    assert (r.status_code, r.json()["error_code"]) == (409, "UNKNOWN_PRODUCER_ID")
    assert _log_end(client, "t") == 0


def test_an_overlapping_batch_that_is_not_a_retry_is_refused(client):  # type: ignore[no-untyped-def]
    create_topic(client, "t", 1)
    p = init_producer(client)
    send(client, [batch("t", 0, ["a", "b", "c"], 0)], p)
    r = send(client, [batch("t", 0, ["b"], 1)], p)
    assert (r.status_code, r.json()["error_code"]) == (409, "DUPLICATE_SEQUENCE_NUMBER")
    assert _log_end(client, "t") == 3


def test_a_refused_batch_refuses_the_whole_request(client):  # type: ignore[no-untyped-def]
    create_topic(client, "t", 2)
    p = init_producer(client)
    r = send(client, [batch("t", 0, ["ok"], 0), batch("t", 1, ["gap"], 3)], p)
    assert r.status_code == 409
    assert (_log_end(client, "t", 0), _log_end(client, "t", 1)) == (0, 0)
    # the sequence state was not advanced either
    assert send(client, [batch("t", 0, ["ok"], 0)], p).json()["results"][0]["duplicate"] is False


def test_an_epoch_other_than_the_current_one_is_refused_for_idempotent_producers(client):  # type: ignore[no-untyped-def]
    create_topic(client, "t", 1)
    p = init_producer(client)
    r = send(client, [batch("t", 0, ["a"], 0)], {**p, "producer_epoch": p["producer_epoch"] + 1})
    assert (r.status_code, r.json()["error_code"]) == (409, "INVALID_PRODUCER_EPOCH")
    assert _log_end(client, "t") == 0


def test_after_an_epoch_bump_the_old_epoch_s_next_batch_is_refused(client):  # type: ignore[no-untyped-def]
    create_topic(client, "t", 1)
    p = init_producer(client)
    assert send(client, [batch("t", 0, ["a"], 0)], p).status_code == 200
    bumped = client.post("/v1/producers", json=ident(p)).json()
    assert bumped["producer_epoch"] == p["producer_epoch"] + 1

    r = send(client, [batch("t", 0, ["late"], 1)], p)

    assert (r.status_code, r.json()["error_code"]) == (409, "INVALID_PRODUCER_EPOCH")
    assert _log_end(client, "t") == 1


def test_a_transactional_producer_s_next_batch_without_its_transactional_id_is_refused(client):  # type: ignore[no-untyped-def]
    create_topic(client, "t", 1)
    p = init_producer(client, "X")
    begin(client, "X", p)
    assert send(client, [batch("t", 0, ["a"], 0)], p, "X").status_code == 200

    r = send(client, [batch("t", 0, ["b"], 1)], p)

    assert (r.status_code, r.json()["error_code"]) == (400, "INVALID_REQUEST")
    assert _log_end(client, "t") == 1


def test_an_unknown_producer_id_is_refused(client):  # type: ignore[no-untyped-def]
    create_topic(client, "t", 1)
    r = send(client, [batch("t", 0, ["a"], 0)], {"producer_id": 424242, "producer_epoch": 0})
    assert (r.status_code, r.json()["error_code"]) == (409, "UNKNOWN_PRODUCER_ID")


def test_stale_epoch_of_a_transactional_producer_is_fenced(client):  # type: ignore[no-untyped-def]
    create_topic(client, "t", 1)
    old = init_producer(client, "X")
    new = init_producer(client, "X")
    begin(client, "X", new)
    r = send(client, [batch("t", 0, ["zombie"], 0)], old, "X")
    assert (r.status_code, r.json()["error_code"]) == (409, "PRODUCER_FENCED")
    assert _log_end(client, "t") == 0


def test_transactional_retry_inside_the_transaction_is_deduplicated(client):  # type: ignore[no-untyped-def]
    create_topic(client, "t", 1)
    p = init_producer(client, "X")
    begin(client, "X", p)
    first = send(client, [batch("t", 0, ["a", "b"], 0)], p, "X").json()["results"][0]
    retry = send(client, [batch("t", 0, ["a", "b"], 0)], p, "X").json()["results"][0]
    assert (retry["base_offset"], retry["duplicate"]) == (first["base_offset"], True)
    client.post("/v1/transactions/X/commit", json=ident(p))
    assert values(fetch(client, "t", 0)) == ["a", "b"]


def test_sequences_continue_across_transactions_of_one_epoch(client):  # type: ignore[no-untyped-def]
    create_topic(client, "t", 1)
    p = init_producer(client, "X")
    for i in range(3):
        begin(client, "X", p)
        assert send(client, [batch("t", 0, [f"v{i}"], i)], p, "X").status_code == 200
        client.post("/v1/transactions/X/commit", json=ident(p))
    assert values(fetch(client, "t", 0)) == ["v0", "v1", "v2"]


def test_a_new_epoch_restarts_sequences_at_zero(client):  # type: ignore[no-untyped-def]
    create_topic(client, "t", 1)
    p = init_producer(client, "X")
    begin(client, "X", p)
    send(client, [batch("t", 0, ["a", "b"], 0)], p, "X")
    client.post("/v1/transactions/X/commit", json=ident(p))
    p2 = init_producer(client, "X")
    begin(client, "X", p2)
    r = send(client, [batch("t", 0, ["c"], 2)], p2, "X")
    assert r.json()["error_code"] == "OUT_OF_ORDER_SEQUENCE_NUMBER"
    assert send(client, [batch("t", 0, ["c"], 0)], p2, "X").status_code == 200


def test_transactional_producer_cannot_send_outside_its_transaction(client):  # type: ignore[no-untyped-def]
    create_topic(client, "t", 1)
    p = init_producer(client, "X")
    r = send(client, [batch("t", 0, ["a"], 0)], p)
    assert (r.status_code, r.json()["error_code"]) == (400, "INVALID_REQUEST")
    r = send(client, [batch("t", 0, ["a"], 0)], p, "X")
    assert (r.status_code, r.json()["error_code"]) == (409, "INVALID_TXN_STATE")
    assert _log_end(client, "t") == 0


def test_expected_offset_appends_only_at_that_offset(client):  # type: ignore[no-untyped-def]
    create_topic(client, "t", 2)
    assert send(client, [batch("t", 0, ["a"], expected_offset=0)]).status_code == 200
    r = send(client, [batch("t", 1, ["x"], expected_offset=0), batch("t", 0, ["b"], expected_offset=0)])
    assert (r.status_code, r.json()["error_code"]) == (409, "OFFSET_MISMATCH")
    assert (_log_end(client, "t", 0), _log_end(client, "t", 1)) == (1, 0)
    assert send(client, [batch("t", 0, ["b"], expected_offset=1)]).status_code == 200


def test_a_retried_conditional_batch_is_appended_at_most_once(client):  # type: ignore[no-untyped-def]
    create_topic(client, "t", 1)
    request = [batch("t", 0, ["a", "b"], expected_offset=0)]
    assert send(client, request).status_code == 200
    retry = send(client, request)
    assert (retry.status_code, retry.json()["error_code"]) == (409, "OFFSET_MISMATCH")
    assert retry.json()["details"]["next_offset"] == 2
    assert values(fetch(client, "t", 0)) == ["a", "b"]


def test_a_topic_with_check_expected_offsets_refuses_a_send_without_one(client):  # type: ignore[no-untyped-def]
    create_topic(client, "t", 1, check_expected_offsets=True)
    r = send(client, [batch("t", 0, ["a"])])
    assert (r.status_code, r.json()["error_code"]) == (400, "INVALID_REQUEST")
    assert send(client, [batch("t", 0, ["a"], expected_offset=0)]).status_code == 200
