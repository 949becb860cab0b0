"""A retry of one of a producer's last five batches in a partition, not only of its last one
(app.domain.producer.check_sequence, RETAINED_BATCHES), over HTTP on SQLite and PostgreSQL:
answered with the offsets its first write was answered, nothing written; an older batch, or one
with another record count, stays DUPLICATE_SEQUENCE_NUMBER; an older epoch stays fenced."""

from __future__ import annotations

from typing import Any

import pytest

from app.services.log_cleaner import LogCleaner
from tests.helpers import batch, begin, create_topic, fetch, ident, init_producer, send, values

# The record counts of the producer's batches, each the next one in its sequences.
_COUNTS = (2, 1, 3, 1, 2, 1)


def _log(client, topic: str = "t", partition: int = 0) -> tuple[int, list[tuple[int, Any]]]:  # type: ignore[no-untyped-def]
    """The partition's log end and every record stored, by offset (read_uncommitted)."""
    described = client.get(f"/v1/topics/{topic}").json()["partitions"][partition]
    page = fetch(client, topic, partition, described["log_start_offset"], isolation="read_uncommitted",
                 max_records=1_000)
    return described["log_end_offset"], [(r["offset"], r["value"]) for r in page["records"]]


def _write(client, producer: dict, tid: str | None = None, counts: tuple[int, ...] = _COUNTS) -> list[tuple[dict, dict]]:  # type: ignore[no-untyped-def]
    """The producer's batches, each followed by another writer's record, so that no two of its
    batches are adjacent: each batch sent and its first answer."""
    sent, sequence = [], 0
    for n, count in enumerate(counts):
        b = batch("t", 0, [f"b{n}.{i}" for i in range(count)], sequence)
        r = send(client, [b], producer, tid)
        assert r.status_code == 200, r.text
        (result,) = r.json()["results"]
        sent.append((b, result))
        sequence += count
        assert send(client, [batch("t", 0, [f"other{n}"])]).status_code == 200
    return sent


def _retried(client, b: dict, producer: dict, tid: str | None = None) -> dict:  # type: ignore[no-untyped-def]
    r = send(client, [b], producer, tid)
    assert r.status_code == 200, r.text
    (result,) = r.json()["results"]
    return result


def test_a_retry_of_each_of_the_last_five_batches_is_answered_with_its_first_offsets(client):  # type: ignore[no-untyped-def]
    create_topic(client, "t", 1)
    p = init_producer(client)
    sent = _write(client, p, counts=_COUNTS[:5])
    before = _log(client)

    answers = [_retried(client, b, p) for b, _ in sent]

    assert [(r["base_offset"], r["last_offset"], r["record_count"], r["duplicate"]) for r in answers] == [
        (0, 1, 2, True), (3, 3, 1, True), (5, 7, 3, True), (9, 9, 1, True), (11, 12, 2, True)]
    assert answers == [{**first, "duplicate": True} for _, first in sent]
    assert _log(client) == before == (14, [
        (0, "b0.0"), (1, "b0.1"), (2, "other0"), (3, "b1.0"), (4, "other1"), (5, "b2.0"), (6, "b2.1"),
        (7, "b2.2"), (8, "other2"), (9, "b3.0"), (10, "other3"), (11, "b4.0"), (12, "b4.1"), (13, "other4")])
    # Retried last to first, the same; and the producer goes on at its next sequence.
    assert [_retried(client, b, p) for b, _ in reversed(sent)] == list(reversed(answers))
    nxt = _retried(client, batch("t", 0, ["next"], 9), p)
    assert (nxt["base_offset"], nxt["duplicate"]) == (14, False)
    assert _log(client)[1][-1] == (14, "next")


def test_a_retry_of_a_request_of_several_partitions_three_requests_back_answers_each_batch_again(client):  # type: ignore[no-untyped-def]
    create_topic(client, "t", 2)
    p = init_producer(client)
    requests, firsts = [], []
    for n in range(4):
        request = [batch("t", 0, [f"p0.{n}"], n), batch("t", 1, [f"p1.{n}.a", f"p1.{n}.b"], 2 * n)]
        r = send(client, request, p)
        assert r.status_code == 200, r.text
        requests.append(request)
        firsts.append(r.json()["results"])

    retry = send(client, requests[0], p)

    assert retry.status_code == 200, retry.text
    assert [(r["partition"], r["base_offset"], r["duplicate"]) for r in retry.json()["results"]] == [
        (0, 0, True), (1, 0, True)]
    assert retry.json()["results"] == [{**r, "duplicate": True} for r in firsts[0]]
    assert values(fetch(client, "t", 0)) == ["p0.0", "p0.1", "p0.2", "p0.3"]
    assert len(values(fetch(client, "t", 1))) == 8


def test_a_retry_of_the_sixth_batch_back_is_a_duplicate_sequence_number(client):  # type: ignore[no-untyped-def]
    create_topic(client, "t", 1)
    p = init_producer(client)
    sent = _write(client, p)  # six batches
    before = _log(client)

    r = send(client, [sent[0][0]], p)

    assert (r.status_code, r.json()["error_code"]) == (409, "DUPLICATE_SEQUENCE_NUMBER")
    assert _log(client) == before
    # The fifth back is still answered.
    assert _retried(client, sent[1][0], p) == {**sent[1][1], "duplicate": True}


