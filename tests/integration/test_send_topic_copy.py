"""A plain or idempotent Send on PostgreSQL takes its topics from the process's copy
(app.storage.seen_topics) once it has read them, and is answered exactly as if it had read them
afresh: a topic deleted, re-created, grown or reconfigured since, here or by another process, is
never written to under the old row. Each test has the copy filled by a first Send of the app
that sends last, and runs for both kinds of Send (`sender`): an idempotent one by a new producer
each time, its batches at sequence 0; a running producer's next batch takes its offsets by
another statement, tested apart at the end; so is a Commit that carries batches, which takes their
topics from the same copy."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.api.app import create_app
from tests.helpers import batch, create_topic, init_producer, read_all, send, statements_run

pytestmark = pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)


@pytest.fixture
def other(settings: Any, clock: Any) -> Iterator[TestClient]:
    """A second API process on the same database."""
    with TestClient(create_app(settings, clock)) as c:
        yield c


Sender = Callable[[Any, list[dict]], Any]


@pytest.fixture(params=["plain", "idempotent"])
def sender(request: Any) -> Sender:
    """Sends the batches plain, or as a new idempotent producer's first Send."""
    if request.param == "plain":
        return send

    def idempotent(client: Any, batches: list[dict]) -> Any:
        return send(client, [{**b, "base_sequence": 0} for b in batches], init_producer(client))
    return idempotent


def sent(sender: Sender, client: Any, topic: str, partition: int, values: list[Any], **extra: Any) -> int:
    r = sender(client, [batch(topic, partition, values, **extra)])
    assert r.status_code == 200, r.text
    return r.json()["results"][0]["base_offset"]


@contextmanager
def statements_reading_topics() -> Iterator[list[str]]:
    """The statements run meanwhile that read the `topics` table, once the block has ended."""
    reads: list[str] = []
    with statements_run() as seen:
        yield reads
    reads.extend(statement for statement in seen if "FROM topics" in statement)


def refusal(r: Any) -> tuple[int, str, str]:
    body = r.json()
    return r.status_code, body["error_code"], body["message"]


def test_a_send_to_a_topic_it_has_seen_reads_its_row_only_where_it_takes_its_offsets(sender: Sender, client: Any) -> None:
    create_topic(client, "t", 1)
    sent(sender, client, "t", 0, ["a"])
    with statements_reading_topics() as reads:
        assert sent(sender, client, "t", 0, ["b"]) == 1
    # The one read: the check of the row's version inside the statement that takes the offsets.
    assert ["UPDATE partitions" in statement for statement in reads] == [True]


def test_a_send_after_another_process_deleted_the_topic_is_refused_as_unknown(sender: Sender, client: Any, other: Any) -> None:
    create_topic(client, "t", 1)
    sent(sender, client, "t", 0, ["a"])

    assert other.delete("/v1/topics/t").status_code in (200, 204)

    assert refusal(sender(client, [batch("t", 0, ["b"])])) == (404, "UNKNOWN_TOPIC_OR_PARTITION", "unknown topic(s): t")


def test_a_send_after_re_creation_with_fewer_partitions_goes_to_the_new_topic(sender: Sender, client: Any, other: Any) -> None:
    create_topic(client, "t", 3)
    sent(sender, client, "t", 0, ["a", "b"])
    sent(sender, client, "t", 2, ["c"])
    assert other.delete("/v1/topics/t").status_code in (200, 204)
    create_topic(other, "t", 1)

    assert refusal(sender(client, [batch("t", 2, ["d"])])) == (
        404, "UNKNOWN_TOPIC_OR_PARTITION", "topic 't' has partitions 0..0; got 2")
    assert sent(sender, client, "t", 0, ["e"]) == 0
    assert [r["value"] for r in read_all(client, "t", 0)] == ["e"]


def test_a_send_to_a_partition_added_since_is_written(sender: Sender, client: Any, other: Any) -> None:
    create_topic(client, "t", 1)
    sent(sender, client, "t", 0, ["a"])

    assert other.post("/v1/topics/t/partitions", json={"partition_count": 3}).status_code == 200

    assert sent(sender, client, "t", 2, ["b"]) == 0
    assert [r["value"] for r in read_all(client, "t", 2)] == ["b"]


