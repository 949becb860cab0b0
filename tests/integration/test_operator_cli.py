"""`outbox transactions …` and `outbox groups …` against the configured database, on SQLite and
PostgreSQL. Each command is run by app.cli.main in the test's process (the conftest's `cli`,
tests/outbox_command.py), which answers as `python -m app.cli` does without a Python start-up."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.e2e import readme
from tests.helpers import batch, begin, create_topic, ident, init_producer, send

ROOT = Path(__file__).resolve().parents[2]


def test_operator_lists_describes_and_aborts_an_open_transaction(cli, client, db_url):  # type: ignore[no-untyped-def]
    create_topic(client, "t", 1)
    p = init_producer(client, "stuck")
    begin(client, "stuck", p)
    send(client, [batch("t", 0, ["a"], 0)], p, "stuck")
    init_producer(client, "idle")

    listed = cli(db_url, "transactions", "list", "--state", "Ongoing")
    assert listed.returncode == 0, listed.stderr
    assert [t["transactional_id"] for t in json.loads(listed.stdout)["transactions"]] == ["stuck"]

    described = json.loads(cli(db_url, "transactions", "describe", "stuck").stdout)
    assert described["state"] == "Ongoing"
    assert described["partitions"] == [{"topic": "t", "partition": 0, "first_offset": 0}]

    aborted = cli(db_url, "transactions", "abort", "stuck")
    assert aborted.returncode == 0, aborted.stderr
    assert json.loads(aborted.stdout)["state"] == "CompleteAbort"
    r = client.get("/v1/transactions/stuck").json()
    assert (r["state"], r["producer_epoch"]) == ("CompleteAbort", p["producer_epoch"] + 1)


def test_operator_abort_of_a_prepared_transaction_needs_force_prepared(cli, client, db_url):  # type: ignore[no-untyped-def]
    create_topic(client, "t", 1)
    p = init_producer(client, "shop-1")
    txn_id = begin(client, "shop-1", p)["txn_id"]
    send(client, [batch("t", 0, ["a"], 0)], p, "shop-1")
    assert client.post("/v1/transactions/shop-1/prepare", json={**ident(p), "txn_id": txn_id}).status_code == 200

    listed = json.loads(cli(db_url, "transactions", "list", "--min-age-ms", "0").stdout)["transactions"]
    refused = cli(db_url, "transactions", "abort", "shop-1")

    assert [(t["state"], t["awaits_application_decision"]) for t in listed] == [("Prepared", True)]
    assert (refused.returncode, refused.stdout) == (1, "")
    assert refused.stderr.startswith("outbox: error: TRANSACTION_PREPARED: transaction of 'shop-1' is Prepared")
    assert client.get("/v1/transactions/shop-1").json()["state"] == "Prepared"
    forced = cli(db_url, "transactions", "abort", "shop-1", "--force-prepared")
    assert forced.returncode == 0, forced.stderr
    assert json.loads(forced.stdout)["state"] == "CompleteAbort"


def test_transactions_describe_shows_staged_offsets_metadata_as_committed_nul_and_backslashes_included(cli: Any, 
        client: Any, db_url: str) -> None:
    create_topic(client, "t", 1)
    p = init_producer(client, "staging")
    begin(client, "staging", p)
    metadata = "nul\x00 back\\slash \\0"
    assert client.post("/v1/transactions/staging/offsets", json={
        **ident(p), "group_id": "billing", "offsets": [{"topic": "t", "partition": 0, "offset": 4,
                                                        "metadata": metadata}]}).status_code == 200

    described = cli(db_url, "transactions", "describe", "staging")
    assert described.returncode == 0, described.stderr
    assert json.loads(described.stdout)["pending_offsets"] == [
        {"group_id": "billing", "topic": "t", "partition": 0, "offset": 4, "metadata": metadata, "leader_epoch": -1}]

def test_transactions_list_by_age_in_a_state_with_none_open_is_refused(cli, db_url):  # type: ignore[no-untyped-def]
    done = cli(db_url, "transactions", "list", "--state", "CompleteCommit", "--min-age-ms", "0")

    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == (
        "outbox: error: INVALID_REQUEST: min_age_ms lists open transactions only (states Ongoing, Prepared, "
        "PrepareCommit, PrepareAbort); in state CompleteCommit no transaction is open: list it "
        "without min_age_ms\n")


def test_swagger_ui_is_served(client):  # type: ignore[no-untyped-def]
    r = client.get("/docs")
    assert r.status_code == 200 and "swagger" in r.text.lower()


def test_outbox_groups_lag_shows_a_never_committed_groups_lag_as_unknown(cli, client, db_url):  # type: ignore[no-untyped-def]
    create_topic(client, "deliveries", 1)
    assert send(client, [batch("deliveries", 0, [1, 2])]).status_code == 200
    joined = client.post("/v1/groups/g1/members", json={"topics": ["deliveries"], "session_timeout_ms": 600_000})
    assert joined.status_code == 200

    done = cli(db_url, "groups", "lag", "g1")

    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {
        "group_id": "g1", "total_lag": None, "total_lag_unknown_reason": "no_committed_offset",
        "partitions": [{"topic": "deliveries", "partition": 0, "committed_offset": None, "log_start_offset": 0,
                        "high_watermark": 2, "last_stable_offset": 2, "lag": None, "lag_exact": True,
                        "pending": False, "read_order": None}]}
    assert json.loads(done.stdout) == client.get("/v1/groups/g1/lag").json()
    # README, "Consumer groups (KIP-447)", shows this run, as printed: the same topic, records and join.
    steps = readme.console_steps(readme.section((ROOT / "README.md").read_text(), "Consumer groups (KIP-447)"))
    (shown,) = [step.shown for step in steps if step.command == ".venv/bin/outbox groups lag g1"]
    assert done.stdout.strip() == shown
    (join,) = [step.command for step in steps if "/v1/groups/g1/members" in step.command]
    assert '{"topics": ["deliveries"], "session_timeout_ms": 600000}' in join


def test_outbox_groups_lag_shows_a_committed_groups_lag_in_records(cli, client, db_url):  # type: ignore[no-untyped-def]
    create_topic(client, "orders", 1)
    assert send(client, [batch("orders", 0, ["o1", "o2", "o3"])]).status_code == 200
    assert client.post("/v1/groups/g/offsets", json={"offsets": [
        {"topic": "orders", "partition": 0, "offset": 1}]}).status_code == 200

    out = json.loads(cli(db_url, "groups", "lag", "g").stdout)

    assert (out["total_lag"], out["total_lag_unknown_reason"], out["partitions"][0]["lag"]) == (2, None, 2)


def test_outbox_groups_lag_of_an_unknown_group_is_one_line_and_exit_1(cli, db_url):  # type: ignore[no-untyped-def]
    done = cli(db_url, "groups", "lag", "nobody")
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == "outbox: error: GROUP_ID_NOT_FOUND: no consumer group 'nobody'\n"


def test_outbox_groups_list_pages_with_limit_and_after(cli, client, db_url):  # type: ignore[no-untyped-def]
    create_topic(client, "t", 1)
    for g in ("b", "a"):
        assert client.post(f"/v1/groups/{g}/offsets",
                           json={"offsets": [{"topic": "t", "partition": 0, "offset": 0}]}).status_code == 200

    first = cli(db_url, "groups", "list", "--limit", "1")
    rest = cli(db_url, "groups", "list", "--limit", "1", "--after", "a")

    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout) == {"groups": [{"group_id": "a", "generation_id": None, "member_count": 0}],
                                        "next_after": "a"}
    assert json.loads(rest.stdout) == {"groups": [{"group_id": "b", "generation_id": None, "member_count": 0}],
                                       "next_after": "b"}