def test_a_retry_of_an_earlier_batch_whose_records_were_deleted_is_a_duplicate_sequence_number(  # type: ignore[no-untyped-def]
        client, services, clock):
    create_topic(client, "t", 1)
    p = init_producer(client)
    sent = _write(client, p, counts=_COUNTS[:5])
    # The first batch (0..1) and the other writer's record after it (2) are deleted, and with
    # their last record their batch rows.
    assert client.post("/v1/topics/t/partitions/0/delete-records", json={"offset": 3}).status_code == 200
    LogCleaner(services.db, services.settings, clock).run_once()
    before = _log(client)
    assert before[1][0] == (3, "b1.0")

    r = send(client, [sent[0][0]], p)

    # Its row gone, it is not known as written: refused as before, not written again.
    assert (r.status_code, r.json()["error_code"]) == (409, "DUPLICATE_SEQUENCE_NUMBER")
    assert _retried(client, sent[1][0], p) == {**sent[1][1], "duplicate": True}
    assert _log(client) == before


@pytest.mark.parametrize("count", [2, 4])
def test_a_retry_of_an_earlier_batch_with_another_record_count_is_refused(client, count):  # type: ignore[no-untyped-def]
    create_topic(client, "t", 1)
    p = init_producer(client)
    _write(client, p, counts=_COUNTS[:5])  # the third batch: sequences 3..5
    before = _log(client)

    r = send(client, [batch("t", 0, [f"x{i}" for i in range(count)], 3)], p)

    assert (r.status_code, r.json()["error_code"]) == (409, "DUPLICATE_SEQUENCE_NUMBER")
    assert _log(client) == before


def test_a_retry_of_an_earlier_batch_in_an_older_epoch_is_fenced(client):  # type: ignore[no-untyped-def]
    create_topic(client, "t", 1)
    p = init_producer(client)
    sent = _write(client, p, counts=_COUNTS[:3])
    bumped = client.post("/v1/producers", json=ident(p)).json()
    assert bumped["producer_epoch"] == p["producer_epoch"] + 1
    before = _log(client)

    r = send(client, [sent[0][0]], p)

    assert (r.status_code, r.json()["error_code"]) == (409, "INVALID_PRODUCER_EPOCH")
    # Once the new epoch has written here too, its own batches are the ones a retry is of: the
    # old epoch's first batch, at the same sequences, is not.
    again = [_retried(client, batch("t", 0, [f"e1.{n}"], n), bumped) for n in range(3)]
    late = send(client, [sent[0][0]], p)
    assert (late.status_code, late.json()["error_code"]) == (409, "INVALID_PRODUCER_EPOCH")
    overlap = send(client, [sent[0][0]], bumped)  # sequences 0..1 in the new epoch: 0 and 1 were two batches
    assert (overlap.status_code, overlap.json()["error_code"]) == (409, "DUPLICATE_SEQUENCE_NUMBER")
    assert _retried(client, batch("t", 0, ["e1.0"], 0), bumped) == {**again[0], "duplicate": True}
    assert _log(client)[1] == before[1] + [(9, "e1.0"), (10, "e1.1"), (11, "e1.2")]


@pytest.mark.parametrize("version", [1, 2])
def test_a_transactional_retry_of_an_earlier_batch_of_the_open_transaction_is_answered_with_its_first_offsets(  # type: ignore[no-untyped-def]
        client, version):
    create_topic(client, "t", 1)
    p = init_producer(client, "X", transaction_version=version)
    if version == 1:
        begin(client, "X", p)
    sent = _write(client, p, "X", counts=_COUNTS[:5])
    before = _log(client)

    answers = [_retried(client, b, p, "X") for b, _ in sent]

    assert answers == [{**first, "duplicate": True} for _, first in sent]
    assert [r["base_offset"] for r in answers] == [0, 3, 5, 9, 11]
    assert _log(client) == before
    assert _retried(client, batch("t", 0, ["b5.0"], 9), p, "X")["duplicate"] is False
    six_back = send(client, [sent[0][0]], p, "X")
    assert (six_back.status_code, six_back.json()["error_code"]) == (409, "DUPLICATE_SEQUENCE_NUMBER")
    r = client.post("/v1/transactions/X/commit", json=ident(p))
    assert r.status_code == 200, r.text
    # In commit order: the other writer's records at their offsets, then the transaction's at its
    # COMMIT marker, each batch once.
    assert values(fetch(client, "t", 0)) == [
        "other0", "other1", "other2", "other3", "other4",
        "b0.0", "b0.1", "b1.0", "b2.0", "b2.1", "b2.2", "b3.0", "b4.0", "b4.1", "b5.0"]


def test_a_transactional_retry_of_an_earlier_batch_after_its_producer_was_fenced_is_refused(client):  # type: ignore[no-untyped-def]
    create_topic(client, "t", 1)
    p = init_producer(client, "X")
    begin(client, "X", p)
    sent = _write(client, p, "X", counts=_COUNTS[:3])
    init_producer(client, "X")  # a new instance: the open transaction is aborted, p fenced
    before = _log(client)

    r = send(client, [sent[0][0]], p, "X")

    assert (r.status_code, r.json()["error_code"]) == (409, "PRODUCER_FENCED")
    assert _log(client)[1] == before[1]
