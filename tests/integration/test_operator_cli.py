"""`outbox transactions …` against the configured database, on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.helpers import batch, begin, create_topic, init_producer, send

ROOT = Path(__file__).resolve().parents[2]


def _outbox(db_url: str, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "OUTBOX_DATABASE_URL": db_url}
    return subprocess.run([sys.executable, "-m", "app.cli", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)


def test_operator_lists_describes_and_aborts_an_open_transaction(client, db_url):  # type: ignore[no-untyped-def]
    create_topic(client, "t", 1)
    p = init_producer(client, "stuck")
    begin(client, "stuck", p)
    send(client, [batch("t", 0, ["a"], 0)], p, "stuck")
    init_producer(client, "idle")

    listed = _outbox(db_url, "transactions", "list", "--state", "Ongoing")
    assert listed.returncode == 0, listed.stderr
    assert [t["transactional_id"] for t in json.loads(listed.stdout)] == ["stuck"]

    described = json.loads(_outbox(db_url, "transactions", "describe", "stuck").stdout)
    assert described["state"] == "Ongoing"
    assert described["partitions"] == [{"topic": "t", "partition": 0, "first_offset": 0}]

    aborted = _outbox(db_url, "transactions", "abort", "stuck")
    assert aborted.returncode == 0, aborted.stderr
    assert json.loads(aborted.stdout)["state"] == "CompleteAbort"
    r = client.get("/v1/transactions/stuck").json()
    assert (r["state"], r["producer_epoch"]) == ("CompleteAbort", p["producer_epoch"] + 1)


def test_swagger_ui_is_served(client):  # type: ignore[no-untyped-def]
    r = client.get("/docs")
    assert r.status_code == 200 and "swagger" in r.text.lower()
