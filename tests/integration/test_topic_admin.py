"""Topic administration through the HTTP API, on SQLite and PostgreSQL: IncrementalAlterConfigs
(PATCH /v1/topics/{topic}), CreatePartitions (POST …/partitions), DeleteTopics (DELETE) and
DeleteRecords (POST …/partitions/{partition}/delete-records). Bad input for each is in
test_bad_input.py; races on PostgreSQL in test_topic_admin_races.py."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, select

from app.api.app import create_app
from app.storage.tables import deleted_topics, group_offsets, producer_partitions, records, topics
from tests.helpers import batch, begin, create_topic, fetch, ident, init_producer, send, values
from tests.integration.test_metrics import delta, scrape

# Each test's own database, as new, and one app for the module's tests: an app per test was
# a large part of a test's time here.
pytestmark = pytest.mark.shared_app


DEFAULT_CONFIG = {"cleanup_policy": "delete", "retention_ms": 604_800_000, "retention_bytes": -1,
                  "delete_retention_ms": 86_400_000, "check_expected_offsets": False, "max_message_bytes": 1_048_588,
                  "value_format": "json"}


def _empty(partition: int) -> dict:
    return {"partition": partition, "log_start_offset": 0, "log_end_offset": 0, "last_stable_offset": 0,
            "record_count": 0, "size_bytes": 0, "high_watermark": 0}


def _ok(r: Any) -> Any:
    assert r.status_code == 200, r.text
    return r.json()


def _refused(r: Any, status: int, code: str) -> dict:
    assert (r.status_code, r.json()["error_code"]) == (status, code), r.text
    return r.json()


def _rows(db_url: str, stmt: Any) -> list[tuple]:
    engine = create_engine(db_url)
    try:
        with engine.connect() as conn:
            return [tuple(r) for r in conn.execute(stmt)]
    finally:
        engine.dispose()


def _alter(client: Any, topic: str, **config: Any) -> Any:
    return client.patch(f"/v1/topics/{topic}", json={"config": config})


def _add_partitions(client: Any, topic: str, count: int) -> Any:
    return client.post(f"/v1/topics/{topic}/partitions", json={"partition_count": count})


def _delete_records(client: Any, topic: str, partition: int, offset: int) -> Any:
    return client.post(f"/v1/topics/{topic}/partitions/{partition}/delete-records", json={"offset": offset})


def _commit(client: Any, tid: str, producer: dict) -> None:
    _ok(client.post(f"/v1/transactions/{tid}/commit", json=ident(producer)))


# --- IncrementalAlterConfigs ---------------------------------------------------------------------


def test_alter_answers_the_topic_with_the_key_set(client) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "t", 1)

    answer = _ok(_alter(client, "t", retention_ms=3_600_000))

    assert answer == {"name": "t", "partition_count": 1, "value_format": "json",
                      "config": {**DEFAULT_CONFIG, "retention_ms": 3_600_000}, "partitions": [_empty(0)]}


def test_alter_of_one_key_keeps_the_others(client) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "t", 1, cleanup_policy="compact", retention_bytes=1000, delete_retention_ms=5,
                 check_expected_offsets=True, max_message_bytes=300)

    _ok(_alter(client, "t", retention_ms=-1))

    assert client.get("/v1/topics/t").json()["config"] == {
        "cleanup_policy": "compact", "retention_ms": -1, "retention_bytes": 1000,
        "delete_retention_ms": 5, "check_expected_offsets": True, "max_message_bytes": 300, "value_format": "json",
    }


def test_alter_of_every_key_at_once(client) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "t", 1)
    changed = {"cleanup_policy": "compact,delete", "retention_ms": 1, "retention_bytes": 2,
               "delete_retention_ms": 0, "check_expected_offsets": True, "max_message_bytes": 1,
               "value_format": "json"}

    assert _ok(_alter(client, "t", **changed))["config"] == changed
    assert client.get("/v1/topics/t").json()["config"] == changed


def test_alter_with_no_keys_changes_nothing(client) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "t", 1, retention_ms=5000)

    assert _ok(_alter(client, "t"))["config"] == {**DEFAULT_CONFIG, "retention_ms": 5000}


KNOWN_KEYS = ("cleanup_policy, retention_ms, retention_bytes, delete_retention_ms, check_expected_offsets, "
              "max_message_bytes, value_format")


def test_alter_with_an_unknown_key_names_the_known_ones(client) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "t", 1)

    refusal = _refused(_alter(client, "t", segment_ms=1), 422, "INVALID_REQUEST")

    assert refusal["message"] == (f"invalid request: body.config: Object contains unknown field `segment_ms`; "
                                  f"known fields: {KNOWN_KEYS}")


def test_create_with_an_unknown_config_key_names_the_known_ones(client) -> None:  # type: ignore[no-untyped-def]
    refusal = _refused(client.post("/v1/topics", json={"name": "t", "config": {"segment_ms": 1}}), 422,
                       "INVALID_REQUEST")

    assert refusal["message"] == (f"invalid request: body.config: Object contains unknown field `segment_ms`; "
                                  f"known fields: {KNOWN_KEYS}")


def test_create_with_a_config_key_beside_the_name_says_it_goes_in_config(client) -> None:  # type: ignore[no-untyped-def]
    refusal = _refused(client.post("/v1/topics", json={"name": "raw", "value_format": "bytes"}), 422,
                       "INVALID_REQUEST")

    assert refusal["message"] == ("invalid request: body: Object contains unknown field `value_format`; "
                                  "known fields: name, partitions, config; `value_format` goes in `config`")
    assert client.get("/v1/topics/raw").status_code == 404


def test_alter_of_check_expected_offsets_acts_on_the_next_send(client) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "t", 1)
    _ok(_alter(client, "t", check_expected_offsets=True))

    _refused(send(client, [batch("t", 0, ["a"])]), 400, "INVALID_REQUEST")
    _ok(send(client, [batch("t", 0, ["a"], expected_offset=0)]))
    _ok(_alter(client, "t", check_expected_offsets=False))
    _ok(send(client, [batch("t", 0, ["b"])]))


def test_list_shows_the_altered_config(client) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "t", 2)
    answer = _ok(_alter(client, "t", retention_bytes=10))

    listed = client.get("/v1/topics").json()["topics"]

    assert listed == [{"name": "t", "partition_count": 2, "value_format": "json", "config": answer["config"]}]


# --- CreatePartitions ---------------------------------------------------------------------------------


def test_add_partitions_answers_the_topic_with_the_new_empty_partitions(client) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "t", 1)
    _ok(send(client, [batch("t", 0, ["a", "b"])]))

    answer = _ok(_add_partitions(client, "t", 3))

    assert answer["partition_count"] == 3
    assert answer["partitions"] == [
        {"partition": 0, "log_start_offset": 0, "log_end_offset": 2, "last_stable_offset": 2,
         "record_count": 2, "size_bytes": 6, "high_watermark": 2},
        _empty(1), _empty(2),
    ]
    assert client.get("/v1/topics/t").json() == answer
    assert client.get("/v1/topics").json()["topics"][0]["partition_count"] == 3


def test_a_send_to_an_added_partition_is_written_and_read(client) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "t", 1)
    _ok(_add_partitions(client, "t", 2))

    results = _ok(send(client, [batch("t", 1, ["x", "y"])]))["results"]

    assert (results[0]["partition"], results[0]["base_offset"], results[0]["last_offset"]) == (1, 0, 1)
    assert values(fetch(client, "t", 1)) == ["x", "y"]


def test_a_transaction_writes_to_an_added_partition(client) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "t", 1)
    p = init_producer(client, "tx")
    begin(client, "tx", p)
    _ok(send(client, [batch("t", 0, ["a"], 0)], p, "tx"))
    _ok(_add_partitions(client, "t", 2))

    _ok(send(client, [batch("t", 1, ["b"], 0)], p, "tx"))
    _commit(client, "tx", p)

    assert (values(fetch(client, "t", 0)), values(fetch(client, "t", 1))) == (["a"], ["b"])


@pytest.mark.parametrize(("count", "message"), [
    (2, "topic 't' already has 2 partitions"),
    (1, "topic 't' has 2 partitions, more than the 1 asked for: partitions can be added, never removed"),
])
def test_a_partition_count_not_above_the_current_one_is_refused(client, count: int, message: str) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "t", 2)

    body = _refused(_add_partitions(client, "t", count), 400, "INVALID_PARTITIONS")

    assert body["message"] == message
    assert client.get("/v1/topics/t").json()["partition_count"] == 2


def test_a_partition_count_above_the_limit_is_refused(settings, clock) -> None:  # type: ignore[no-untyped-def]
    with TestClient(create_app(settings.model_copy(update={"max_partitions_per_topic": 3}), clock)) as client:
        create_topic(client, "t", 1)

        body = _refused(_add_partitions(client, "t", 4), 400, "INVALID_PARTITIONS")

        assert body["message"] == "partition_count must be at most 3 (OUTBOX_MAX_PARTITIONS_PER_TOPIC)"
        assert _ok(_add_partitions(client, "t", 3))["partition_count"] == 3


# --- DeleteTopics ------------------------------------------------------------------------------------


def test_a_deleted_topic_is_gone_at_once(client) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "gone", 2)
    create_topic(client, "kept", 1)
    _ok(send(client, [batch("gone", 0, ["a"])]))

    r = client.delete("/v1/topics/gone")

    assert (r.status_code, r.content) == (204, b"")
    assert [t["name"] for t in client.get("/v1/topics").json()["topics"]] == ["kept"]
    _refused(client.get("/v1/topics/gone"), 404, "UNKNOWN_TOPIC_OR_PARTITION")
    _refused(client.get("/v1/topics/gone/partitions/0/records"), 404, "UNKNOWN_TOPIC_OR_PARTITION")
    _refused(send(client, [batch("gone", 0, ["b"])]), 404, "UNKNOWN_TOPIC_OR_PARTITION")
    _refused(client.delete("/v1/topics/gone"), 404, "UNKNOWN_TOPIC_OR_PARTITION")


def test_a_deleted_topics_records_stay_queued_for_the_log_cleaner(client, db_url, clock) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "gone", 1)
    (topic_id,), = _rows(db_url, select(topics.c.topic_id).where(topics.c.name == "gone"))
    _ok(send(client, [batch("gone", 0, ["a", "b"])]))

    assert client.delete("/v1/topics/gone").status_code == 204

    assert _rows(db_url, select(deleted_topics)) == [(topic_id, "gone", clock.now_ms)]
    assert _rows(db_url, select(records.c.offset).where(records.c.topic_id == topic_id)) == [(0,), (1,)]


def test_delete_is_refused_while_a_transaction_writes_to_the_topic_naming_it(client) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "t", 2)
    p = init_producer(client, "writer")
    begin(client, "writer", p)
    _ok(send(client, [batch("t", 1, ["a"], 0)], p, "writer"))

    body = _refused(client.delete("/v1/topics/t"), 409, "TOPIC_HAS_OPEN_TRANSACTIONS")

    assert body == {
        "error_code": "TOPIC_HAS_OPEN_TRANSACTIONS",
        "message": "topic 't' is in unfinished transactions of transactional_id(s) writer: wait for them "
                   "to commit or abort, or abort them (`outbox transactions abort ID`), then delete the topic",
        "retriable": False,
        "details": {"transactional_ids": ["writer"]},
    }
    assert client.get("/v1/topics/t").status_code == 200


def test_delete_is_allowed_once_the_transaction_commits(client) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "t", 1)
    p = init_producer(client, "writer")
    begin(client, "writer", p)
    _ok(send(client, [batch("t", 0, ["a"], 0)], p, "writer"))
    assert client.delete("/v1/topics/t").status_code == 409

    _commit(client, "writer", p)

    assert client.delete("/v1/topics/t").status_code == 204


def test_delete_is_refused_while_a_transaction_stages_offsets_for_the_topic(client) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "input", 1)
    create_topic(client, "output", 1)
    p = init_producer(client, "copier")
    begin(client, "copier", p)
    _ok(client.post("/v1/transactions/copier/offsets", json={
        **ident(p), "group_id": "g", "offsets": [{"topic": "input", "partition": 0, "offset": 1}]}))

    body = _refused(client.delete("/v1/topics/input"), 409, "TOPIC_HAS_OPEN_TRANSACTIONS")

    assert body["details"] == {"transactional_ids": ["copier"]}
    assert client.delete("/v1/topics/output").status_code == 204


def test_delete_names_every_transaction_in_the_way(client) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "t", 2)
    for tid, partition in (("b-writer", 0), ("a-writer", 1)):
        p = init_producer(client, tid)
        begin(client, tid, p)
        _ok(send(client, [batch("t", partition, ["x"], 0)], p, tid))
    stager = init_producer(client, "c-stager")
    begin(client, "c-stager", stager)
    _ok(client.post("/v1/transactions/c-stager/offsets", json={
        **ident(stager), "group_id": "g", "offsets": [{"topic": "t", "partition": 0, "offset": 0}]}))

    body = _refused(client.delete("/v1/topics/t"), 409, "TOPIC_HAS_OPEN_TRANSACTIONS")

    assert body["details"] == {"transactional_ids": ["a-writer", "b-writer", "c-stager"]}


def test_a_topic_created_again_after_delete_is_new_and_empty(client, db_url) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "t", 2)
    (old_id,), = _rows(db_url, select(topics.c.topic_id).where(topics.c.name == "t"))
    _ok(send(client, [batch("t", 0, ["old-0", "old-1"]), batch("t", 1, ["old-2"])]))
    p = init_producer(client, "tx")
    begin(client, "tx", p)
    _ok(send(client, [batch("t", 0, ["old-txn"], 0)], p, "tx"))
    _commit(client, "tx", p)
    assert client.delete("/v1/topics/t").status_code == 204

    again = create_topic(client, "t", 1)

    (new_id,), = _rows(db_url, select(topics.c.topic_id).where(topics.c.name == "t"))
    assert new_id > old_id
    assert again["partitions"] == [_empty(0)]
    for isolation in ("read_committed", "read_uncommitted"):
        page = fetch(client, "t", 0, isolation=isolation)
        assert (page["records"], page["high_watermark"]) == ([], 0)
    _ok(send(client, [batch("t", 0, ["new"])]))
    assert values(fetch(client, "t", 0)) == ["new"]


def test_a_deleted_topics_group_offsets_are_deleted(client, db_url) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "t", 1)
    create_topic(client, "other", 1)
    _ok(client.post("/v1/groups/g/offsets", json={"offsets": [
        {"topic": "t", "partition": 0, "offset": 5}, {"topic": "other", "partition": 0, "offset": 7}]}))

    assert client.delete("/v1/topics/t").status_code == 204
    create_topic(client, "t", 1)

    offsets = client.get("/v1/groups/g/offsets").json()["offsets"]
    assert [(o["topic"], o["offset"]) for o in offsets] == [("other", 7)]
    assert len(_rows(db_url, select(group_offsets))) == 1


def test_a_deleted_topics_producer_sequence_state_is_deleted(client, db_url) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "t", 1)
    create_topic(client, "other", 1)
    idem = init_producer(client)
    _ok(send(client, [batch("t", 0, ["a"], 0), batch("other", 0, ["b"], 0)], idem))

    assert client.delete("/v1/topics/t").status_code == 204

    (other_id,), = _rows(db_url, select(topics.c.topic_id).where(topics.c.name == "other"))
    assert [r[0] for r in _rows(db_url, select(producer_partitions.c.topic_id))] == [other_id]


def test_a_transaction_cannot_write_to_a_deleted_topic(client) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "t", 1)
    create_topic(client, "other", 1)
    p = init_producer(client, "tx")
    begin(client, "tx", p)
    _ok(send(client, [batch("other", 0, ["a"], 0)], p, "tx"))
    assert client.delete("/v1/topics/t").status_code == 204

    _refused(send(client, [batch("t", 0, ["b"], 0)], p, "tx"), 404, "UNKNOWN_TOPIC_OR_PARTITION")
    _commit(client, "tx", p)
    assert values(fetch(client, "other", 0)) == ["a"]


# --- DeleteRecords -----------------------------------------------------------------------------------


def test_delete_records_moves_the_log_start_and_answers_it(client) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "t", 2)
    _ok(send(client, [batch("t", 1, ["a", "b", "c"])]))

    answer = _ok(_delete_records(client, "t", 1, 2))

    assert answer == {"topic": "t", "partition": 1, "log_start_offset": 2}
    described = client.get("/v1/topics/t").json()["partitions"]
    # The records below the log start are counted until the log cleaner deletes them.
    assert described == [_empty(0), {"partition": 1, "log_start_offset": 2, "log_end_offset": 3,
                                     "last_stable_offset": 3, "record_count": 3, "size_bytes": 9,
                                     "high_watermark": 3}]
    page = fetch(client, "t", 1, offset=2)
    assert (page["log_start_offset"], values(page)) == (2, ["c"])


@pytest.mark.parametrize("isolation", ["read_committed", "read_uncommitted"])
def test_a_fetch_below_the_new_log_start_is_out_of_range(client, isolation: str) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "t", 1)
    _ok(send(client, [batch("t", 0, ["a", "b", "c"])]))
    _ok(_delete_records(client, "t", 0, 2))

    r = client.get("/v1/topics/t/partitions/0/records", params={"offset": 1, "isolation": isolation})

    body = _refused(r, 416, "OFFSET_OUT_OF_RANGE")
    assert body["details"] == {"log_start_offset": 2, "log_end_offset": 3}


def test_read_committed_from_the_new_log_start_returns_exactly_the_committed_records_at_or_after_it(client) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "t", 1)
    p = init_producer(client, "tx")
    begin(client, "tx", p)
    _ok(send(client, [batch("t", 0, ["txn-0", "txn-1", "txn-2"], 0)], p, "tx"))   # offsets 0-2
    _ok(send(client, [batch("t", 0, ["plain-3"])]))                             # 3
    _commit(client, "tx", p)                                                    # COMMIT at 4
    _ok(send(client, [batch("t", 0, ["plain-5"])]))                             # 5
    aborted = init_producer(client, "aborted")
    begin(client, "aborted", aborted)
    _ok(send(client, [batch("t", 0, ["aborted-6"], 0)], aborted, "aborted"))   # 6
    _ok(client.post("/v1/transactions/aborted/abort", json=ident(aborted)))   # ABORT at 7

    # 2 would cut the transaction committed at 4 (test_delete_records_clean_cut.py): refused.
    _refused(_delete_records(client, "t", 0, 2), 416, "OFFSET_OUT_OF_RANGE")
    _ok(_delete_records(client, "t", 0, 5))

    page = fetch(client, "t", 0, offset=5)
    assert [(r["offset"], r["commit_position"], r["value"]) for r in page["records"]] == [(5, 5, "plain-5")]
    assert page["next_offset"] == 8
    # An aborted transaction may be cut: no read_committed reader is shown its records.
    assert _ok(_delete_records(client, "t", 0, 7))["log_start_offset"] == 7
    page = fetch(client, "t", 0, offset=7)
    assert (page["records"], page["next_offset"]) == ([], 8)


def test_delete_records_up_to_the_log_end_leaves_nothing_to_read(client) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "t", 1)
    _ok(send(client, [batch("t", 0, ["a", "b"])]))

    assert _ok(_delete_records(client, "t", 0, 2))["log_start_offset"] == 2

    page = fetch(client, "t", 0, offset=2)
    assert (page["records"], page["log_start_offset"], page["high_watermark"]) == ([], 2, 2)
    _ok(send(client, [batch("t", 0, ["c"])]))
    assert values(fetch(client, "t", 0, offset=2)) == ["c"]


def test_delete_records_past_the_last_stable_offset_is_refused_with_the_bounds(client) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "t", 1)
    _ok(send(client, [batch("t", 0, ["a"])]))                # 0
    p = init_producer(client, "tx")
    begin(client, "tx", p)
    _ok(send(client, [batch("t", 0, ["open"], 0)], p, "tx"))  # 1, open: last stable offset 1
    _ok(send(client, [batch("t", 0, ["b"])]))                # 2

    body = _refused(_delete_records(client, "t", 0, 2), 416, "OFFSET_OUT_OF_RANGE")

    assert body["details"] == {"log_start_offset": 0, "last_stable_offset": 1, "log_end_offset": 3}
    assert client.get("/v1/topics/t").json()["partitions"][0]["log_start_offset"] == 0
    assert _ok(_delete_records(client, "t", 0, 1))["log_start_offset"] == 1


def test_delete_records_past_the_log_end_is_refused(client) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "t", 1)
    _ok(send(client, [batch("t", 0, ["a"])]))

    body = _refused(_delete_records(client, "t", 0, 2), 416, "OFFSET_OUT_OF_RANGE")

    assert body["details"] == {"log_start_offset": 0, "last_stable_offset": 1, "log_end_offset": 1}


def test_delete_records_below_the_log_start_changes_nothing_and_answers_it(client) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "t", 1)
    _ok(send(client, [batch("t", 0, ["a", "b", "c"])]))
    _ok(_delete_records(client, "t", 0, 2))

    assert _ok(_delete_records(client, "t", 0, 1)) == {"topic": "t", "partition": 0, "log_start_offset": 2}
    assert client.get("/v1/topics/t").json()["partitions"][0]["log_start_offset"] == 2


def test_a_transaction_begun_after_delete_records_is_read_from_the_log_start(client) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "t", 1)
    _ok(send(client, [batch("t", 0, ["a", "b"])]))
    _ok(_delete_records(client, "t", 0, 2))
    p = init_producer(client, "tx")
    begin(client, "tx", p)

    _ok(send(client, [batch("t", 0, ["c", "d"], 0)], p, "tx"))
    _commit(client, "tx", p)

    assert values(fetch(client, "t", 0, offset=2)) == ["c", "d"]


# --- metrics ----------------------------------------------------------------------------------------


def test_refusals_of_topic_administration_are_counted_by_error_code(client) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "t", 1)
    p = init_producer(client, "writer")
    begin(client, "writer", p)
    _ok(send(client, [batch("t", 0, ["a"], 0)], p, "writer"))
    before = scrape(client)

    assert client.delete("/v1/topics/t").status_code == 409
    assert _add_partitions(client, "t", 1).status_code == 400
    assert _delete_records(client, "t", 0, 1).status_code == 416

    after = scrape(client)
    assert delta(before, after, "outbox_errors_total", error_code="TOPIC_HAS_OPEN_TRANSACTIONS") == 1
    assert delta(before, after, "outbox_errors_total", error_code="INVALID_PARTITIONS") == 1
    assert delta(before, after, "outbox_errors_total", error_code="OFFSET_OUT_OF_RANGE") == 1
    assert delta(before, after, "outbox_http_requests_total", method="DELETE", route="/v1/topics/{topic}",
                 status="409") == 1