def test_a_send_after_another_process_lowered_max_message_bytes_is_refused(sender: Sender, client: Any, other: Any) -> None:
    create_topic(client, "t", 1)
    sent(sender, client, "t", 0, ["a" * 50])

    assert other.patch("/v1/topics/t", json={"config": {"max_message_bytes": 10}}).status_code == 200

    assert refusal(sender(client, [batch("t", 0, ["b" * 50])])) == (
        413, "MESSAGE_TOO_LARGE",
        "record 0 of t/0 is 52 bytes (key, value and headers), more than topic 't''s max_message_bytes 10")
    assert [r["value"] for r in read_all(client, "t", 0)] == ["a" * 50]


def test_a_send_after_another_process_raised_max_message_bytes_is_written(sender: Sender, client: Any, other: Any) -> None:
    create_topic(client, "t", 1, max_message_bytes=10)
    assert sender(client, [batch("t", 0, ["b" * 50])]).status_code == 413

    assert other.patch("/v1/topics/t", json={"config": {"max_message_bytes": 100}}).status_code == 200

    assert sent(sender, client, "t", 0, ["b" * 50]) == 0


def test_a_send_after_another_process_required_expected_offsets_is_refused(sender: Sender, client: Any, other: Any) -> None:
    create_topic(client, "t", 1)
    sent(sender, client, "t", 0, ["a"])

    assert other.patch("/v1/topics/t", json={"config": {"check_expected_offsets": True}}).status_code == 200

    assert refusal(sender(client, [batch("t", 0, ["b"])])) == (
        400, "INVALID_REQUEST", "topic 't' has check_expected_offsets: every batch needs expected_offset")
    assert sent(sender, client, "t", 0, ["b"], expected_offset=1) == 1


def test_a_refused_send_across_topics_writes_nothing(sender: Sender, client: Any, other: Any) -> None:
    # u's offsets are taken first (its topic id is lower); t's statement then finds its row
    # gone, and the whole Send is done again from a fresh read, which refuses it.
    create_topic(client, "u", 1)
    create_topic(client, "t", 1)
    assert sender(client, [batch("u", 0, ["a"]), batch("t", 0, ["b"])]).status_code == 200
    assert other.delete("/v1/topics/t").status_code in (200, 204)

    assert refusal(sender(client, [batch("u", 0, ["c"]), batch("t", 0, ["d"])])) == (
        404, "UNKNOWN_TOPIC_OR_PARTITION", "unknown topic(s): t")
    assert [r["value"] for r in read_all(client, "u", 0)] == ["a"]
    assert sent(sender, client, "u", 0, ["e"]) == 1


def test_a_running_producers_next_batch_after_another_process_deleted_the_topic_is_refused_as_unknown(
        client: Any, other: Any) -> None:
    create_topic(client, "t", 1)
    producer = init_producer(client)
    assert send(client, [batch("t", 0, ["a"], base_sequence=0)], producer).status_code == 200

    assert other.delete("/v1/topics/t").status_code in (200, 204)

    assert refusal(send(client, [batch("t", 0, ["b"], base_sequence=1)], producer)) == (
        404, "UNKNOWN_TOPIC_OR_PARTITION", "unknown topic(s): t")


def test_a_batch_past_the_sequence_range_is_judged_on_the_topic_as_it_is_now(client: Any, other: Any) -> None:
    # The one batch whose offsets no statement confirming the copy takes: its refusal is the one
    # a fresh read of the topic gives (the record too large), not the copy's.
    create_topic(client, "t", 1)
    producer = init_producer(client)
    assert send(client, [batch("t", 0, ["a" * 50], base_sequence=0)], producer).status_code == 200

    assert other.patch("/v1/topics/t", json={"config": {"max_message_bytes": 10}}).status_code == 200

    assert refusal(send(client, [batch("t", 0, ["b" * 50, "c"], base_sequence=2**31 - 1)], producer)) == (
        413, "MESSAGE_TOO_LARGE",
        "record 0 of t/0 is 52 bytes (key, value and headers), more than topic 't''s max_message_bytes 10")


# --- a Commit that carries batches takes their topics from the same copy ---------------------------


