"""examples/pizza_income.py against the README's walkthrough data, run as a subprocess with
the venv's interpreter from the repository root, on both databases.

Its output must be the walkthrough's own: {"amount": price} keyed by the order's key, in the
partition with the order's partition number, in `income`; consumer group `pizza-income`.
(tests/e2e/test_exactly_once.py kills it with kill -9 under load.)
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from app.services.security import split_api_key
from tests.e2e.api import group_offsets, ok, read_all
from tests.log_start import move_log_start

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[2]
RUN_TIMEOUT_S = 120  # a guard against a hang, not a measure

# The walkthrough's orders, as README's "Some orders to consume" sends them, and after them
# one order the transform cannot handle per partition.
WALKTHROUGH_ORDERS = [
    {"topic": "orders", "partition": 0, "records": [
        {"key": "order-1", "value": {"pizza": "margherita", "price": 9.5}},
        {"key": "order-2", "value": {"pizza": "diavola", "price": 11}}]},
    {"topic": "orders", "partition": 1, "records": [
        {"key": "order-3", "value": {"pizza": "funghi", "price": 10}}]},
]
POISON = [
    {"topic": "orders", "partition": 0, "records": [
        {"key": "order-4", "value": {"pizza": "calzone"}, "headers": {"till": "2"}}]},
    {"topic": "orders", "partition": 1, "records": [
        {"key": "order-5", "value": "margherita"}]},
]
# The walkthrough's income records: (partition, key, value).
WALKTHROUGH_INCOME = [
    (0, "order-1", {"amount": 9.5}),
    (0, "order-2", {"amount": 11}),
    (1, "order-3", {"amount": 10}),
]
# Past every order, poison included: nothing is read again after a restart.
OFFSETS_PAST_EVERY_ORDER = [("orders", 0, 3), ("orders", 1, 2)]


def _create_topics(client: httpx.Client, *names: str) -> None:
    for name in names:
        ok(client.post("/v1/topics", json={"name": name, "partitions": 2}), 201)


def _send_orders(client: httpx.Client) -> None:
    ok(client.post("/v1/records", json={"batches": WALKTHROUGH_ORDERS}))
    ok(client.post("/v1/records", json={"batches": POISON}))


def _run_example(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "examples.pizza_income", "--url", url, *args],
        cwd=ROOT, capture_output=True, text=True, timeout=RUN_TIMEOUT_S,
    )


def _committed(client: httpx.Client, topic: str) -> list[tuple[int, str | None, Any, dict | None]]:
    """(partition, key, value, headers) of every read_committed record, by partition and offset."""
    out = []
    for partition in range(2):
        for r in read_all(client, topic, partition):
            assert r["transactional"], r  # written by the example's transactions
            out.append((partition, r["key"], r["value"], r["headers"]))
    return out


def _log_messages(stderr: str, level: str) -> list[str]:
    return re.findall(rf"^\S+ \S+ {level} (.*)$", stderr, flags=re.MULTILINE)


def test_the_walkthroughs_orders_become_its_income_and_the_poison_goes_to_the_dead_letter_topic(launcher):  # type: ignore[no-untyped-def]
    server = launcher.server()
    with server.client() as client:
        _create_topics(client, "orders", "income", "orders.dlq")
        _send_orders(client)

        done = _run_example(server.url, "--dead-letter-topic", "orders.dlq", "--idle-exit-s", "2")

        assert done.returncode == 0, done.stderr
        assert done.stdout == "processed 5 orders: 3 income records, 2 dead-lettered, 0 skipped\n"
        assert _committed(client, "income") == [(p, k, v, None) for p, k, v in WALKTHROUGH_INCOME]
        assert _committed(client, "orders.dlq") == [
            (0, "order-4", {"pizza": "calzone"}, {
                "till": "2",
                "dlq.reason": "order has no price",
                "dlq.original.topic": "orders", "dlq.original.partition": "0", "dlq.original.offset": "2",
            }),
            (1, "order-5", "margherita", {
                "dlq.reason": "value is not a JSON object but a string",
                "dlq.original.topic": "orders", "dlq.original.partition": "1", "dlq.original.offset": "1",
            }),
        ]
        assert group_offsets(client, "pizza-income") == OFFSETS_PAST_EVERY_ORDER
        assert _log_messages(done.stderr, "WARNING") == [
            "dead-lettered orders/0 offset 2 (key 'order-4') to orders.dlq: order has no price",
            "dead-lettered orders/1 offset 1 (key 'order-5') to orders.dlq: value is not a JSON object but a string",
        ]


def _wait_until_allowed(server, api_key: str, path: str, timeout_s: float = 10) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    with server.client(headers={"Authorization": f"Bearer {api_key}"}) as as_principal:
        while (status := as_principal.get(path).status_code) == 403 and time.monotonic() < deadline:
            time.sleep(0.05)
    assert status == 200, f"GET {path} still {status} after {timeout_s} s"


def test_with_authentication_on_it_runs_with_its_api_key_and_the_acls_the_readme_gives_it(launcher):  # type: ignore[no-untyped-def]
    import json
    import os

    server = launcher.server(authentication="api_key", super_users="User:admin")
    admin = json.loads(launcher.cli("principals", "create", "admin"))["api_key"]
    shop = json.loads(launcher.cli("principals", "create", "pizza-shop"))["api_key"]
    # README, "Authentication and ACLs": the pizza shop's three commands.
    # The topic income's comes last: the wait below looks for it, and a snapshot of the ACLs that
    # holds it holds the two added before it (a refresh between two commands sees only some).
    launcher.cli("acls", "add", "--allow-principal", "User:pizza-shop", "--operation", "read", "--topic", "orders",
                 "--group", "pizza-income")
    launcher.cli("acls", "add", "--allow-principal", "User:pizza-shop", "--operation", "write",
                 "--transactional-id", "pizza-income-", "--resource-pattern-type", "prefixed")
    launcher.cli("acls", "add", "--allow-principal", "User:pizza-shop", "--operation", "write", "--topic", "income")
    with server.client(headers={"Authorization": f"Bearer {admin}"}) as client:
        _create_topics(client, "orders", "income")
        ok(client.post("/v1/records", json={"batches": WALKTHROUGH_ORDERS}))
        # The CLI is another process: the server sees its ACLs within
        # OUTBOX_SECURITY_REFRESH_INTERVAL_MS (README), not at once.
        _wait_until_allowed(server, shop, "/v1/topics/income")
        refused = _run_example(server.url, "--idle-exit-s", "2")  # no key
        assert refused.returncode == 1 and "AUTHENTICATION_FAILED" in refused.stderr, refused.stderr
        done = subprocess.run(
            [sys.executable, "-m", "examples.pizza_income", "--url", server.url, "--idle-exit-s", "2"],
            cwd=ROOT, capture_output=True, text=True, timeout=RUN_TIMEOUT_S,
            env={**os.environ, "OUTBOX_API_KEY": shop},
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout == "processed 3 orders: 3 income records, 0 dead-lettered, 0 skipped\n"
        assert _committed(client, "income") == [(p, k, v, None) for p, k, v in WALKTHROUGH_INCOME]
    assert split_api_key(shop)[1] not in done.stderr + server.log_text()  # type: ignore[index]


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_without_an_api_key_it_says_to_give_one_with_api_key_or_outbox_api_key(launcher):  # type: ignore[no-untyped-def]
    server = launcher.server(authentication="api_key")

    refused = _run_example(server.url, "--idle-exit-s", "1")

    assert (refused.returncode, refused.stdout) == (1, "")
    assert _log_messages(refused.stderr, "ERROR") == [
        "stopping: AUTHENTICATION_FAILED: this operation needs credentials: an API key (Authorization: Bearer "
        "outbox_…); give this example its principal's API key with --api-key KEY or OUTBOX_API_KEY=KEY "
        "(`outbox principals create NAME` makes one)"]


def test_without_a_dead_letter_topic_the_poison_is_skipped_with_a_warning_naming_it(launcher):  # type: ignore[no-untyped-def]
    server = launcher.server()
    with server.client() as client:
        _create_topics(client, "orders", "income")
        _send_orders(client)

        done = _run_example(server.url, "--idle-exit-s", "2")

        assert done.returncode == 0, done.stderr
        assert done.stdout == "processed 5 orders: 3 income records, 0 dead-lettered, 2 skipped\n"
        assert _committed(client, "income") == [(p, k, v, None) for p, k, v in WALKTHROUGH_INCOME]
        assert group_offsets(client, "pizza-income") == OFFSETS_PAST_EVERY_ORDER
        assert _log_messages(done.stderr, "WARNING") == [
            "skipped orders/0 offset 2 (key 'order-4'): order has no price",
            "skipped orders/1 offset 1 (key 'order-5'): value is not a JSON object but a string",
        ]


def test_offsets_below_the_log_start_start_at_the_oldest_order_still_there(launcher):  # type: ignore[no-untyped-def]
    server = launcher.server()
    with server.client() as client:
        _create_topics(client, "orders", "income")
        ok(client.post("/v1/records", json={"batches": WALKTHROUGH_ORDERS}))
        ok(client.post("/v1/records", json={"batches": [{"topic": "orders", "partition": 0, "records": [
            {"key": "order-6", "value": {"pizza": "marinara", "price": 8}}]}]}))  # offset 2
        # The group had processed order-1; retention then deleted order-1 and order-2.
        ok(client.post("/v1/groups/pizza-income/offsets", json={"offsets": [
            {"topic": "orders", "partition": 0, "offset": 1}, {"topic": "orders", "partition": 1, "offset": 0}]}))
        move_log_start(launcher.backend.engine, "orders", 0, 2)

        done = _run_example(server.url, "--idle-exit-s", "2")

        assert done.returncode == 0, done.stderr
        assert done.stdout == "processed 2 orders: 2 income records, 0 dead-lettered, 0 skipped\n"
        assert _committed(client, "income") == [(0, "order-6", {"amount": 8}, None),
                                                 (1, "order-3", {"amount": 10}, None)]
        assert group_offsets(client, "pizza-income") == [("orders", 0, 3), ("orders", 1, 1)]
        assert _log_messages(done.stderr, "WARNING") == [
            "group pizza-income: orders/0: position 1 is below the log start 2 (the records before it were "
            "deleted); resetting it to the log start, offset 2 (auto_offset_reset=earliest)",
        ]


def _requests_by_route(client: httpx.Client) -> dict[tuple[str, str, str], float]:
    """outbox_http_requests_total by (method, route, status), scrapes of /metrics left out."""
    counts = {}
    for family in text_string_to_metric_families(client.get("/metrics").text):
        if family.name == "outbox_http_requests":
            for s in family.samples:
                if s.name == "outbox_http_requests_total" and s.labels["route"] != "/metrics":
                    counts[(s.labels["method"], s.labels["route"], s.labels["status"])] = s.value
    return counts


@pytest.mark.parametrize("missing, args, found_first", [
    ("income", [], 0),
    ("orders.dlq", ["--dead-letter-topic", "orders.dlq"], 2),  # after income and orders
])
def test_a_missing_topic_ends_the_example_with_one_line_and_no_other_request(launcher, missing, args, found_first):  # type: ignore[no-untyped-def]
    server = launcher.server()
    with server.client() as client:
        _create_topics(client, *{"orders", "income", "orders.dlq"} - {missing})
        _send_orders(client)
        before = _requests_by_route(client)

        done = _run_example(server.url, *args)

        after = _requests_by_route(client)
        assert done.returncode == 1
        assert done.stdout == ""
        assert done.stderr.splitlines() == [
            f"topic {missing!r} does not exist; create it with: curl -s -X POST {server.url}/v1/topics "
            f"""-H 'content-type: application/json' -d '{{"name": "{missing}", "partitions": 2}}'"""
        ]
        made = {k: after[k] - before.get(k, 0) for k in after if after[k] != before.get(k, 0)}
        # Topic lookups only: no InitProducerId (a running instance is not fenced), no join.
        assert made == {
            **({("GET", "/v1/topics/{topic}", "200"): found_first} if found_first else {}),
            ("GET", "/v1/topics/{topic}", "404"): 1,
        }


def _offsets_once_stable(client: httpx.Client) -> list[tuple[str, int, int]] | None:
    """The group's offsets, or None while a transaction of the example stages new ones."""
    r = client.get("/v1/groups/pizza-income/offsets")
    if r.status_code == 409:
        return None
    return [(o["topic"], o["partition"], o["offset"]) for o in ok(r)["offsets"]]


