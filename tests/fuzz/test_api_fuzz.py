"""Schemathesis against openapi.yaml and the live app, on SQLite and PostgreSQL (the load and fault-injection work).

Three properties, one test each, every one a bounded and deterministic hypothesis run of
requests generated from the committed openapi.yaml (which test_openapi.py keeps equal to the
served spec) and sent to the in-process ASGI app:

- no request ever gets a 5xx;
- every response conforms to the spec: a declared status code, a declared content type, a
  body that validates against the declared schema (and declared headers);
- a refused request (4xx) leaves every table exactly as it was.

Each request starts from one seeded state (`_seed`: topics with plain, idempotent and
transactional records, an open transaction with staged group offsets, an idle, a committed,
an aborted and a fenced transactional id, committed group offsets, a group with a member).
Requests are a mix of schemathesis's own positive and negative cases and explicit requests
aimed at the seeded resources; either kind is then "steered": some path parameters, query
parameters and body fields (producer id and epoch, transactional id, topic, partition, group,
member, generation, txn_id, sequences, offsets) are replaced by seeded values, so the fuzzer
gets past the lookups into the state machine. After a request that changed something, the
tables are restored to the seeded snapshot.

OUTBOX_FUZZ_EXAMPLES sets the examples per test and backend (default 200). Every run has a
fixed seed per test and backend, so a failure repeats; OUTBOX_FUZZ_SEED=n shifts the seeds
for a different (equally repeatable) run.
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
import schemathesis
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, Phase, example, given, seed, settings
from hypothesis import strategies as st
from sqlalchemy import text
from schemathesis.checks import not_a_server_error
from schemathesis.errors import FailureGroup
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from app.api.app import create_app
from app.settings import Settings
from tests.conftest import FakeClock
from tests.fuzz.stored import Snapshot, StoredTables, diff
from tests.helpers import batch, begin, create_topic, ident, init_producer, send

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = schemathesis.openapi.from_path(ROOT / "openapi.yaml")
GENERATED = {mode: SCHEMA.as_strategy(mode) for mode in schemathesis.GenerationMode}
MAX_EXAMPLES = int(os.environ.get("OUTBOX_FUZZ_EXAMPLES", "200"))

CONFORMANCE = [
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    response_headers_conformance,
]


# Each property and backend has its own fixed seed (so the three tests send different requests);
# OUTBOX_FUZZ_SEED shifts them all, for a different deterministic run.
SEED_SHIFT = int(os.environ.get("OUTBOX_FUZZ_SEED", "0"))


def fuzz_seed(*names: str) -> int:
    return zlib.crc32("/".join(names).encode()) + SEED_SHIFT


def fuzz_settings(max_examples: int = MAX_EXAMPLES) -> settings:
    return settings(
        max_examples=max_examples,
        database=None,
        deadline=None,
        print_blob=True,
        report_multiple_bugs=False,
        suppress_health_check=list(HealthCheck),
        # No explain phase: its line tracing makes a failing run many times slower.
        phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink],
    )


def app_settings(url: str) -> Settings:
    return Settings(
        database_url=url,
        run_coordinator=False,
        auto_migrate=False,
        # An offset fetch with wait_ms would sleep in real time for a pending transaction.
        max_offset_fetch_wait_ms=0,
        # A long-poll Fetch whose min_records is not met waits its whole max_wait_ms, which the
        # document lets a request ask up to 600,000 ms: bounded here below the test client's
        # 10 s read timeout, or such a request is a client timeout, not an answer to check.
        fetch_max_wait_ms=1000,
        # Small limits, so that fuzzed requests reach them (and the tables stay small).
        max_partitions_per_topic=8,
        max_records_per_request=20,
        max_request_bytes=8192,
        fetch_max_records_limit=50,
    )


# --- the seeded state -------------------------------------------------------------------------


@dataclass
class Seed:
    """What the seeded state holds, as values for steering requests at it."""

    producers: dict[str, dict]  # name -> InitProducerId answer
    txn_ids: dict[str, int]  # transactional_id -> its (last) txn_id
    member_id: str
    generation_id: int
    hints: dict[str, list[Any]] = field(default_factory=dict)


def _ok(r) -> dict:  # type: ignore[no-untyped-def]
    assert r.status_code in (200, 201), r.text
    return r.json()


def _seed(client: TestClient) -> Seed:
    create_topic(client, "orders", 2)
    create_topic(client, "payments", 3)
    create_topic(client, "guarded", 1, check_expected_offsets=True)
    create_topic(client, "compacted", 1, cleanup_policy="compact")

    _ok(send(client, [batch("orders", 0, ["plain-0"]), batch("orders", 1, ["plain-1"])]))
    _ok(send(client, [batch("guarded", 0, ["g-0"], expected_offset=0)]))

    idem = init_producer(client)
    _ok(send(client, [batch("orders", 1, ["idem-0", "idem-1"], 0)], idem))

    _ok(client.post("/v1/groups/committed-group/offsets", json={"offsets": [
        {"topic": "orders", "partition": 0, "offset": 1, "metadata": "m"},
        {"topic": "orders", "partition": 1, "offset": 0},
    ]}))

    txn_ids: dict[str, int] = {}

    # A committed and an aborted transaction, each with records and staged offsets.
    for tid, end in (("committed-txn", "commit"), ("aborted-txn", "abort")):
        p = init_producer(client, tid)
        txn_ids[tid] = begin(client, tid, p)["txn_id"]
        _ok(send(client, [batch("payments", 0, [f"{tid}-0"], 0)], p, tid))
        _ok(client.post(f"/v1/transactions/{tid}/offsets", json={
            **ident(p), "group_id": "committed-group",
            "offsets": [{"topic": "payments", "partition": 0, "offset": 1}],
        }))
        _ok(client.post(f"/v1/transactions/{tid}/{end}", json={**ident(p), "txn_id": txn_ids[tid]}))

    # An open transaction: records in orders/0 and payments/1, offsets of txn-group staged.
    txn = init_producer(client, "open-txn")
    txn_ids["open-txn"] = begin(client, "open-txn", txn)["txn_id"]
    _ok(send(client, [batch("orders", 0, ["t-0", "t-1"], 0), batch("payments", 1, ["t-2"], 0)],
             txn, "open-txn"))
    _ok(client.post("/v1/transactions/open-txn/offsets", json={
        **ident(txn), "group_id": "txn-group",
        "offsets": [{"topic": "orders", "partition": 0, "offset": 3}],
    }))

    # A version 2 transactional id whose first transaction committed: its epoch moved to the
    # Commit's answer, and its next Send (not a Begin) begins the next transaction; the
    # identity it had before (in the hints with every other) is a delayed Send's.
    v2 = init_producer(client, "v2-txn", transaction_version=2)
    _ok(send(client, [batch("payments", 2, ["v2-0"], 0)], v2, "v2-txn"))
    v2_before = ident(v2)
    v2_commit = _ok(client.post("/v1/transactions/v2-txn/commit", json=v2_before))
    v2 = {**v2, "producer_epoch": v2_commit["producer_epoch"]}

    idle = init_producer(client, "idle-txn")
    stale = init_producer(client, "fenced-txn")
    current = init_producer(client, "fenced-txn")

    m = _ok(client.post("/v1/groups/member-group/members", json={"topics": ["orders"]}))

    producers = {
        "txn": txn, "idle": idle, "stale": stale, "current": current, "idem": idem, "v2": v2,
        "v2_before": {**v2, **v2_before},
        "committed": _ok(client.get("/v1/transactions/committed-txn")),
        "aborted": _ok(client.get("/v1/transactions/aborted-txn")),
    }
    seed = Seed(producers, txn_ids, m["member_id"], m["generation_id"])
    identities = [ident(p) for p in producers.values()]
    identities += [{"producer_id": i["producer_id"], "producer_epoch": i["producer_epoch"] + 1}
                   for i in identities]
    identities.append({"producer_id": 999_999, "producer_epoch": 0})
    seed.hints = {
        "identity": identities,
        "topic": ["orders", "payments", "guarded", "compacted", "no-such-topic",
                  "orders/partitions/0/records"],
        "name": ["orders", "fresh-topic", "bad name!", "__consumer_offsets", "."],
        "partition": [0, 1, 2, 3, 2**31 - 1],
        "transactional_id": ["open-txn", "idle-txn", "fenced-txn", "committed-txn", "v2-txn",
                             "aborted-txn", "no-such-txn", "open-txn/begin"],
        "group_id": ["txn-group", "committed-group", "member-group", "new-group", "member-group/offsets"],
        "member_id": [m["member_id"], "member-gone"],
        "generation_id": [m["generation_id"], m["generation_id"] + 1, 0],
        "txn_id": [*txn_ids.values(), 999_999],
        "base_sequence": [0, 1, 2, 3],
        "expected_offset": [0, 1, 2, 3, 5],
        "offset": [0, 1, 2, 3, 4, 10],
        "topics": [["orders"], ["orders", "payments"], ["no-such-topic"]],
        "session_timeout_ms": [999, 1000, 45_000, 1_800_001],
        "transaction_timeout_ms": [1, 60_000, 900_000, 900_001],
        "max_records": [1, 2, 50, 51],
        "partition_count": [1, 2, 3, 4, 8, 9],
        "isolation": ["read_committed", "read_uncommitted"],
        "state": [["Ongoing"], ["CompleteCommit", "CompleteAbort"], ["Empty"]],
        "wait_ms": [0, 1],
    }
    return seed


# --- explicit requests at the seeded resources --------------------------------------------------


def _explicit(s: Seed) -> list[tuple[str, str, dict, dict, Any]]:
    """(method, path, path parameters, query, body) aimed at the seeded state."""
    p = s.producers
    txn, idle, cur, idem = ident(p["txn"]), ident(p["idle"]), ident(p["current"]), ident(p["idem"])
    member = {"generation_id": s.generation_id, "member_id": s.member_id}
    tx = {"transactional_id": "open-txn"}
    out: list[tuple[str, str, dict, dict, Any]] = [
        ("POST", "/v1/producers", {}, {}, {"transactional_id": "open-txn"}),
        ("POST", "/v1/producers", {}, {}, {"transactional_id": "fenced-txn", **cur}),
        ("POST", "/v1/producers", {}, {}, {"transactional_id": "open-txn", **txn}),
        ("POST", "/v1/producers", {}, {}, {**idem}),
        ("POST", "/v1/producers", {}, {}, {"transactional_id": "idle-txn", "transaction_timeout_ms": 1000}),
        ("POST", "/v1/transactions/{transactional_id}/begin", {"transactional_id": "idle-txn"}, {}, idle),
        ("POST", "/v1/transactions/{transactional_id}/begin",
         {"transactional_id": "committed-txn"}, {}, ident(p["committed"])),
        ("POST", "/v1/transactions/{transactional_id}/begin", {"transactional_id": "open-txn"}, {}, txn),
        ("POST", "/v1/records", {}, {}, {**tx, **txn, "batches": [
            {"topic": "orders", "partition": 0, "base_sequence": 2, "records": [{"value": 1}]},
            {"topic": "payments", "partition": 2, "base_sequence": 0, "records": [{"key": "k", "value": {"a": [1]}}]},
        ]}),
        ("POST", "/v1/records", {}, {}, {**tx, **txn, "batches": [
            {"topic": "orders", "partition": 0, "base_sequence": 0, "records": [{"value": "t-0"}, {"value": "t-1"}]},
        ]}),
        ("POST", "/v1/records", {}, {}, {**tx, **txn, "batches": [
            {"topic": "guarded", "partition": 0, "base_sequence": 0, "expected_offset": 1, "records": [{"value": 1}]},
        ]}),
        ("POST", "/v1/records", {}, {}, {**idem, "batches": [
            {"topic": "orders", "partition": 1, "base_sequence": 2, "records": [{"value": 2}]},
        ]}),
        ("POST", "/v1/records", {}, {}, {**idem, "batches": [
            {"topic": "orders", "partition": 1, "base_sequence": 0, "records": [{"value": 0}, {"value": 1}]},
        ]}),
        ("POST", "/v1/records", {}, {}, {"batches": [
            {"topic": "guarded", "partition": 0, "expected_offset": 1, "records": [{"value": None}]},
            {"topic": "orders", "partition": 1, "records": [{"value": 1, "headers": {"h": "v"}, "timestamp_ms": 5}]},
        ]}),
        ("POST", "/v1/records", {}, {}, {"transactional_id": "v2-txn", **ident(p["v2"]), "batches": [
            {"topic": "payments", "partition": 2, "base_sequence": 0, "records": [{"value": "v2-1"}]},
        ]}),
        ("POST", "/v1/records", {}, {}, {"transactional_id": "v2-txn", **ident(p["v2_before"]), "batches": [
            {"topic": "payments", "partition": 2, "base_sequence": 1, "records": [{"value": "late"}]},
        ]}),
        ("POST", "/v1/transactions/{transactional_id}/commit", {"transactional_id": "v2-txn"}, {},
         ident(p["v2"])),
        ("POST", "/v1/transactions/{transactional_id}/abort", {"transactional_id": "v2-txn"}, {},
         ident(p["v2_before"])),
        ("POST", "/v1/records", {}, {}, {"transactional_id": "idle-txn", **idle, "batches": [
            {"topic": "orders", "partition": 0, "base_sequence": 0, "records": [{"value": 1}]},
        ]}),
        ("POST", "/v1/transactions/{transactional_id}/offsets", {"transactional_id": "open-txn"}, {},
         {**txn, "group_id": "member-group", **member,
          "offsets": [{"topic": "orders", "partition": 1, "offset": 2, "metadata": "x"}]}),
        ("POST", "/v1/transactions/{transactional_id}/offsets", {"transactional_id": "open-txn"}, {},
         {**txn, "group_id": "txn-group", "offsets": [{"topic": "orders", "partition": 0, "offset": 4}]}),
        ("POST", "/v1/transactions/{transactional_id}/commit", {"transactional_id": "open-txn"}, {},
         {**txn, "txn_id": s.txn_ids["open-txn"]}),
        ("POST", "/v1/transactions/{transactional_id}/abort", {"transactional_id": "open-txn"}, {}, txn),
        ("POST", "/v1/transactions/{transactional_id}/commit", {"transactional_id": "committed-txn"}, {},
         {**ident(p["committed"]), "txn_id": s.txn_ids["committed-txn"]}),
        ("POST", "/v1/transactions/{transactional_id}/abort", {"transactional_id": "fenced-txn"}, {},
         ident(p["stale"])),
        ("POST", "/v1/admin/transactions/{transactional_id}/abort", {"transactional_id": "open-txn"}, {}, None),
        ("POST", "/v1/groups/{group_id}/offsets", {"group_id": "member-group"}, {},
         {"offsets": [{"topic": "orders", "partition": 0, "offset": 1}], **member}),
        ("POST", "/v1/groups/{group_id}/offsets", {"group_id": "txn-group"}, {},
         {"offsets": [{"topic": "orders", "partition": 0, "offset": 2}]}),
        ("POST", "/v1/groups/{group_id}/members", {"group_id": "member-group"}, {},
         {"topics": ["orders", "payments"], "member_id": s.member_id}),
        ("POST", "/v1/groups/{group_id}/members", {"group_id": "member-group"}, {}, {"topics": ["orders"]}),
        ("POST", "/v1/groups/{group_id}/members/{member_id}/heartbeat",
         {"group_id": "member-group", "member_id": s.member_id}, {}, None),
        ("DELETE", "/v1/groups/{group_id}/members/{member_id}",
         {"group_id": "member-group", "member_id": s.member_id}, {}, None),
        ("GET", "/v1/groups/{group_id}/offsets", {"group_id": "txn-group"}, {"wait_ms": 1}, None),
        ("GET", "/v1/groups/{group_id}/offsets", {"group_id": "committed-group"},
         {"topic": "orders", "require_stable": True}, None),
        ("GET", "/v1/groups/{group_id}", {"group_id": "member-group"}, {}, None),
        ("GET", "/v1/transactions", {}, {"state": ["Ongoing", "PrepareCommit"], "min_age_ms": 0}, None),
        ("GET", "/v1/transactions", {}, {"hanging": True}, None),
        ("GET", "/v1/transactions/{transactional_id}", {"transactional_id": "open-txn"}, {}, None),
        ("GET", "/v1/topics/{topic}", {"topic": "payments"}, {}, None),
        # Ids never hold '/'; sent percent-encoded (%2F), one must not reach another route.
        ("GET", "/v1/topics/{topic}", {"topic": "orders/partitions/0/records"}, {}, None),
        ("GET", "/v1/groups/{group_id}", {"group_id": "committed-group/offsets"}, {}, None),
        ("GET", "/v1/transactions/{transactional_id}", {"transactional_id": "open-txn/begin"}, {}, None),
        ("POST", "/v1/transactions/{transactional_id}/abort", {"transactional_id": "x/y"}, {}, txn),
        ("POST", "/v1/topics", {}, {}, {"name": "orders", "partitions": 1}),
        ("POST", "/v1/topics", {}, {}, {"name": "fresh", "partitions": 9}),
        # Topic administration. orders/0 has open-txn's records from offset 1 (its last stable
        # offset); orders and payments are in open-txn, guarded and compacted in none.
        ("PATCH", "/v1/topics/{topic}", {"topic": "orders"}, {}, {"config": {"retention_ms": 1000}}),
        ("PATCH", "/v1/topics/{topic}", {"topic": "compacted"}, {},
         {"config": {"cleanup_policy": "delete", "check_expected_offsets": True}}),
        ("PATCH", "/v1/topics/{topic}", {"topic": "guarded"}, {}, {"config": {"retention_bytes": 0}}),
        ("PATCH", "/v1/topics/{topic}", {"topic": "guarded"}, {}, {"config": {"segment_ms": 1}}),
        ("POST", "/v1/topics/{topic}/partitions", {"topic": "orders"}, {}, {"partition_count": 3}),
        ("POST", "/v1/topics/{topic}/partitions", {"topic": "payments"}, {}, {"partition_count": 3}),
        ("POST", "/v1/topics/{topic}/partitions", {"topic": "guarded"}, {}, {"partition_count": 9}),
        ("DELETE", "/v1/topics/{topic}", {"topic": "orders"}, {}, None),
        ("DELETE", "/v1/topics/{topic}", {"topic": "guarded"}, {}, None),
        ("DELETE", "/v1/topics/{topic}", {"topic": "no-such-topic"}, {}, None),
        ("POST", "/v1/topics/{topic}/partitions/{partition}/delete-records",
         {"topic": "orders", "partition": 0}, {}, {"offset": 1}),
        ("POST", "/v1/topics/{topic}/partitions/{partition}/delete-records",
         {"topic": "orders", "partition": 0}, {}, {"offset": 2}),
        ("POST", "/v1/topics/{topic}/partitions/{partition}/delete-records",
         {"topic": "orders", "partition": 1}, {}, {"offset": 3}),
        ("POST", "/v1/topics/{topic}/partitions/{partition}/delete-records",
         {"topic": "payments", "partition": 1}, {}, {"offset": 0}),
        ("POST", "/v1/topics/{topic}/partitions/{partition}/delete-records",
         {"topic": "guarded", "partition": 0}, {}, {"offset": 5}),
        # Bodies over max_request_bytes (8192): refused before any route runs.
        ("POST", "/v1/groups/{group_id}/offsets", {"group_id": "committed-group"}, {},
         {"offsets": [{"topic": "orders", "partition": p, "offset": 1, "metadata": "m" * 4096}
                      for p in (0, 1, 2)]}),
        ("POST", "/v1/records", {}, {}, {"batches": [
            {"topic": "orders", "partition": 0, "records": [{"value": "v" * 9000}]}]}),
    ]
    for topic, parts in (("orders", 2), ("payments", 3), ("guarded", 1)):
        for part in range(parts + 1):
            for iso in ("read_committed", "read_uncommitted"):
                out.append(("GET", "/v1/topics/{topic}/partitions/{partition}/records",
                            {"topic": topic, "partition": part}, {"isolation": iso, "offset": 1}, None))
    return out


def _explicit_case(op_key: tuple[str, str, dict, dict, Any]) -> schemathesis.Case:
    method, path, path_parameters, query, body = op_key
    operation = SCHEMA[path][method]
    kwargs: dict[str, Any] = {"path_parameters": _in_path(path_parameters), "query": dict(query)}
    if body is not None:
        kwargs["body"] = _copy(body)
        kwargs["media_type"] = "application/json"
    return operation.Case(**kwargs)


def _in_path(parameters: dict[str, Any]) -> dict[str, Any]:
    """Path parameters percent-encoded, '/' included, as schemathesis encodes the ones it
    generates (a value it is given is put into the path as it is)."""
    return {k: quote(v, safe="") if isinstance(v, str) else v for k, v in parameters.items()}


def _copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


# --- steering generated requests at the seeded resources ----------------------------------------


def _steer_body(draw: Callable, value: Any, hints: dict[str, list[Any]]) -> Any:
    if isinstance(value, list):
        return [_steer_body(draw, v, hints) for v in value]
    if not isinstance(value, dict):
        return value
    out = {k: _steer_body(draw, v, hints) for k, v in value.items()}
    if ("producer_id" in out or "producer_epoch" in out) and draw(st.booleans()):
        out.update(draw(st.sampled_from(hints["identity"])))
    for key in list(out):
        if key in hints and key not in ("producer_id", "producer_epoch") and draw(st.booleans()):
            out[key] = _copy(draw(st.sampled_from(hints[key])))
    return out


def _steer(draw: Callable, case: schemathesis.Case, hints: dict[str, list[Any]]) -> None:
    for container, encode in ((case.path_parameters, _in_path), (case.query, _copy)):
        if not isinstance(container, dict):
            continue
        for key in list(container):
            if key in hints and draw(st.booleans()):
                container.update(encode({key: draw(st.sampled_from(hints[key]))}))
    if isinstance(case.body, dict):
        case.body = _steer_body(draw, case.body, hints)


def requests_at(seed: Seed) -> st.SearchStrategy[schemathesis.Case]:
    explicit = st.sampled_from(_explicit(seed)).map(_explicit_case)
    # Half explicit, a quarter each schemathesis's positive and negative cases.
    kinds = st.one_of(GENERATED[schemathesis.GenerationMode.POSITIVE],
                      GENERATED[schemathesis.GenerationMode.NEGATIVE], explicit, explicit)

    @st.composite
    def strategy(draw: Callable) -> schemathesis.Case:
        case = draw(kinds)
        # Three in four are steered: a random id rarely names anything, and generated ids
        # often break the spec's own patterns (no '/' or control characters: 422).
        if draw(st.integers(0, 3)):
            _steer(draw, case, seed.hints)
        return case

    return strategy()


# --- the world: app, seeded database, restore ---------------------------------------------------


@dataclass
class World:
    backend: str
    client: TestClient  # runs the app's lifespan; used for seeding
    asgi: Callable  # the same app, lifespan left to `client`, for schemathesis
    tables: StoredTables
    seed: Seed
    seeded: Snapshot
    calls: int = 0
    restores: int = 0
    statuses: dict[int, int] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)  # the fuzzing principal's credentials
    security: Any = None  # the app's SecurityState, when authentication is on
    principal: str | None = None

    def call(self, case: schemathesis.Case) -> schemathesis.Response:
        if self.headers:
            case.headers = {**(case.headers or {}), **self.headers}
        response = case.call(app=self.asgi)
        self.calls += 1
        self.statuses[response.status_code] = self.statuses.get(response.status_code, 0) + 1
        return response

    def back_to_seeded(self, after: Snapshot | None = None) -> None:
        """Restore the seeded tables if anything changed."""
        if after is None:
            after = self.tables.snapshot()
        if after != self.seeded:
            self.tables.restore(self.seeded)
            self.restores += 1
            if self.security is not None:
                # The ACLs and keys restored, with the version counter moved back: this
                # process's cache must not keep what a request had added.
                self.security.reload(unless_unchanged=False)


@pytest.fixture
def world(db_url: str) -> Iterator[World]:
    yield from _world(db_url, app_settings(db_url))


# The fuzzing principal with authentication on: a super-user, whose requests meet the same
# checks as before plus authentication; or `limited`, allowed a little (reading orders and
# payments, its own transactional ids and groups), so that most requests are refused by ACLs,
# which must then change nothing.
LIMITED_ACLS = [
    {"principal": "User:limited", "resource_type": "topic", "resource_name": "orders", "operation": "read"},
    {"principal": "User:limited", "resource_type": "topic", "resource_name": "pay", "pattern_type": "prefixed",
     "operation": "all"},
    {"principal": "User:limited", "resource_type": "topic", "resource_name": "guarded", "operation": "write",
     "permission": "deny"},
    {"principal": "User:limited", "resource_type": "transactional_id", "resource_name": "open-txn",
     "operation": "write"},
    {"principal": "User:limited", "resource_type": "group", "resource_name": "txn-group", "operation": "read"},
    {"principal": "User:*", "resource_type": "group", "resource_name": "member-group", "operation": "describe"},
]


@pytest.fixture(params=["super_user", "limited"])
def secured_world(request: pytest.FixtureRequest, db_url: str,
                  monkeypatch: pytest.MonkeyPatch) -> Iterator[World]:
    monkeypatch.setattr("app.services.security._SCRYPT_N", 2)  # keys made cheap to hash here
    settings = app_settings(db_url).model_copy(update={"authentication": "api_key", "super_users": "User:admin"})
    yield from _world(db_url, settings, principal=request.param)


def _world(db_url: str, settings: Settings, principal: str | None = None) -> Iterator[World]:
    app = create_app(settings, FakeClock())

    async def without_lifespan(scope, receive, send):  # type: ignore[no-untyped-def]
        # The TestClient below runs the lifespan (engine, services) once; schemathesis would
        # otherwise start one of its own for the rest of the process.
        if scope["type"] == "lifespan":
            return
        await app(scope, receive, send)

    tables = StoredTables(db_url)
    try:
        with TestClient(app) as client:
            headers: dict[str, str] = {}
            if principal is not None:
                security = app.state.services.security
                client.headers["Authorization"] = f"Bearer {security.create_api_key('admin', by='test').api_key}"
                headers["Authorization"] = (client.headers["Authorization"] if principal == "super_user" else
                                            f"Bearer {security.create_api_key(principal, by='test').api_key}")
                _ok(client.post("/v1/acls", json={"acls": LIMITED_ACLS}))
            seed = _seed(client)
            seeded = tables.snapshot()
            tables.restore(seeded)  # the restore itself must give back exactly the seeded rows
            assert tables.snapshot() == seeded
            w = World(tables.dialect, client, without_lifespan, tables, seed, seeded, headers=headers,
                      security=app.state.security, principal=principal)
            yield w
            print(f"\n{w.calls} requests, {w.restores} restores, statuses {sorted(w.statuses.items())}")
    finally:
        tables.dispose()


def _describe(case: schemathesis.Case, response: schemathesis.Response) -> str:
    return (f"{case.method} {case.formatted_path} query={case.query!r} body={case.body!r:.1000}\n"
            f"-> {response.status_code} {response.text[:1000]}")


# --- the properties -------------------------------------------------------------------------------


# The default run takes well under a minute per test; a longer one gets time to match.
LONG_RUN_TIMEOUT = pytest.mark.timeout(max(300, MAX_EXAMPLES // 2))


def no_server_error(world: World, case: schemathesis.Case, response: schemathesis.Response) -> None:
    case.validate_response(response, checks=[not_a_server_error])


def conforms_to_the_spec(world: World, case: schemathesis.Case, response: schemathesis.Response) -> None:
    case.validate_response(response, checks=CONFORMANCE)


def refusal_changes_nothing(world: World, case: schemathesis.Case, response: schemathesis.Response) -> None:
    if 400 <= response.status_code < 500:
        changed = diff(world.seeded, world.tables.snapshot())
        assert not changed, (
            "a refused request changed the stored state:\n    " + "\n    ".join(changed)
            + "\n" + _describe(case, response)
        )


Property = Callable[[World, schemathesis.Case, schemathesis.Response], None]


def fuzz(world: World, prop: Property, max_examples: int = MAX_EXAMPLES) -> None:
    """Send each explicit request once as it is, then `max_examples` generated (and steered)
    ones, each from the seeded state; check `prop` on every response."""

    def check_one(case: schemathesis.Case) -> None:
        response = world.call(case)
        try:
            prop(world, case, response)
        finally:
            world.back_to_seeded()

    run = given(case=requests_at(world.seed))(check_one)
    for request in _explicit(world.seed):
        run = example(case=_explicit_case(request))(run)
    run = seed(fuzz_seed(prop.__name__, world.backend))(run)
    fuzz_settings(max_examples)(run)()


@LONG_RUN_TIMEOUT
def test_no_request_gets_a_server_error(world: World) -> None:
    fuzz(world, no_server_error)


@LONG_RUN_TIMEOUT
def test_every_response_conforms_to_openapi_yaml(world: World) -> None:
    fuzz(world, conforms_to_the_spec)


@LONG_RUN_TIMEOUT
def test_refused_requests_leave_every_table_unchanged(world: World) -> None:
    fuzz(world, refusal_changes_nothing)


def every_property(world: World, case: schemathesis.Case, response: schemathesis.Response) -> None:
    no_server_error(world, case, response)
    conforms_to_the_spec(world, case, response)
    refusal_changes_nothing(world, case, response)


CREDENTIALED_EXAMPLES = max(50, MAX_EXAMPLES // 2)


@LONG_RUN_TIMEOUT
def test_with_credentials_no_server_error_conformance_and_refusals_change_nothing(secured_world: World) -> None:
    """Guarantee 16 under fuzzing: with authentication on, as a super-user or as a principal
    whose ACLs refuse most requests (403s that must change nothing)."""
    fuzz(secured_world, every_property, CREDENTIALED_EXAMPLES)
    if secured_world.principal == "limited":  # the ACL refusals were reached, not only 401/422
        assert secured_world.statuses.get(403, 0) > 0, secured_world.statuses


# --- the harness can fail: each property against an app broken on purpose (SQLite only) ---------

SABOTAGE_EXAMPLES = 60


def _sabotage(world: World, broken: Callable) -> None:
    inner = world.asgi

    async def app(scope, receive, send):  # type: ignore[no-untyped-def]
        if scope["type"] == "http" and scope["method"] == "GET" and scope["path"] == "/v1/topics":
            await broken(send)
            return
        await inner(scope, receive, send)

    world.asgi = app


async def _answer(send, status: int, body: bytes) -> None:  # type: ignore[no-untyped-def]
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": body})


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_the_server_error_check_catches_a_500(world: World) -> None:
    _sabotage(world, lambda send: _answer(send, 500, b'{"error_code": "UNKNOWN_SERVER_ERROR"}'))
    with pytest.raises(FailureGroup, match="Server error"):
        fuzz(world, no_server_error, SABOTAGE_EXAMPLES)


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_the_conformance_check_catches_a_body_off_the_schema(world: World) -> None:
    _sabotage(world, lambda send: _answer(send, 200, b'{"topics": "not a list"}'))
    with pytest.raises(FailureGroup, match="Response violates schema"):
        fuzz(world, conforms_to_the_spec, SABOTAGE_EXAMPLES)


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_the_state_check_catches_a_refusal_that_wrote(world: World) -> None:
    tables = world.tables

    async def write_then_refuse(send) -> None:  # type: ignore[no-untyped-def]
        with tables.engine.begin() as conn:
            conn.execute(text("UPDATE partitions SET next_offset = next_offset + 1"))
        await _answer(send, 409, b'{"error_code": "INVALID_TXN_STATE", "message": "x", "retriable": false}')

    _sabotage(world, write_then_refuse)
    with pytest.raises(AssertionError, match="a refused request changed the stored state"):
        fuzz(world, refusal_changes_nothing, SABOTAGE_EXAMPLES)