def _carried_commit(client: Any, producer: dict, batches: list[dict], tid: str = "carrier") -> Any:
    return client.post(f"/v1/transactions/{tid}/commit",
                       json={"producer_id": producer["producer_id"], "producer_epoch": producer["producer_epoch"],
                             "batches": batches})


def _carrier(client: Any, tid: str = "carrier") -> dict:
    return init_producer(client, tid, transaction_version=2)


def test_a_commit_carrying_batches_to_a_topic_it_has_seen_reads_its_row_only_where_it_takes_its_offsets(
        client: Any) -> None:
    create_topic(client, "t", 1)
    producer = _carrier(client)
    first = _carried_commit(client, producer, [batch("t", 0, ["a"], base_sequence=0)])
    assert first.status_code == 200, first.text
    producer = first.json()
    with statements_reading_topics() as reads:
        again = _carried_commit(client, producer, [batch("t", 0, ["b"], base_sequence=0)])
    assert again.status_code == 200, again.text
    assert [r["base_offset"] for r in again.json()["results"]] == [2]  # "a" at 0, its marker at 1
    assert ["UPDATE partitions" in statement for statement in reads] == [True]


def test_a_commit_carrying_batches_after_another_process_deleted_the_topic_is_refused_and_writes_nothing(
        client: Any, other: Any) -> None:
    create_topic(client, "u", 1)
    create_topic(client, "t", 1)
    producer = _carrier(client)
    first = _carried_commit(client, producer, [batch("u", 0, ["a"], base_sequence=0),
                                               batch("t", 0, ["b"], base_sequence=0)])
    assert first.status_code == 200, first.text
    assert other.delete("/v1/topics/t").status_code in (200, 204)

    refused = _carried_commit(client, first.json(), [batch("u", 0, ["c"], base_sequence=0),
                                                      batch("t", 0, ["d"], base_sequence=0)])

    assert refusal(refused) == (404, "UNKNOWN_TOPIC_OR_PARTITION", "unknown topic(s): t")
    assert [r["value"] for r in read_all(client, "u", 0, "read_uncommitted")] == ["a"]
    assert client.get("/v1/transactions/carrier").json()["state"] == "CompleteCommit"


def test_a_commit_carrying_batches_after_another_process_lowered_max_message_bytes_is_refused(
        client: Any, other: Any) -> None:
    create_topic(client, "t", 1)
    producer = _carrier(client)
    first = _carried_commit(client, producer, [batch("t", 0, ["a" * 50], base_sequence=0)])
    assert first.status_code == 200, first.text

    assert other.patch("/v1/topics/t", json={"config": {"max_message_bytes": 10}}).status_code == 200

    assert refusal(_carried_commit(client, first.json(), [batch("t", 0, ["b" * 50], base_sequence=0)])) == (
        413, "MESSAGE_TOO_LARGE",
        "record 0 of t/0 is 52 bytes (key, value and headers), more than topic 't''s max_message_bytes 10")
    assert [r["value"] for r in read_all(client, "t", 0, "read_uncommitted")] == ["a" * 50]


def test_a_commit_carrying_batches_into_an_open_transaction_goes_to_the_re_created_topic(
        client: Any, other: Any) -> None:
    create_topic(client, "t", 2)
    producer = _carrier(client)
    first = _carried_commit(client, producer, [batch("t", 1, ["a"], base_sequence=0)])
    assert first.status_code == 200, first.text
    producer = first.json()
    assert other.delete("/v1/topics/t").status_code in (200, 204)
    create_topic(other, "t", 2)
    create_topic(client, "other", 1)
    opened = send(client, [batch("other", 0, ["x"], base_sequence=0)], producer, tid="carrier")
    assert opened.status_code == 200, opened.text

    committed = _carried_commit(client, producer, [batch("t", 1, ["b"], base_sequence=0)])

    assert committed.status_code == 200, committed.text
    assert [(r["partition"], r["base_offset"]) for r in committed.json()["results"]] == [(1, 0)]
    assert [r["value"] for r in read_all(client, "t", 1)] == ["b"]
    assert [r["value"] for r in read_all(client, "other", 0)] == ["x"]