def test_ctrl_c_once_the_work_is_done_ends_the_example_with_its_totals_and_no_traceback(launcher):  # type: ignore[no-untyped-def]
    server = launcher.server()
    with server.client() as client:
        _create_topics(client, "orders", "income")
        _send_orders(client)
        proc = subprocess.Popen(
            [sys.executable, "-m", "examples.pizza_income", "--url", server.url],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            # As from a terminal: a test run started in the background (`cmd &` in a script)
            # ignores SIGINT, children inherit that, and Python then never turns it into
            # KeyboardInterrupt.
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
        try:
            # Wait until it has done the work there is, then interrupt it at once. The offsets
            # are the service's as soon as its last Commit is, which may be before the example
            # has read that Commit's answer: interrupted then, it asks the service whether the
            # Commit committed, and counts it as it would have.
            deadline = time.monotonic() + RUN_TIMEOUT_S
            while _offsets_once_stable(client) != OFFSETS_PAST_EVERY_ORDER:
                assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()
                time.sleep(0.1)
            proc.send_signal(signal.SIGINT)
            _, stderr = proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
        assert proc.returncode == 130, stderr
        assert "Traceback" not in stderr, stderr
        assert stderr.splitlines()[-1] == "interrupted after 5 orders: 3 income records, 0 dead-lettered, 2 skipped"
        assert _committed(client, "income") == [(p, k, v, None) for p, k, v in WALKTHROUGH_INCOME]
        assert group_offsets(client, "pizza-income") == OFFSETS_PAST_EVERY_ORDER
        assert _log_messages(stderr, "WARNING") == [
            "skipped orders/0 offset 2 (key 'order-4'): order has no price",
            "skipped orders/1 offset 1 (key 'order-5'): value is not a JSON object but a string",
        ]
