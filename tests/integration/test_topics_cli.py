"""`outbox topics …` against the configured database, on SQLite and PostgreSQL: each verb's
JSON answer is the HTTP API's, and what it changed is what the API then shows. Each command is run
by app.cli.main in the test's process (the conftest's `cli`, tests/outbox_command.py), which answers
as `python -m app.cli` does without a Python start-up."""

from __future__ import annotations

import json
import subprocess
from typing import Any

from tests.helpers import batch, begin, create_topic, ident, init_producer, send


def _json(result: subprocess.CompletedProcess) -> Any:
    assert (result.returncode, result.stderr) == (0, ""), result.stderr
    return json.loads(result.stdout)


def test_list_prints_every_topic_as_the_api_lists_it(cli, client, db_url) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "b", 2)
    create_topic(client, "a", 1, retention_ms=1000)

    assert _json(cli(db_url, "topics", "list")) == client.get("/v1/topics").json()


def test_describe_prints_the_topic_as_the_api_describes_it(cli, client, db_url) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "t", 2)
    assert send(client, [batch("t", 1, ["a", "b"])]).status_code == 200

    assert _json(cli(db_url, "topics", "describe", "t")) == client.get("/v1/topics/t").json()


def test_create_makes_the_topic_with_its_config(cli, client, db_url) -> None:  # type: ignore[no-untyped-def]
    out = _json(cli(db_url, "topics", "create", "t", "--partitions", "2", "--config", "retention_ms=1000",
                        "--config", "check_expected_offsets=true"))

    assert out == client.get("/v1/topics/t").json()
    assert (out["partition_count"], out["config"]["retention_ms"], out["config"]["check_expected_offsets"]) == (
        2, 1000, True)


def test_create_without_max_message_bytes_gives_the_services_message_max_bytes(cli, client, db_url) -> None:  # type: ignore[no-untyped-def]
    made = cli(db_url, "topics", "create", "t", message_max_bytes="5000")
    chosen = _json(cli(db_url, "topics", "create", "u", "--config", "max_message_bytes=300"))

    assert _json(made)["config"]["max_message_bytes"] == 5000
    assert chosen["config"]["max_message_bytes"] == 300
    assert client.get("/v1/topics/u").json() == chosen


def test_alter_sets_the_keys_given_and_keeps_the_others(cli, client, db_url) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "t", 1, retention_ms=5000)

    out = _json(cli(db_url, "topics", "alter", "t", "cleanup_policy=compact,delete", "retention_bytes=100",
                        "max_message_bytes=2000"))

    assert out["config"] == {"cleanup_policy": "compact,delete", "retention_ms": 5000, "retention_bytes": 100,
                             "delete_retention_ms": 86_400_000, "check_expected_offsets": False,
                             "max_message_bytes": 2000, "value_format": "json"}
    assert client.get("/v1/topics/t").json() == out


def test_alter_takes_create_s_config_option_too(cli, client, db_url) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "t", 1)

    out = _json(cli(db_url, "topics", "alter", "t", "retention_ms=1000", "--config", "retention_bytes=100"))

    assert (out["config"]["retention_ms"], out["config"]["retention_bytes"]) == (1000, 100)


def test_alter_without_a_key_is_a_usage_error(cli, client, db_url) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "t", 1)

    result = cli(db_url, "topics", "alter", "t")

    assert (result.returncode, result.stdout, result.stderr) == (
        2, "", "outbox: error: topics alter: give at least one KEY=VALUE, e.g. retention_ms=86400000\n")


def test_alter_with_an_unknown_key_is_a_usage_error_that_changes_nothing(cli, client, db_url) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "t", 1)
    before = client.get("/v1/topics/t").json()

    result = cli(db_url, "topics", "alter", "t", "retention_ms=1", "segment_ms=5")

    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == ("outbox: error: config: Object contains unknown field `segment_ms`; known fields: "
                             "cleanup_policy, retention_ms, retention_bytes, delete_retention_ms, "
                             "check_expected_offsets, max_message_bytes, value_format\n")
    assert client.get("/v1/topics/t").json() == before


def test_create_with_an_unknown_key_names_the_known_ones_and_creates_nothing(cli, client, db_url) -> None:  # type: ignore[no-untyped-def]
    result = cli(db_url, "topics", "create", "t", "--config", "segment_ms=5")

    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == ("outbox: error: config: Object contains unknown field `segment_ms`; known fields: "
                             "cleanup_policy, retention_ms, retention_bytes, delete_retention_ms, "
                             "check_expected_offsets, max_message_bytes, value_format\n")
    assert client.get("/v1/topics").json() == {"topics": []}


def test_add_partitions_grows_the_topic(cli, client, db_url) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "t", 1)

    out = _json(cli(db_url, "topics", "add-partitions", "t", "3"))

    assert [p["partition"] for p in out["partitions"]] == [0, 1, 2]
    assert client.get("/v1/topics/t").json() == out


def test_delete_deletes_the_topic_and_prints_nothing_as_http_answers_204(cli, client, db_url) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "t", 1)

    done = cli(db_url, "topics", "delete", "t")

    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    assert client.get("/v1/topics/t").status_code == 404


def test_delete_of_a_topic_in_an_open_transaction_is_one_line_naming_it(cli, client, db_url) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "t", 1)
    p = init_producer(client, "writer")
    begin(client, "writer", p)
    assert send(client, [batch("t", 0, ["a"], 0)], p, "writer").status_code == 200

    result = cli(db_url, "topics", "delete", "t")

    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr == (
        "outbox: error: TOPIC_HAS_OPEN_TRANSACTIONS: topic 't' is in unfinished transactions of "
        "transactional_id(s) writer: wait for them to commit or abort, or abort them (`outbox "
        "transactions abort ID`), then delete the topic\n")


def test_delete_records_moves_the_log_start(cli, client, db_url) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "t", 2)
    assert send(client, [batch("t", 1, ["a", "b", "c"])]).status_code == 200

    out = _json(cli(db_url, "topics", "delete-records", "t", "1", "2"))

    assert out == {"topic": "t", "partition": 1, "log_start_offset": 2}
    assert client.get("/v1/topics/t").json()["partitions"][1]["log_start_offset"] == 2


def test_delete_records_across_a_committed_transaction_is_refused_naming_the_clean_cuts(cli, client, db_url) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "t", 1)
    p = init_producer(client, "tx")
    begin(client, "tx", p)
    assert send(client, [batch("t", 0, ["T"], 0)], p, "tx").status_code == 200      # 0
    assert send(client, [batch("t", 0, ["p1", "p2"])]).status_code == 200           # 1, 2
    assert client.post("/v1/transactions/tx/commit", json=ident(p)).status_code == 200  # marker 3

    result = cli(db_url, "topics", "delete-records", "t", "0", "2")

    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr == (
        "outbox: error: OFFSET_OUT_OF_RANGE: offset 2 would cut a transaction committed at 3 whose records "
        "begin at 0 (a reader in commit order that has not read it would lose it): delete up to 0, or up to 4 "
        "(log [0, 4])\n")
    assert client.get("/v1/topics/t").json()["partitions"][0]["log_start_offset"] == 0
    assert _json(cli(db_url, "topics", "delete-records", "t", "0", "4"))["log_start_offset"] == 4
