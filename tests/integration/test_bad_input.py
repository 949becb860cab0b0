"""Bad input on every endpoint (contract, "Errors"), on SQLite and PostgreSQL.

Every refusal is a 4xx JSON body with `error_code` (string), `message` (string) and
`retriable` (bool, true only for the retriable codes), never a 500; and a refused request
changes no stored state. The state is compared through the API before and after each
request: topics and their partitions, every data record of every partition
(read_uncommitted), every transactional_id with its partitions and pending offsets, and the
committed offsets of the groups the cases touch.

The two case tables share one starting state per backend (`world`, on a database of its
own): since a refused request changes nothing, the state is built once and each case is
compared with it; a case that did change something marks the world dirty and the next case
gets it rebuilt. The other tests use the conftest `client`, a fresh database each.
"""

from __future__ import annotations

import math
import shutil
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, delete, text, update
from sqlalchemy.engine import make_url

from app.api.app import create_app
from app.settings import Settings
from app.storage import migrate
from app.storage.engine import normalise_url
from app.storage.tables import counters, metadata
from tests.conftest import ADMIN_URL, BACKENDS, FakeClock
from tests.helpers import batch, begin, create_topic, ident, init_producer, send

RETRIABLE_CODES = {"UNSTABLE_OFFSET_COMMIT", "CONCURRENT_TRANSACTIONS", "STORAGE_UNAVAILABLE"}
# Every group any case names: group offsets are read per group, there is no list of groups.
GROUPS = ["txn-group", "committed-group", "new-group", "member-group"]

# --- the state every case starts from ---------------------------------------------------------


@dataclass
class State:
    """Producers of the starting state; a case's body may be a function of it."""

    txn: dict  # transactional_id "open-txn": an open transaction (records + staged offsets)
    idle: dict  # transactional_id "idle-txn": initialised, never begun (Empty)
    stale: dict  # transactional_id "fenced-txn": the first instance, fenced by a second
    current: dict  # the second instance of "fenced-txn"
    idem: dict  # an idempotent (non-transactional) producer
    txn_id: int  # the txn_id of open-txn's transaction
    member_id: str  # the one member of member-group
    generation_id: int  # member-group's generation


def _setup(client: TestClient) -> State:
    create_topic(client, "orders", 2)
    create_topic(client, "payments", 3)
    create_topic(client, "guarded", 1, check_expected_offsets=True)

    # Plain records, and one on the guarded topic.
    r = send(client, [batch("orders", 0, ["plain-0"]), batch("orders", 1, ["plain-1"])])
    assert r.status_code == 200, r.text
    r = send(client, [batch("guarded", 0, ["g-0"], expected_offset=0)])
    assert r.status_code == 200, r.text

    # An idempotent producer that wrote sequences 0..1 to orders/1.
    idem = init_producer(client)
    r = send(client, [batch("orders", 1, ["idem-0", "idem-1"], 0)], idem)
    assert r.status_code == 200, r.text

    # A committed group offset outside any transaction.
    r = client.post("/v1/groups/committed-group/offsets", json={"offsets": [
        {"topic": "orders", "partition": 0, "offset": 1, "metadata": "m"},
        {"topic": "orders", "partition": 1, "offset": 0},
    ]})
    assert r.status_code == 200, r.text

    # An open transaction: records in orders/0 (sequences 0..1) and payments/1 (0), and
    # staged offsets of txn-group.
    txn = init_producer(client, "open-txn")
    txn_id = begin(client, "open-txn", txn)["txn_id"]
    r = send(client, [batch("orders", 0, ["t-0", "t-1"], 0), batch("payments", 1, ["t-2"], 0)],
             txn, "open-txn")
    assert r.status_code == 200, r.text
    r = client.post("/v1/transactions/open-txn/offsets", json={
        **ident(txn), "group_id": "txn-group",
        "offsets": [{"topic": "orders", "partition": 0, "offset": 3}],
    })
    assert r.status_code == 200, r.text

    idle = init_producer(client, "idle-txn")
    stale = init_producer(client, "fenced-txn")
    current = init_producer(client, "fenced-txn")
    assert current["producer_epoch"] == stale["producer_epoch"] + 1

    # A consumer group with one member.
    r = client.post("/v1/groups/member-group/members", json={"topics": ["orders"]})
    assert r.status_code == 200, r.text
    m = r.json()
    return State(txn=txn, idle=idle, stale=stale, current=current, idem=idem, txn_id=txn_id,
                 member_id=m["member_id"], generation_id=m["generation_id"])


def _ok(r) -> Any:  # type: ignore[no-untyped-def]
    assert r.status_code == 200, r.text
    return r.json()


def _all_records(client: TestClient, topic: str, partition: int) -> list[dict]:
    out: list[dict] = []
    offset = 0
    while True:
        page = _ok(client.get(
            f"/v1/topics/{topic}/partitions/{partition}/records",
            params={"offset": offset, "isolation": "read_uncommitted", "max_records": 1000},
        ))
        out.extend(page["records"])
        if not page["records"] or page["next_offset"] >= page["high_watermark"]:
            return out
        offset = page["next_offset"]


def snapshot(client: TestClient) -> dict:
    """Everything the API shows of the stored state."""
    topics = _ok(client.get("/v1/topics"))["topics"]
    described = {}
    records = {}
    for t in topics:
        d = _ok(client.get(f"/v1/topics/{t['name']}"))
        described[t["name"]] = d
        for p in d["partitions"]:
            records[(t["name"], p["partition"])] = _all_records(client, t["name"], p["partition"])
    txns = sorted(_ok(client.get("/v1/transactions"))["transactions"],
                  key=lambda m: m["transactional_id"])
    txn_details = {m["transactional_id"]: _ok(client.get(f"/v1/transactions/{m['transactional_id']}"))
                   for m in txns}
    groups = {g: _ok(client.get(f"/v1/groups/{g}/offsets", params={"require_stable": "false"}))
              for g in GROUPS}
    members = {}
    for g in GROUPS:
        r = client.get(f"/v1/groups/{g}")
        assert r.status_code in (200, 404), r.text
        members[g] = (r.status_code, r.json())
    return {"topics": topics, "described": described, "records": records,
            "transactions": txns, "transaction_details": txn_details, "groups": groups,
            "members": members}


@pytest.fixture
def state(client: TestClient) -> State:
    return _setup(client)


@dataclass
class World:
    """The starting state, shared by the cases of one backend."""

    client: TestClient
    url: str
    state: State
    baseline: dict
    dirty: bool = False

    def rebuild(self) -> None:
        engine = create_engine(normalise_url(self.url))
        with engine.begin() as conn:
            for table in reversed(metadata.sorted_tables):
                if table is counters:
                    conn.execute(update(counters).values(value=0))
                else:
                    conn.execute(delete(table))
        engine.dispose()
        self.state = _setup(self.client)
        self.baseline = snapshot(self.client)
        self.dirty = False

    def changes(self) -> list[str]:
        """What differs from the starting state (and if anything does, have it rebuilt)."""
        try:
            after = snapshot(self.client)
        except BaseException:
            self.dirty = True
            raise
        found = _diff(self.baseline, after)
        if found:
            self.dirty = True
        return found


def _diff(before: Any, after: Any, path: str = "") -> list[str]:
    if isinstance(before, dict) and isinstance(after, dict):
        out = []
        for k in sorted(set(before) | set(after), key=repr):
            if k not in after:
                out.append(f"{path}/{k}: removed")
            elif k not in before:
                out.append(f"{path}/{k}: added {after[k]!r:.300}")
            else:
                out += _diff(before[k], after[k], f"{path}/{k}")
        return out
    if before != after:
        return [f"{path}: {before!r:.300} -> {after!r:.300}"]
    return []


def check(r, world: World, status: int | tuple[int, ...] | None = None, code: str | None = None) -> None:  # type: ignore[no-untyped-def]
    """The response is a well-formed refusal (with this status and code) and nothing changed."""
    problems = []
    try:
        assert_error_body(r, status, code)
    except AssertionError as e:
        problems.append(f"response: {e}")
    changed = world.changes()
    if changed:
        problems.append("stored state changed:\n    " + "\n    ".join(changed[:20]))
    assert not problems, "\n".join(problems)


@pytest.fixture(scope="module", params=BACKENDS)
def world(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    admin = None
    if request.param == "sqlite":
        path = tmp_path_factory.mktemp("bad_input") / "outbox.db"
        shutil.copy(request.getfixturevalue("sqlite_template"), path)
        url = f"sqlite:///{path}"
    else:
        name = f"outbox_bad_input_{uuid.uuid4().hex[:10]}"
        admin = create_engine(ADMIN_URL, isolation_level="AUTOCOMMIT")
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
        url = make_url(ADMIN_URL).set(database=name).render_as_string(hide_password=False)
        migrate.upgrade(url)
    try:
        settings = Settings(database_url=url, run_coordinator=False, auto_migrate=False)
        # A server error is answered as the service answers it (500), not raised in the test.
        with TestClient(create_app(settings, FakeClock()), raise_server_exceptions=False) as client:
            state = _setup(client)
            yield World(client, url, state, snapshot(client))
    finally:
        if admin is not None:
            with admin.connect() as conn:
                conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
            admin.dispose()


@pytest.fixture
def shared(world: World) -> World:
    if world.dirty:
        world.rebuild()
    return world


def assert_error_body(r, status: int | tuple[int, ...] | None = None, code: str | None = None) -> dict:  # type: ignore[no-untyped-def]
    assert r.status_code < 500, f"server error {r.status_code}: {r.text}"
    assert 400 <= r.status_code < 500, f"expected a refusal, got {r.status_code}: {r.text}"
    assert r.headers["content-type"].startswith("application/json"), r.headers
    body = r.json()
    assert isinstance(body, dict), body
    assert isinstance(body.get("error_code"), str) and body["error_code"], body
    assert isinstance(body.get("message"), str) and body["message"], body
    assert isinstance(body.get("retriable"), bool), body
    assert body["retriable"] is (body["error_code"] in RETRIABLE_CODES), body
    if isinstance(status, tuple):
        assert r.status_code in status, r.text
    elif status is not None:
        assert r.status_code == status, r.text
    if code is not None:
        assert body["error_code"] == code, body
    return body


# --- the cases --------------------------------------------------------------------------------

Body = Any  # a JSON value, or a function of State returning one


@dataclass(frozen=True)
class Case:
    id: str
    method: str
    path: str
    status: int | tuple[int, ...]  # a tuple where either a schema (422) or a service check (400) fits
    code: str
    json: Body = None
    params: dict | None = None
    content: bytes | None = None  # raw bytes, sent as application/json

    def request(self, client: TestClient, s: State):  # type: ignore[no-untyped-def]
        kwargs: dict[str, Any] = {}
        body = self.json(s) if callable(self.json) else self.json
        if self.content is not None:
            kwargs["content"] = self.content
            kwargs["headers"] = {"content-type": "application/json"}
        elif body is not None:
            kwargs["json"] = body
        if self.params is not None:
            kwargs["params"] = self.params
        return client.request(self.method, self.path, **kwargs)


V = "INVALID_REQUEST"  # schema validation and malformed requests
BAD = (400, 422)
BIG = [2**63, 2**64, 10**30]
LONG_TOPIC = "t" * 300
LONG_TID = "x" * 1000


def _txn(s: State, p: dict | None = None, **extra: Any) -> dict:
    return {**ident(p or s.txn), **extra}


def _send(batches: list[dict], producer: str | None = None, tid: str | None = None,
          **extra: Any) -> Callable[[State], dict]:
    def body(s: State) -> dict:
        out: dict[str, Any] = {"batches": batches, **extra}
        if producer is not None:
            out.update(ident(getattr(s, producer)))
        if tid is not None:
            out["transactional_id"] = tid
        return out
    return body


def _rec(topic: str, partition: int, *values: Any, **extra: Any) -> dict:
    return {"topic": topic, "partition": partition, "records": [{"value": v} for v in values], **extra}


def topic_cases() -> list[Case]:
    P = "/v1/topics"
    c = [
        Case("create-missing-name", "POST", P, 422, V, json={"partitions": 1}),
        Case("create-name-null", "POST", P, 422, V, json={"name": None}),
        Case("create-name-int", "POST", P, 422, V, json={"name": 123}),
        Case("create-name-list", "POST", P, 422, V, json={"name": ["new"]}),
        Case("create-name-object", "POST", P, 422, V, json={"name": {"n": "new"}}),
        Case("create-name-empty", "POST", P, 422, V, json={"name": ""}),
        Case("create-name-300-chars", "POST", P, 422, V, json={"name": LONG_TOPIC}),
        Case("create-name-with-space", "POST", P, 400, "INVALID_TOPIC_EXCEPTION", json={"name": "a b"}),
        Case("create-name-dotdot", "POST", P, 400, "INVALID_TOPIC_EXCEPTION", json={"name": ".."}),
        Case("create-name-dot", "POST", P, 400, "INVALID_TOPIC_EXCEPTION", json={"name": "."}),
        Case("create-name-non-ascii", "POST", P, 400, "INVALID_TOPIC_EXCEPTION", json={"name": "ü"}),
        Case("create-name-slash", "POST", P, 400, "INVALID_TOPIC_EXCEPTION", json={"name": "a/b"}),
        Case("create-name-trailing-newline", "POST", P, 400, "INVALID_TOPIC_EXCEPTION",
             json={"name": "abc\n"}),
        Case("create-name-nul", "POST", P, 400, "INVALID_TOPIC_EXCEPTION", json={"name": "a\x00b"}),
        Case("create-duplicate", "POST", P, 409, "TOPIC_ALREADY_EXISTS", json={"name": "orders"}),
        Case("create-duplicate-other-partitions", "POST", P, 409, "TOPIC_ALREADY_EXISTS",
             json={"name": "payments", "partitions": 7}),
        Case("create-zero-partitions", "POST", P, 400, "INVALID_PARTITIONS", json={"name": "new", "partitions": 0}),
        Case("create-negative-partitions", "POST", P, 400, "INVALID_PARTITIONS", json={"name": "new", "partitions": -1}),
        Case("create-partitions-above-max", "POST", P, 400, "INVALID_PARTITIONS",
             json={"name": "new", "partitions": 2000}),
        Case("create-partitions-string", "POST", P, 422, V, json={"name": "new", "partitions": "abc"}),
        Case("create-partitions-fraction", "POST", P, 422, V, json={"name": "new", "partitions": 1.5}),
        Case("create-partitions-null", "POST", P, 422, V, json={"name": "new", "partitions": None}),
        Case("create-partitions-list", "POST", P, 422, V, json={"name": "new", "partitions": [1]}),
        Case("create-partitions-bool", "POST", P, 422, V, json={"name": "new", "partitions": True}),
        Case("create-unknown-field", "POST", P, 422, V, json={"name": "new", "replication_factor": 3}),
        Case("create-config-list", "POST", P, 422, V, json={"name": "new", "config": []}),
        Case("create-config-null", "POST", P, 422, V, json={"name": "new", "config": None}),
        Case("create-config-unknown-field", "POST", P, 422, V,
             json={"name": "new", "config": {"min_insync_replicas": 2}}),
        Case("create-cleanup-policy-bogus", "POST", P, 422, V,
             json={"name": "new", "config": {"cleanup_policy": "bogus"}}),
        Case("create-retention-zero", "POST", P, 400, "INVALID_CONFIG",
             json={"name": "new", "config": {"retention_ms": 0}}),
        Case("create-retention-minus-two", "POST", P, 400, "INVALID_CONFIG",
             json={"name": "new", "config": {"retention_ms": -2}}),
        Case("create-retention-string", "POST", P, 422, V,
             json={"name": "new", "config": {"retention_ms": "week"}}),
        Case("create-check-expected-offsets-string", "POST", P, 422, V,
             json={"name": "new", "config": {"check_expected_offsets": "maybe"}}),
        Case("create-malformed-json", "POST", P, 400, V, content=b'{"name": "new", '),
        Case("create-trailing-garbage", "POST", P, 400, V, content=b'{"name": "new"} x'),
        Case("create-single-quotes", "POST", P, 400, V, content=b"{'name': 'new'}"),
        Case("create-empty-body", "POST", P, 400, V, content=b""),
        Case("create-json-null-body", "POST", P, 422, V, content=b"null"),
        Case("create-json-array-body", "POST", P, 422, V, content=b'[{"name": "new"}]'),
        Case("create-json-string-body", "POST", P, 422, V, content=b'"new"'),
        Case("create-invalid-utf8", "POST", P, 400, V, content=b'{"name": "\xff\xfe"}'),
        Case("create-deeply-nested-body", "POST", P, 400, V, content=b"[" * 100_000),
        Case("describe-unknown", "GET", f"{P}/nope", 404, "UNKNOWN_TOPIC_OR_PARTITION"),
        Case("describe-300-chars", "GET", f"{P}/{LONG_TOPIC}", 422, V),
        Case("topic-wrong-method-put", "PUT", f"{P}/orders", 405, "METHOD_NOT_ALLOWED", json={}),
        Case("topics-wrong-method-delete", "DELETE", P, 405, "METHOD_NOT_ALLOWED"),
    ]
    for n in BIG:
        c.append(Case(f"create-partitions-{n}", "POST", P, 400, "INVALID_PARTITIONS",
                      json={"name": "new", "partitions": n}))
        c.append(Case(f"create-retention-{n}", "POST", P, 400, "INVALID_CONFIG",
                      json={"name": "new", "config": {"retention_ms": n}}))
    return c


def topic_admin_cases() -> list[Case]:
    """IncrementalAlterConfigs, CreatePartitions, DeleteTopics, DeleteRecords. In the starting
    state orders/0 holds plain-0 at 0 and open-txn's records from 1 (last stable offset 1),
    orders/1 three plain and idempotent records and no transaction, payments/0 nothing; open-txn
    writes to orders and payments and stages offsets for orders."""
    A = "/v1/topics/orders"
    N = "/v1/topics/orders/partitions"
    D = "/v1/topics/orders/partitions/0/delete-records"
    c = [
        Case("alter-unknown-topic", "PATCH", "/v1/topics/nope", 404, "UNKNOWN_TOPIC_OR_PARTITION",
             json={"config": {"retention_ms": 1000}}),
        Case("alter-topic-300-chars", "PATCH", f"/v1/topics/{LONG_TOPIC}", 422, V,
             json={"config": {"retention_ms": 1000}}),
        Case("alter-unknown-key", "PATCH", A, 422, V, json={"config": {"min_insync_replicas": 2}}),
        Case("alter-unknown-key-beside-a-good-one", "PATCH", A, 422, V,
             json={"config": {"retention_ms": 1000, "segment_ms": 5}}),
        Case("alter-missing-config", "PATCH", A, 422, V, json={}),
        Case("alter-config-null", "PATCH", A, 422, V, json={"config": None}),
        Case("alter-config-list", "PATCH", A, 422, V, json={"config": [["retention_ms", 1000]]}),
        Case("alter-config-at-top-level", "PATCH", A, 422, V, json={"retention_ms": 1000}),
        Case("alter-partitions-through-config", "PATCH", A, 422, V, json={"config": {"partitions": 5}}),
        Case("alter-retention-zero", "PATCH", A, 400, "INVALID_CONFIG", json={"config": {"retention_ms": 0}}),
        Case("alter-retention-minus-two", "PATCH", A, 400, "INVALID_CONFIG", json={"config": {"retention_ms": -2}}),
        Case("alter-retention-null", "PATCH", A, 422, V, json={"config": {"retention_ms": None}}),
        Case("alter-retention-string", "PATCH", A, 422, V, json={"config": {"retention_ms": "1d"}}),
        Case("alter-retention-bytes-zero", "PATCH", A, 400, "INVALID_CONFIG",
             json={"config": {"retention_bytes": 0}}),
        Case("alter-delete-retention-negative", "PATCH", A, 400, "INVALID_CONFIG",
             json={"config": {"delete_retention_ms": -1}}),
        # One bad key refuses the whole change: the good one beside it is not applied either.
        Case("alter-good-key-with-a-bad-one", "PATCH", A, 400, "INVALID_CONFIG",
             json={"config": {"cleanup_policy": "compact", "retention_bytes": 0}}),
        Case("alter-cleanup-policy-bogus", "PATCH", A, 422, V, json={"config": {"cleanup_policy": "bogus"}}),
        Case("alter-cleanup-policy-list", "PATCH", A, 422, V,
             json={"config": {"cleanup_policy": ["compact", "delete"]}}),
        Case("alter-check-expected-offsets-string", "PATCH", A, 422, V,
             json={"config": {"check_expected_offsets": "yes"}}),
        Case("alter-empty-body", "PATCH", A, 400, V, content=b""),
        Case("alter-malformed-json", "PATCH", A, 400, V, content=b'{"config": {'),
        Case("alter-json-array-body", "PATCH", A, 422, V, content=b"[]"),
        Case("alter-invalid-utf8", "PATCH", A, 400, V, content=b'{"config": {"cleanup_policy": "\xff"}}'),
        Case("partitions-equal", "POST", N, 400, "INVALID_PARTITIONS", json={"partition_count": 2}),
        Case("partitions-fewer", "POST", N, 400, "INVALID_PARTITIONS", json={"partition_count": 1}),
        Case("partitions-zero", "POST", N, 400, "INVALID_PARTITIONS", json={"partition_count": 0}),
        Case("partitions-negative", "POST", N, 400, "INVALID_PARTITIONS", json={"partition_count": -1}),
        Case("partitions-above-max", "POST", N, 400, "INVALID_PARTITIONS", json={"partition_count": 2000}),
        Case("partitions-unknown-topic", "POST", "/v1/topics/nope/partitions", 404,
             "UNKNOWN_TOPIC_OR_PARTITION", json={"partition_count": 3}),
        Case("partitions-topic-300-chars", "POST", f"/v1/topics/{LONG_TOPIC}/partitions", 422, V,
             json={"partition_count": 3}),
        Case("partitions-missing-count", "POST", N, 422, V, json={}),
        Case("partitions-count-string", "POST", N, 422, V, json={"partition_count": "3"}),
        Case("partitions-count-fraction", "POST", N, 422, V, json={"partition_count": 2.5}),
        Case("partitions-count-null", "POST", N, 422, V, json={"partition_count": None}),
        Case("partitions-count-bool", "POST", N, 422, V, json={"partition_count": True}),
        Case("partitions-create-topic-body", "POST", N, 422, V, json={"partitions": 3}),
        Case("partitions-unknown-field", "POST", N, 422, V,
             json={"partition_count": 3, "assignments": [[0], [1], [2]]}),
        Case("partitions-empty-body", "POST", N, 400, V, content=b""),
        Case("partitions-malformed-json", "POST", N, 400, V, content=b'{"partition_count": 3'),
        Case("partitions-wrong-method", "GET", N, 405, "METHOD_NOT_ALLOWED"),
        Case("delete-topic-in-open-transaction", "DELETE", A, 409, "TOPIC_HAS_OPEN_TRANSACTIONS"),
        Case("delete-topic-only-partly-in-open-transaction", "DELETE", "/v1/topics/payments", 409,
             "TOPIC_HAS_OPEN_TRANSACTIONS"),
        Case("delete-topic-unknown", "DELETE", "/v1/topics/nope", 404, "UNKNOWN_TOPIC_OR_PARTITION"),
        Case("delete-topic-300-chars", "DELETE", f"/v1/topics/{LONG_TOPIC}", 422, V),
        Case("delete-records-past-last-stable-offset", "POST", D, 416, "OFFSET_OUT_OF_RANGE", json={"offset": 2}),
        Case("delete-records-past-log-end", "POST", "/v1/topics/orders/partitions/1/delete-records", 416,
             "OFFSET_OUT_OF_RANGE", json={"offset": 4}),
        Case("delete-records-on-empty-partition", "POST", "/v1/topics/payments/partitions/0/delete-records",
             416, "OFFSET_OUT_OF_RANGE", json={"offset": 1}),
        Case("delete-records-unknown-topic", "POST", "/v1/topics/nope/partitions/0/delete-records", 404,
             "UNKNOWN_TOPIC_OR_PARTITION", json={"offset": 0}),
        Case("delete-records-unknown-partition", "POST", "/v1/topics/orders/partitions/2/delete-records",
             404, "UNKNOWN_TOPIC_OR_PARTITION", json={"offset": 0}),
        Case("delete-records-partition-negative", "POST", "/v1/topics/orders/partitions/-1/delete-records",
             422, V, json={"offset": 0}),
        Case("delete-records-partition-2**31", "POST", f"/v1/topics/orders/partitions/{2**31}/delete-records",
             422, V, json={"offset": 0}),
        Case("delete-records-offset-negative", "POST", D, 422, V, json={"offset": -1}),
        Case("delete-records-offset-string", "POST", D, 422, V, json={"offset": "1"}),
        Case("delete-records-offset-null", "POST", D, 400, V, json={"offset": None}),
        Case("delete-records-missing-offset", "POST", D, 400, V, json={}),
        Case("delete-records-offset-and-consumed-by", "POST", D, 400, V,
             json={"offset": 0, "consumed_by": ["committed-group"]}),
        Case("delete-records-consumed-by-empty", "POST", D, 422, V, json={"consumed_by": []}),
        Case("delete-records-consumed-by-string", "POST", D, 422, V, json={"consumed_by": "committed-group"}),
        Case("delete-records-consumed-by-group-with-slash", "POST", D, 422, V, json={"consumed_by": ["a/b"]}),
        Case("delete-records-unknown-field", "POST", D, 422, V, json={"offset": 0, "partition": 0}),
        Case("delete-records-empty-body", "POST", D, 400, V, content=b""),
        Case("delete-records-malformed-json", "POST", D, 400, V, content=b'{"offset": '),
        Case("delete-records-wrong-method", "GET", D, 405, "METHOD_NOT_ALLOWED"),
    ]
    for n in BIG:
        c.append(Case(f"alter-retention-{n}", "PATCH", A, 400, "INVALID_CONFIG",
                      json={"config": {"retention_ms": n}}))
        c.append(Case(f"partitions-count-{n}", "POST", N, 400, "INVALID_PARTITIONS", json={"partition_count": n}))
        c.append(Case(f"delete-records-offset-{n}", "POST", D, 422, V, json={"offset": n}))
    return c


def fetch_cases() -> list[Case]:
    F = "/v1/topics/orders/partitions/0/records"
    c = [
        Case("fetch-unknown-topic", "GET", "/v1/topics/nope/partitions/0/records", 404,
             "UNKNOWN_TOPIC_OR_PARTITION"),
        Case("fetch-partition-out-of-range", "GET", "/v1/topics/orders/partitions/2/records", 404,
             "UNKNOWN_TOPIC_OR_PARTITION"),
        Case("fetch-partition-negative", "GET", "/v1/topics/orders/partitions/-1/records", 422, V),
        Case("fetch-partition-string", "GET", "/v1/topics/orders/partitions/abc/records", 422, V),
        Case("fetch-topic-300-chars", "GET", f"/v1/topics/{LONG_TOPIC}/partitions/0/records", 422, V),
        Case("fetch-offset-beyond-log-end", "GET", F, 416, "OFFSET_OUT_OF_RANGE", params={"offset": 1000}),
        Case("fetch-offset-negative", "GET", F, 422, V, params={"offset": -1}),
        Case("fetch-offset-string", "GET", F, 422, V, params={"offset": "start"}),
        Case("fetch-isolation-bogus", "GET", F, 422, V, params={"isolation": "bogus"}),
        Case("fetch-max-records-zero", "GET", F, 422, V, params={"max_records": 0}),
        Case("fetch-max-records-negative", "GET", F, 422, V, params={"max_records": -5}),
        Case("fetch-max-records-string", "GET", F, 422, V, params={"max_records": "all"}),
        Case("fetch-wrong-method", "POST", F, 405, "METHOD_NOT_ALLOWED", json={}),
    ]
    for n in BIG:
        c.append(Case(f"fetch-offset-{n}", "GET", F, 422, V, params={"offset": n}))
        c.append(Case(f"fetch-partition-{n}", "GET", f"/v1/topics/orders/partitions/{n}/records", 422, V))
        c.append(Case(f"fetch-max-records-{n}", "GET", F, 422, V, params={"max_records": n}))
    c.append(Case("fetch-partition-2**31", "GET", f"/v1/topics/orders/partitions/{2**31}/records", 422, V))
    return c


def producer_cases() -> list[Case]:
    P = "/v1/producers"
    c = [
        Case("init-tid-empty", "POST", P, 422, V, json={"transactional_id": ""}),
        Case("init-tid-1000-chars", "POST", P, 422, V, json={"transactional_id": LONG_TID}),
        Case("init-tid-int", "POST", P, 422, V, json={"transactional_id": 7}),
        Case("init-tid-list", "POST", P, 422, V, json={"transactional_id": ["a"]}),
        # The transactional_id is a path segment of every other transaction endpoint: one with
        # a "/" could be initialised but never begun, committed, aborted or described.
        Case("init-tid-with-slash", "POST", P, 422, V, json={"transactional_id": "a/b"}),
        Case("init-timeout-above-max", "POST", P, 400, "INVALID_TRANSACTION_TIMEOUT",
             json={"transactional_id": "brand-new", "transaction_timeout_ms": 900_001}),
        Case("init-timeout-above-max-on-open-txn", "POST", P, 400, "INVALID_TRANSACTION_TIMEOUT",
             json={"transactional_id": "open-txn", "transaction_timeout_ms": 900_001}),
        Case("init-timeout-zero", "POST", P, 400, "INVALID_TRANSACTION_TIMEOUT",
             json={"transactional_id": "brand-new", "transaction_timeout_ms": 0}),
        Case("init-timeout-negative", "POST", P, 400, "INVALID_TRANSACTION_TIMEOUT",
             json={"transactional_id": "brand-new", "transaction_timeout_ms": -1}),
        Case("init-timeout-string", "POST", P, 422, V,
             json={"transactional_id": "brand-new", "transaction_timeout_ms": "1m"}),
        Case("init-timeout-without-tid", "POST", P, 400, V, json={"transaction_timeout_ms": 1000}),
        Case("init-producer-id-without-epoch", "POST", P, 400, V,
             json=lambda s: {"transactional_id": "open-txn", "producer_id": s.txn["producer_id"]}),
        Case("init-epoch-without-producer-id", "POST", P, 400, V,
             json={"transactional_id": "open-txn", "producer_epoch": 0}),
        Case("init-producer-id-negative", "POST", P, 422, V,
             json={"transactional_id": "open-txn", "producer_id": -1, "producer_epoch": 0}),
        Case("init-epoch-negative", "POST", P, 422, V,
             json=lambda s: {"transactional_id": "open-txn", "producer_id": s.txn["producer_id"],
                             "producer_epoch": -1}),
        Case("init-epoch-32768", "POST", P, 422, V,
             json=lambda s: {"transactional_id": "open-txn", "producer_id": s.txn["producer_id"],
                             "producer_epoch": 32768}),
        Case("init-recover-stale-epoch", "POST", P, 409, "PRODUCER_FENCED",
             json=lambda s: {"transactional_id": "fenced-txn", **ident(s.stale)}),
        Case("init-recover-other-producer-of-open-txn", "POST", P, 409, "PRODUCER_FENCED",
             json=lambda s: {"transactional_id": "open-txn", **ident(s.idem)}),
        Case("init-recover-newer-epoch-of-open-txn", "POST", P, 409, "PRODUCER_FENCED",
             json=lambda s: {"transactional_id": "open-txn", "producer_id": s.txn["producer_id"],
                             "producer_epoch": s.txn["producer_epoch"] + 1}),
        Case("init-recover-unknown-tid", "POST", P, 409, "INVALID_PRODUCER_ID_MAPPING",
             json=lambda s: {"transactional_id": "brand-new", **ident(s.idem)}),
        Case("init-unknown-field", "POST", P, 422, V,
             json={"transactional_id": "brand-new", "acks": "all"}),
        Case("init-malformed-json", "POST", P, 400, V, content=b'{"transactional_id": '),
        Case("init-json-array-body", "POST", P, 422, V, content=b"[]"),
        Case("init-wrong-method", "GET", P, 405, "METHOD_NOT_ALLOWED"),
    ]
    for n in BIG:
        c.append(Case(f"init-producer-id-{n}", "POST", P, 422, V,
                      json={"transactional_id": "open-txn", "producer_id": n, "producer_epoch": 0}))
        c.append(Case(f"init-epoch-{n}", "POST", P, 422, V,
                      json=lambda s, n=n: {"transactional_id": "open-txn",
                                           "producer_id": s.txn["producer_id"], "producer_epoch": n}))
        c.append(Case(f"init-timeout-{n}", "POST", P, 400, "INVALID_TRANSACTION_TIMEOUT",
                      json={"transactional_id": "brand-new", "transaction_timeout_ms": n}))
    return c


def transaction_cases() -> list[Case]:
    T = "/v1/transactions"
    c: list[Case] = []
    for action in ("begin", "commit", "abort"):
        path = f"{T}/open-txn/{action}"
        c += [
            Case(f"{action}-unknown-tid", "POST", f"{T}/no-such-id/{action}", 404,
                 "TRANSACTIONAL_ID_NOT_FOUND", json=lambda s: _txn(s)),
            Case(f"{action}-tid-300-chars", "POST", f"{T}/{'x' * 300}/{action}", 422, V,
                 json=lambda s: _txn(s)),
            Case(f"{action}-tid-1000-chars", "POST", f"{T}/{LONG_TID}/{action}", 422, V,
                 json=lambda s: _txn(s)),
            Case(f"{action}-missing-body", "POST", path, 400, V),
            Case(f"{action}-missing-epoch", "POST", path, 422, V,
                 json=lambda s: {"producer_id": s.txn["producer_id"]}),
            Case(f"{action}-missing-producer-id", "POST", path, 422, V,
                 json=lambda s: {"producer_epoch": s.txn["producer_epoch"]}),
            Case(f"{action}-producer-id-string", "POST", path, 422, V,
                 json={"producer_id": "abc", "producer_epoch": 0}),
            Case(f"{action}-producer-id-null", "POST", path, 422, V,
                 json={"producer_id": None, "producer_epoch": 0}),
            Case(f"{action}-body-list", "POST", path, 422, V, json=[1, 0]),
            Case(f"{action}-producer-id-negative", "POST", path, 422, V,
                 json={"producer_id": -1, "producer_epoch": 0}),
            Case(f"{action}-epoch-negative", "POST", path, 422, V,
                 json=lambda s: {"producer_id": s.txn["producer_id"], "producer_epoch": -1}),
            Case(f"{action}-unknown-field", "POST", path, 422, V,
                 json=lambda s: _txn(s, isolation="serializable")),
            Case(f"{action}-malformed-json", "POST", path, 400, V, content=b'{"producer_id": 1,}'),
            Case(f"{action}-stale-epoch", "POST", f"{T}/fenced-txn/{action}", 409, "PRODUCER_FENCED",
                 json=lambda s: _txn(s, s.stale)),
            Case(f"{action}-newer-epoch", "POST", path, 409, "INVALID_PRODUCER_EPOCH",
                 json=lambda s: {"producer_id": s.txn["producer_id"],
                                 "producer_epoch": s.txn["producer_epoch"] + 1}),
            Case(f"{action}-other-producer-id", "POST", path, 409, "INVALID_PRODUCER_ID_MAPPING",
                 json=lambda s: _txn(s, s.idem)),
            Case(f"{action}-wrong-method", "GET", path, 405, "METHOD_NOT_ALLOWED"),
        ]
        for n in BIG:
            c.append(Case(f"{action}-producer-id-{n}", "POST", path, 422, V,
                          json={"producer_id": n, "producer_epoch": 0}))
            c.append(Case(f"{action}-epoch-{n}", "POST", path, 422, V,
                          json=lambda s, n=n: {"producer_id": s.txn["producer_id"], "producer_epoch": n}))
    c += [
        Case("begin-while-ongoing", "POST", f"{T}/open-txn/begin", 409, "INVALID_TXN_STATE",
             json=lambda s: _txn(s)),
        Case("commit-not-begun", "POST", f"{T}/idle-txn/commit", 409, "INVALID_TXN_STATE",
             json=lambda s: _txn(s, s.idle)),
        Case("abort-not-begun", "POST", f"{T}/idle-txn/abort", 409, "INVALID_TXN_STATE",
             json=lambda s: _txn(s, s.idle)),
        Case("commit-fenced-instance-current-not-begun", "POST", f"{T}/fenced-txn/commit", 409,
             "INVALID_TXN_STATE", json=lambda s: _txn(s, s.current)),
        Case("commit-other-txn-id", "POST", f"{T}/open-txn/commit", 409, "INVALID_TXN_STATE",
             json=lambda s: _txn(s, txn_id=s.txn_id + 100)),
        Case("abort-other-txn-id", "POST", f"{T}/open-txn/abort", 409, "INVALID_TXN_STATE",
             json=lambda s: _txn(s, txn_id=s.txn_id + 100)),
        Case("commit-txn-id-negative", "POST", f"{T}/open-txn/commit", 422, V,
             json=lambda s: _txn(s, txn_id=-1)),
        Case("commit-txn-id-2**63", "POST", f"{T}/open-txn/commit", 422, V,
             json=lambda s: _txn(s, txn_id=2**63)),
        Case("commit-txn-id-string", "POST", f"{T}/open-txn/commit", 422, V,
             json=lambda s: _txn(s, txn_id="latest")),
        Case("describe-unknown-tid", "GET", f"{T}/no-such-id", 404, "TRANSACTIONAL_ID_NOT_FOUND"),
        Case("describe-tid-300-chars", "GET", f"{T}/{'x' * 300}", 422, V),
        Case("describe-wrong-method", "DELETE", f"{T}/open-txn", 405, "METHOD_NOT_ALLOWED"),
        Case("list-state-bogus", "GET", T, 422, V, params={"state": "bogus"}),
        Case("list-state-lowercase", "GET", T, 422, V, params={"state": "ongoing"}),
        Case("list-limit-zero", "GET", T, 422, V, params={"limit": 0}),
        Case("list-limit-negative", "GET", T, 422, V, params={"limit": -1}),
        Case("list-limit-string", "GET", T, 422, V, params={"limit": "all"}),
        Case("list-limit-10**30", "GET", T, 422, V, params={"limit": 10**30}),
        Case("list-min-age-negative", "GET", T, 422, V, params={"min_age_ms": -1}),
        Case("list-min-age-2**63", "GET", T, 422, V, params={"min_age_ms": 2**63}),
        Case("list-min-age-string", "GET", T, 422, V, params={"min_age_ms": "old"}),
        Case("list-min-age-ended-state", "GET", T, 400, V, params={"state": "CompleteCommit", "min_age_ms": 0}),
        Case("list-hanging-bogus", "GET", T, 422, V, params={"hanging": "perhaps"}),
        Case("list-wrong-method", "POST", T, 405, "METHOD_NOT_ALLOWED", json={}),
    ]
    return c


def add_offsets_cases() -> list[Case]:
    O = "/v1/transactions/open-txn/offsets"

    def body(s: State, offsets: Any = None, **extra: Any) -> dict:
        out = {**ident(s.txn), "group_id": "txn-group",
               "offsets": [{"topic": "orders", "partition": 1, "offset": 5}] if offsets is None else offsets}
        out.update(extra)
        return out

    c = [
        Case("offsets-unknown-tid", "POST", "/v1/transactions/no-such-id/offsets", 404,
             "TRANSACTIONAL_ID_NOT_FOUND", json=lambda s: body(s)),
        Case("offsets-not-begun", "POST", "/v1/transactions/idle-txn/offsets", 409, "INVALID_TXN_STATE",
             json=lambda s: {**body(s), **ident(s.idle)}),
        Case("offsets-stale-epoch", "POST", "/v1/transactions/fenced-txn/offsets", 409, "PRODUCER_FENCED",
             json=lambda s: {**body(s), **ident(s.stale)}),
        Case("offsets-newer-epoch", "POST", O, 409, "INVALID_PRODUCER_EPOCH",
             json=lambda s: body(s, producer_epoch=s.txn["producer_epoch"] + 1)),
        Case("offsets-other-producer-id", "POST", O, 409, "INVALID_PRODUCER_ID_MAPPING",
             json=lambda s: {**body(s), **ident(s.idem)}),
        Case("offsets-unknown-topic", "POST", O, 404, "UNKNOWN_TOPIC_OR_PARTITION",
             json=lambda s: body(s, [{"topic": "orders", "partition": 1, "offset": 5},
                                     {"topic": "nope", "partition": 0, "offset": 1}])),
        Case("offsets-partition-out-of-range", "POST", O, 404, "UNKNOWN_TOPIC_OR_PARTITION",
             json=lambda s: body(s, [{"topic": "orders", "partition": 1, "offset": 5},
                                     {"topic": "orders", "partition": 2, "offset": 1}])),
        Case("offsets-two-for-one-partition", "POST", O, 400, V,
             json=lambda s: body(s, [{"topic": "orders", "partition": 1, "offset": 5},
                                     {"topic": "orders", "partition": 1, "offset": 6}])),
        # Not Kafka's last-entry rule (the Kafka door's); nor are two equal entries taken as one.
        Case("offsets-the-same-entry-twice", "POST", O, 400, V,
             json=lambda s: body(s, [{"topic": "orders", "partition": 1, "offset": 5}] * 2)),
        Case("offsets-negative-offset", "POST", O, 422, V,
             json=lambda s: body(s, [{"topic": "orders", "partition": 1, "offset": -1}])),
        Case("offsets-negative-partition", "POST", O, 422, V,
             json=lambda s: body(s, [{"topic": "orders", "partition": -1, "offset": 1}])),
        Case("offsets-empty-list", "POST", O, 422, V, json=lambda s: body(s, [])),
        Case("offsets-object-not-list", "POST", O, 422, V,
             json=lambda s: body(s, {"topic": "orders", "partition": 1, "offset": 5})),
        Case("offsets-entry-null", "POST", O, 422, V, json=lambda s: body(s, [None])),
        Case("offsets-entry-missing-offset", "POST", O, 422, V,
             json=lambda s: body(s, [{"topic": "orders", "partition": 1}])),
        Case("offsets-entry-unknown-field", "POST", O, 422, V,
             json=lambda s: body(s, [{"topic": "orders", "partition": 1, "offset": 5, "leader_epoch": 3}])),
        Case("offsets-metadata-5000-chars", "POST", O, 413, "OFFSET_METADATA_TOO_LARGE",
             json=lambda s: body(s, [{"topic": "orders", "partition": 1, "offset": 5, "metadata": "m" * 5000}])),
        Case("offsets-missing-group", "POST", O, 422, V,
             json=lambda s: {k: v for k, v in body(s).items() if k != "group_id"}),
        Case("offsets-group-empty", "POST", O, 422, V, json=lambda s: body(s, group_id="")),
        Case("offsets-group-300-chars", "POST", O, 422, V, json=lambda s: body(s, group_id="g" * 300)),
        Case("offsets-group-int", "POST", O, 422, V, json=lambda s: body(s, group_id=5)),
        Case("offsets-unknown-field", "POST", O, 422, V, json=lambda s: body(s, leader_epoch=1)),
        Case("offsets-generation-string", "POST", O, 422, V,
             json=lambda s: body(s, group_id="member-group", generation_id="x", member_id=s.member_id)),
        Case("offsets-generation-negative", "POST", O, 422, V,
             json=lambda s: body(s, group_id="member-group", generation_id=-1, member_id=s.member_id)),
        Case("offsets-generation-without-member", "POST", O, 400, V,
             json=lambda s: body(s, group_id="member-group", generation_id=s.generation_id)),
        Case("offsets-member-without-generation", "POST", O, 400, V,
             json=lambda s: body(s, group_id="member-group", member_id=s.member_id)),
        Case("offsets-stale-generation", "POST", O, 409, "ILLEGAL_GENERATION",
             json=lambda s: body(s, group_id="member-group", generation_id=s.generation_id - 1,
                                 member_id=s.member_id)),
        # Kafka's order: the group's generation before the metadata's length.
        Case("offsets-stale-generation-metadata-5000-chars", "POST", O, 409, "ILLEGAL_GENERATION",
             json=lambda s: body(s, [{"topic": "orders", "partition": 1, "offset": 5, "metadata": "m" * 5000}],
                                 group_id="member-group", generation_id=s.generation_id - 1, member_id=s.member_id)),
        Case("offsets-future-generation", "POST", O, 409, "ILLEGAL_GENERATION",
             json=lambda s: body(s, group_id="member-group", generation_id=s.generation_id + 1,
                                 member_id=s.member_id)),
        Case("offsets-unknown-member", "POST", O, 409, "UNKNOWN_MEMBER_ID",
             json=lambda s: body(s, group_id="member-group", generation_id=s.generation_id,
                                 member_id="nobody")),
        Case("offsets-member-of-no-group", "POST", O, 409, "UNKNOWN_MEMBER_ID",
             json=lambda s: body(s, group_id="new-group", generation_id=0, member_id=s.member_id)),
        Case("offsets-malformed-json", "POST", O, 400, V, content=b'{"group_id": "txn-group"'),
        Case("offsets-wrong-method", "GET", O, 405, "METHOD_NOT_ALLOWED"),
    ]
    for n in BIG:
        c.append(Case(f"offsets-offset-{n}", "POST", O, 422, V,
                      json=lambda s, n=n: body(s, [{"topic": "orders", "partition": 1, "offset": n}])))
        c.append(Case(f"offsets-partition-{n}", "POST", O, 422, V,
                      json=lambda s, n=n: body(s, [{"topic": "orders", "partition": n, "offset": 1}])))
    return c


def send_cases() -> list[Case]:
    R = "/v1/records"
    good0 = _rec("orders", 0, "x")
    c = [
        # shape
        Case("send-missing-batches", "POST", R, 422, V, json={}),
        Case("send-batches-null", "POST", R, 422, V, json={"batches": None}),
        Case("send-batches-object", "POST", R, 422, V, json={"batches": good0}),
        Case("send-empty-batches", "POST", R, 422, V, json={"batches": []}),
        Case("send-empty-records", "POST", R, 422, V, json={"batches": [_rec("orders", 0)]}),
        Case("send-empty-records-beside-good-batch", "POST", R, 422, V,
             json={"batches": [good0, _rec("orders", 1)]}),
        Case("send-records-null", "POST", R, 422, V,
             json={"batches": [{"topic": "orders", "partition": 0, "records": None}]}),
        Case("send-records-object", "POST", R, 422, V,
             json={"batches": [{"topic": "orders", "partition": 0, "records": {"value": 1}}]}),
        Case("send-record-not-object", "POST", R, 422, V,
             json={"batches": [{"topic": "orders", "partition": 0, "records": ["x"]}]}),
        Case("send-batch-missing-topic", "POST", R, 422, V,
             json={"batches": [{"partition": 0, "records": [{"value": 1}]}]}),
        Case("send-batch-missing-partition", "POST", R, 422, V,
             json={"batches": [{"topic": "orders", "records": [{"value": 1}]}]}),
        Case("send-batch-missing-records", "POST", R, 422, V,
             json={"batches": [{"topic": "orders", "partition": 0}]}),
        Case("send-partition-string", "POST", R, 422, V, json={"batches": [_rec("orders", "abc", 1)]}),  # type: ignore[arg-type]
        Case("send-partition-null", "POST", R, 422, V, json={"batches": [_rec("orders", None, 1)]}),  # type: ignore[arg-type]
        Case("send-partition-negative", "POST", R, 422, V, json={"batches": [_rec("orders", -1, 1)]}),
        Case("send-partition-2**31", "POST", R, 422, V, json={"batches": [_rec("orders", 2**31, 1)]}),
        Case("send-topic-300-chars", "POST", R, 422, V, json={"batches": [_rec(LONG_TOPIC, 0, 1)]}),
        Case("send-topic-empty", "POST", R, 422, V, json={"batches": [_rec("", 0, 1)]}),
        Case("send-topic-int", "POST", R, 422, V, json={"batches": [_rec(5, 0, 1)]}),  # type: ignore[arg-type]
        Case("send-unknown-field", "POST", R, 422, V, json={"batches": [good0], "acks": "all"}),
        Case("send-batch-unknown-field", "POST", R, 422, V,
             json={"batches": [{**good0, "compression": "gzip"}]}),
        Case("send-record-unknown-field", "POST", R, 422, V,
             json={"batches": [{"topic": "orders", "partition": 0, "records": [{"value": 1, "offset": 9}]}]}),
        Case("send-key-int", "POST", R, 422, V,
             json={"batches": [{"topic": "orders", "partition": 0, "records": [{"key": 5}]}]}),
        Case("send-key-object", "POST", R, 422, V,
             json={"batches": [{"topic": "orders", "partition": 0, "records": [{"key": {"a": 1}}]}]}),
        Case("send-headers-list", "POST", R, 422, V,
             json={"batches": [{"topic": "orders", "partition": 0, "records": [{"headers": [["a", "b"]]}]}]}),
        Case("send-headers-int-value", "POST", R, 422, V,
             json={"batches": [{"topic": "orders", "partition": 0, "records": [{"headers": {"a": 1}}]}]}),
        Case("send-headers-null-value", "POST", R, 422, V,
             json={"batches": [{"topic": "orders", "partition": 0, "records": [{"headers": {"a": None}}]}]}),
        Case("send-timestamp-negative", "POST", R, 422, V,
             json={"batches": [{"topic": "orders", "partition": 0, "records": [{"timestamp_ms": -1}]}]}),
        Case("send-timestamp-string", "POST", R, 422, V,
             json={"batches": [{"topic": "orders", "partition": 0, "records": [{"timestamp_ms": "now"}]}]}),
        Case("send-base-sequence-negative", "POST", R, 422, V,
             json=_send([_rec("orders", 1, 1, base_sequence=-1)], "idem")),
        Case("send-base-sequence-bool", "POST", R, 422, V,
             json=_send([_rec("orders", 1, 1, base_sequence=True)], "idem")),
        Case("send-base-sequence-2**31", "POST", R, 422, V,
             json=_send([_rec("orders", 1, 1, base_sequence=2**31)], "idem")),
        Case("send-expected-offset-negative", "POST", R, 422, V,
             json={"batches": [_rec("orders", 0, 1, expected_offset=-1)]}),
        Case("send-expected-offset-string", "POST", R, 422, V,
             json={"batches": [_rec("orders", 0, 1, expected_offset="end")]}),
        Case("send-tid-empty", "POST", R, 422, V, json=_send([good0], "txn", "")),
        Case("send-tid-1000-chars", "POST", R, 422, V, json=_send([good0], "txn", LONG_TID)),
        Case("send-producer-id-negative", "POST", R, 422, V,
             json={"producer_id": -1, "producer_epoch": 0, "batches": [_rec("orders", 1, 1, base_sequence=2)]}),
        Case("send-epoch-negative", "POST", R, 422, V,
             json=lambda s: {"producer_id": s.idem["producer_id"], "producer_epoch": -1,
                             "batches": [_rec("orders", 1, 1, base_sequence=2)]}),
        Case("send-epoch-32768", "POST", R, 422, V,
             json=lambda s: {"producer_id": s.idem["producer_id"], "producer_epoch": 32768,
                             "batches": [_rec("orders", 1, 1, base_sequence=2)]}),
        Case("send-malformed-json", "POST", R, 400, V, content=b'{"batches": [{"topic": "orders",'),
        Case("send-trailing-comma", "POST", R, 400, V,
             content=b'{"batches": [{"topic": "orders", "partition": 0, "records": [{"value": 1}]},]}'),
        Case("send-json-array-body", "POST", R, 422, V, content=b'[{"topic": "orders"}]'),
        Case("send-empty-body", "POST", R, 400, V, content=b""),
        Case("send-non-standard-nan", "POST", R, 400, V,
             content=b'{"batches": [{"topic": "orders", "partition": 0, "records": [{"value": NaN}]}]}'),
        Case("send-non-standard-infinity", "POST", R, 400, V,
             content=b'{"batches": [{"topic": "orders", "partition": 0, "records": [{"value": Infinity}]}]}'),
        Case("send-value-lone-surrogate", "POST", R, 400, V,
             content=b'{"batches": [{"topic": "orders", "partition": 0, "records": [{"value": "\\ud800"}]}]}'),
        Case("send-key-lone-surrogate", "POST", R, 400, V,
             content=b'{"batches": [{"topic": "orders", "partition": 0, "records": [{"key": "\\udfff"}]}]}'),
        Case("send-header-lone-surrogate", "POST", R, 400, V,
             content=b'{"batches": [{"topic": "orders", "partition": 0, "records": [{"headers": {"h": "\\ud83d"}}]}]}'),
        Case("send-wrong-method", "GET", R, 405, "METHOD_NOT_ALLOWED"),
        Case("send-wrong-method-put", "PUT", R, 405, "METHOD_NOT_ALLOWED", json={"batches": [good0]}),
        # topics and partitions
        Case("send-unknown-topic", "POST", R, 404, "UNKNOWN_TOPIC_OR_PARTITION",
             json={"batches": [_rec("nope", 0, 1)]}),
        Case("send-unknown-topic-beside-good-batch", "POST", R, 404, "UNKNOWN_TOPIC_OR_PARTITION",
             json={"batches": [good0, _rec("nope", 0, 1)]}),
        Case("send-partition-out-of-range", "POST", R, 404, "UNKNOWN_TOPIC_OR_PARTITION",
             json={"batches": [good0, _rec("orders", 2, 1)]}),
        Case("send-two-batches-same-partition", "POST", R, 400, V,
             json={"batches": [good0, _rec("orders", 0, "y")]}),
        Case("send-too-many-records", "POST", R, 413, "RECORD_LIST_TOO_LARGE",
             json=lambda s: {"batches": [{"topic": "orders", "partition": 0,
                                          "records": [{"value": i} for i in range(20_001)]}]}),
        Case("send-too-many-records-over-batches", "POST", R, 413, "RECORD_LIST_TOO_LARGE",
             json=lambda s: {"batches": [{"topic": "payments", "partition": p,
                                          "records": [{"value": i} for i in range(6_667)]}
                                         for p in range(3)]}),
        # producer fields
        Case("send-producer-id-without-epoch", "POST", R, 400, V,
             json=lambda s: {"producer_id": s.idem["producer_id"],
                             "batches": [_rec("orders", 1, 1, base_sequence=2)]}),
        Case("send-epoch-without-producer-id", "POST", R, 400, V,
             json={"producer_epoch": 0, "batches": [_rec("orders", 1, 1, base_sequence=2)]}),
        Case("send-base-sequence-without-producer", "POST", R, 400, V,
             json={"batches": [_rec("orders", 0, 1, base_sequence=0)]}),
        Case("send-idempotent-batch-without-base-sequence", "POST", R, 400, V,
             json=_send([_rec("orders", 1, 1)], "idem")),
        Case("send-idempotent-one-batch-without-base-sequence", "POST", R, 400, V,
             json=_send([_rec("orders", 1, 1, base_sequence=2), _rec("orders", 0, 1)], "idem")),
        Case("send-tid-without-producer", "POST", R, 400, V,
             json={"transactional_id": "open-txn", "batches": [_rec("orders", 0, 1, base_sequence=2)]}),
        Case("send-unknown-idempotent-producer", "POST", R, 409, "UNKNOWN_PRODUCER_ID",
             json={"producer_id": 999_999, "producer_epoch": 0,
                   "batches": [_rec("orders", 0, 1, base_sequence=0)]}),
        Case("send-idempotent-wrong-epoch", "POST", R, 409, "INVALID_PRODUCER_EPOCH",
             json=lambda s: {"producer_id": s.idem["producer_id"], "producer_epoch": 1,
                             "batches": [_rec("orders", 1, 1, base_sequence=2)]}),
        Case("send-transactional-producer-without-tid", "POST", R, 400, V,
             json=_send([_rec("orders", 0, 1, base_sequence=2)], "txn")),
        Case("send-unknown-tid", "POST", R, 404, "TRANSACTIONAL_ID_NOT_FOUND",
             json=_send([_rec("orders", 0, 1, base_sequence=2)], "txn", "no-such-id")),
        Case("send-transactional-without-begin", "POST", R, 409, "INVALID_TXN_STATE",
             json=_send([_rec("orders", 0, 1, base_sequence=0)], "idle", "idle-txn")),
        Case("send-stale-epoch-after-new-init", "POST", R, 409, "PRODUCER_FENCED",
             json=_send([_rec("orders", 0, 1, base_sequence=0)], "stale", "fenced-txn")),
        Case("send-transactional-newer-epoch", "POST", R, 409, "INVALID_PRODUCER_EPOCH",
             json=lambda s: {"transactional_id": "open-txn", "producer_id": s.txn["producer_id"],
                             "producer_epoch": s.txn["producer_epoch"] + 1,
                             "batches": [_rec("orders", 0, 1, base_sequence=2)]}),
        Case("send-transactional-other-producer-id", "POST", R, 409, "INVALID_PRODUCER_ID_MAPPING",
             json=_send([_rec("orders", 0, 1, base_sequence=2)], "idem", "open-txn")),
        Case("send-tid-of-other-producer", "POST", R, 409, "INVALID_PRODUCER_ID_MAPPING",
             json=_send([_rec("orders", 0, 1, base_sequence=0)], "idle", "open-txn")),
        # sequences (orders/1 of idem holds 0..1; open-txn holds orders/0 0..1 and payments/1 0)
        Case("send-idempotent-sequence-gap", "POST", R, 409, "OUT_OF_ORDER_SEQUENCE_NUMBER",
             json=_send([_rec("orders", 0, "a", base_sequence=0), _rec("orders", 1, "b", base_sequence=5)],
                        "idem")),
        Case("send-transactional-sequence-gap", "POST", R, 409, "OUT_OF_ORDER_SEQUENCE_NUMBER",
             json=_send([_rec("orders", 0, "a", base_sequence=2), _rec("payments", 1, "b", base_sequence=5)],
                        "txn", "open-txn")),
        Case("send-idempotent-overlapping-sequence", "POST", R, 409, "DUPLICATE_SEQUENCE_NUMBER",
             json=_send([_rec("orders", 1, "b", base_sequence=1)], "idem")),
        Case("send-idempotent-partial-retry", "POST", R, 409, "DUPLICATE_SEQUENCE_NUMBER",
             json=_send([_rec("orders", 0, "a", base_sequence=0), _rec("orders", 1, "b", base_sequence=0)],
                        "idem")),
        Case("send-idempotent-first-batch-not-at-zero", "POST", R, 409, "UNKNOWN_PRODUCER_ID",
             json=_send([_rec("orders", 1, "a", base_sequence=2), _rec("payments", 0, "b", base_sequence=3)],
                        "idem")),
        Case("send-idempotent-sequence-overflow", "POST", R, 409, "OUT_OF_ORDER_SEQUENCE_NUMBER",
             json=_send([_rec("payments", 0, "a", "b", base_sequence=2**31 - 1)], "idem")),
        # KIP-27 expected offsets (orders/0 ends at 3, orders/1 at 3, payments/0 at 0, guarded/0 at 1)
        Case("send-expected-offset-mismatch-later-batch", "POST", R, 409, "OFFSET_MISMATCH",
             json={"batches": [_rec("orders", 0, "a", expected_offset=3), _rec("orders", 1, "b", expected_offset=0)]}),
        Case("send-expected-offset-mismatch-first-batch", "POST", R, 409, "OFFSET_MISMATCH",
             json={"batches": [_rec("orders", 1, "b", expected_offset=3), _rec("orders", 0, "a", expected_offset=9)]}),
        Case("send-expected-offset-mismatch-across-topics", "POST", R, 409, "OFFSET_MISMATCH",
             json={"batches": [_rec("payments", 2, "a", expected_offset=5), _rec("payments", 0, "b"),
                               _rec("orders", 0, "c", expected_offset=3)]}),
        Case("send-expected-offset-beyond-log-end", "POST", R, 409, "OFFSET_MISMATCH",
             json={"batches": [_rec("payments", 0, "a", expected_offset=2**63 - 1)]}),
        Case("send-expected-offset-mismatch-idempotent", "POST", R, 409, "OFFSET_MISMATCH",
             json=_send([_rec("payments", 0, "a", base_sequence=0, expected_offset=5),
                         _rec("orders", 1, "b", base_sequence=2, expected_offset=3)], "idem")),
        Case("send-expected-offset-mismatch-transactional", "POST", R, 409, "OFFSET_MISMATCH",
             json=_send([_rec("payments", 2, "a", base_sequence=0, expected_offset=1),
                         _rec("orders", 0, "b", base_sequence=2, expected_offset=3)], "txn", "open-txn")),
        Case("send-guarded-topic-without-expected-offset", "POST", R, 400, V,
             json={"batches": [_rec("guarded", 0, "a")]}),
        Case("send-guarded-topic-without-expected-offset-beside-good-batch", "POST", R, 400, V,
             json={"batches": [good0, _rec("guarded", 0, "a")]}),
        Case("send-guarded-topic-wrong-expected-offset", "POST", R, 409, "OFFSET_MISMATCH",
             json={"batches": [good0, _rec("guarded", 0, "a", expected_offset=0)]}),
    ]
    for n in BIG:
        c += [
            Case(f"send-partition-{n}", "POST", R, 422, V, json={"batches": [_rec("orders", n, 1)]}),
            Case(f"send-base-sequence-{n}", "POST", R, 422, V,
                 json=_send([_rec("orders", 1, 1, base_sequence=n)], "idem")),
            Case(f"send-expected-offset-{n}", "POST", R, 422, V,
                 json={"batches": [_rec("orders", 0, 1, expected_offset=n)]}),
            Case(f"send-producer-id-{n}", "POST", R, 422, V,
                 json={"producer_id": n, "producer_epoch": 0, "batches": [_rec("orders", 1, 1, base_sequence=2)]}),
            Case(f"send-epoch-{n}", "POST", R, 422, V,
                 json=lambda s, n=n: {"producer_id": s.idem["producer_id"], "producer_epoch": n,
                                      "batches": [_rec("orders", 1, 1, base_sequence=2)]}),
            Case(f"send-timestamp-{n}", "POST", R, 422, V,
                 json={"batches": [{"topic": "orders", "partition": 0, "records": [{"timestamp_ms": n}]}]}),
        ]
    return c


def group_cases() -> list[Case]:
    G = "/v1/groups/new-group/offsets"

    def entry(**kw: Any) -> dict:
        return {"topic": "orders", "partition": 0, "offset": 1, **kw}

    c = [
        Case("group-commit-missing-offsets", "POST", G, 422, V, json={}),
        Case("group-commit-empty-offsets", "POST", G, 422, V, json={"offsets": []}),
        Case("group-commit-offsets-null", "POST", G, 422, V, json={"offsets": None}),
        Case("group-commit-offsets-object", "POST", G, 422, V, json={"offsets": entry()}),
        Case("group-commit-unknown-topic", "POST", G, 404, "UNKNOWN_TOPIC_OR_PARTITION",
             json={"offsets": [entry(), entry(topic="nope")]}),
        Case("group-commit-partition-out-of-range", "POST", G, 404, "UNKNOWN_TOPIC_OR_PARTITION",
             json={"offsets": [entry(), entry(partition=2)]}),
        Case("group-commit-two-for-one-partition", "POST", G, 400, V,
             json={"offsets": [entry(), entry(offset=2)]}),
        Case("group-commit-the-same-entry-twice", "POST", G, 400, V, json={"offsets": [entry(), entry()]}),
        Case("group-commit-negative-offset", "POST", G, 422, V, json={"offsets": [entry(offset=-1)]}),
        Case("group-commit-negative-partition", "POST", G, 422, V, json={"offsets": [entry(partition=-1)]}),
        Case("group-commit-offset-string", "POST", G, 422, V, json={"offsets": [entry(offset="latest")]}),
        Case("group-commit-offset-null", "POST", G, 422, V, json={"offsets": [entry(offset=None)]}),
        Case("group-commit-offset-bool", "POST", G, 422, V, json={"offsets": [entry(offset=False)]}),
        Case("group-commit-topic-null", "POST", G, 422, V, json={"offsets": [entry(topic=None)]}),
        Case("group-commit-topic-300-chars", "POST", G, 422, V, json={"offsets": [entry(topic=LONG_TOPIC)]}),
        Case("group-commit-metadata-int", "POST", G, 422, V, json={"offsets": [entry(metadata=5)]}),
        Case("group-commit-metadata-5000-chars", "POST", G, 413, "OFFSET_METADATA_TOO_LARGE",
             json={"offsets": [entry(metadata="m" * 5000)]}),
        Case("group-commit-entry-unknown-field", "POST", G, 422, V, json={"offsets": [entry(leader_epoch=1)]}),
        Case("group-commit-unknown-field", "POST", G, 422, V, json={"offsets": [entry()], "leader_epoch": 1}),
        Case("group-commit-generation-without-member", "POST", "/v1/groups/member-group/offsets", 400, V,
             json=lambda s: {"offsets": [entry()], "generation_id": s.generation_id}),
        Case("group-commit-member-without-generation", "POST", "/v1/groups/member-group/offsets", 400, V,
             json=lambda s: {"offsets": [entry()], "member_id": s.member_id}),
        Case("group-commit-stale-generation", "POST", "/v1/groups/member-group/offsets", 409,
             "ILLEGAL_GENERATION",
             json=lambda s: {"offsets": [entry()], "generation_id": s.generation_id - 1, "member_id": s.member_id}),
        Case("group-commit-stale-generation-metadata-5000-chars", "POST", "/v1/groups/member-group/offsets", 409,
             "ILLEGAL_GENERATION", json=lambda s: {"offsets": [entry(metadata="m" * 5000)],
                                                   "generation_id": s.generation_id - 1, "member_id": s.member_id}),
        Case("group-commit-unknown-member", "POST", "/v1/groups/member-group/offsets", 409, "UNKNOWN_MEMBER_ID",
             json=lambda s: {"offsets": [entry()], "generation_id": s.generation_id, "member_id": "nobody"}),
        Case("group-commit-generation-negative", "POST", "/v1/groups/member-group/offsets", 422, V,
             json=lambda s: {"offsets": [entry()], "generation_id": -1, "member_id": s.member_id}),
        Case("group-commit-generation-2**31", "POST", "/v1/groups/member-group/offsets", 422, V,
             json=lambda s: {"offsets": [entry()], "generation_id": 2**31, "member_id": s.member_id}),
        Case("group-commit-member-id-empty", "POST", "/v1/groups/member-group/offsets", 422, V,
             json=lambda s: {"offsets": [entry()], "generation_id": s.generation_id, "member_id": ""}),
        Case("group-commit-current-generation-unknown-topic", "POST", "/v1/groups/member-group/offsets", 404,
             "UNKNOWN_TOPIC_OR_PARTITION",
             json=lambda s: {"offsets": [entry(), entry(topic="nope")], "generation_id": s.generation_id,
                             "member_id": s.member_id}),
        Case("group-commit-group-300-chars", "POST", f"/v1/groups/{'g' * 300}/offsets", 422, V,
             json={"offsets": [entry()]}),
        Case("group-commit-malformed-json", "POST", G, 400, V, content=b'{"offsets": [{"topic": "orders"'),
        Case("group-fetch-pending-offsets-unstable", "GET", "/v1/groups/txn-group/offsets", 409,
             "UNSTABLE_OFFSET_COMMIT"),
        Case("group-fetch-pending-offsets-unstable-topic", "GET", "/v1/groups/txn-group/offsets", 409,
             "UNSTABLE_OFFSET_COMMIT", params={"topic": "orders"}),
        # A named topic that does not exist is no bad input: it has no offsets, and the others
        # named are answered (tests/kafka/test_offsets_across_doors.py).
        Case("group-fetch-topic-empty", "GET", "/v1/groups/committed-group/offsets", 422, V,
             params={"topic": ""}),
        Case("group-fetch-topic-300-chars", "GET", "/v1/groups/committed-group/offsets", 422, V,
             params={"topic": LONG_TOPIC}),
        Case("group-fetch-require-stable-bogus", "GET", "/v1/groups/committed-group/offsets", 422, V,
             params={"require_stable": "perhaps"}),
        Case("group-fetch-group-300-chars", "GET", f"/v1/groups/{'g' * 300}/offsets", 422, V),
        Case("group-fetch-wait-negative", "GET", "/v1/groups/committed-group/offsets", 422, V,
             params={"wait_ms": -1}),
        Case("group-fetch-wait-string", "GET", "/v1/groups/committed-group/offsets", 422, V,
             params={"wait_ms": "forever"}),
        Case("group-fetch-wait-10**30", "GET", "/v1/groups/committed-group/offsets", 422, V,
             params={"wait_ms": 10**30}),
        Case("group-wrong-method", "DELETE", G, 405, "METHOD_NOT_ALLOWED"),
        Case("group-wrong-method-put", "PUT", G, 405, "METHOD_NOT_ALLOWED", json={"offsets": [entry()]}),
    ]
    for n in BIG:
        c.append(Case(f"group-commit-offset-{n}", "POST", G, 422, V, json={"offsets": [entry(offset=n)]}))
        c.append(Case(f"group-commit-partition-{n}", "POST", G, 422, V, json={"offsets": [entry(partition=n)]}))
    return c


def membership_cases() -> list[Case]:
    J = "/v1/groups/member-group/members"
    c = [
        Case("join-missing-topics", "POST", J, 422, V, json={}),
        Case("join-topics-empty", "POST", J, 422, V, json={"topics": []}),
        Case("join-topics-string", "POST", J, 422, V, json={"topics": "orders"}),
        Case("join-topics-null-entry", "POST", J, 422, V, json={"topics": [None]}),
        Case("join-topics-empty-name", "POST", J, 422, V, json={"topics": [""]}),
        Case("join-topic-300-chars", "POST", J, 422, V, json={"topics": [LONG_TOPIC]}),
        Case("join-unknown-topic", "POST", "/v1/groups/new-group/members", 404, "UNKNOWN_TOPIC_OR_PARTITION",
             json={"topics": ["orders", "nope"]}),
        Case("join-unknown-topic-existing-group", "POST", J, 404, "UNKNOWN_TOPIC_OR_PARTITION",
             json=lambda s: {"topics": ["nope"], "member_id": s.member_id}),
        Case("join-session-timeout-zero", "POST", J, 400, "INVALID_SESSION_TIMEOUT", json={"topics": ["orders"], "session_timeout_ms": 0}),
        Case("join-session-timeout-negative", "POST", J, 400, "INVALID_SESSION_TIMEOUT",
             json={"topics": ["orders"], "session_timeout_ms": -1}),
        Case("join-session-timeout-string", "POST", J, 422, V,
             json={"topics": ["orders"], "session_timeout_ms": "45s"}),
        Case("join-session-timeout-below-min", "POST", J, 400, "INVALID_SESSION_TIMEOUT",
             json={"topics": ["orders"], "session_timeout_ms": 999}),
        Case("join-session-timeout-above-max", "POST", J, 400, "INVALID_SESSION_TIMEOUT",
             json={"topics": ["orders"], "session_timeout_ms": 1_800_001}),
        Case("join-session-timeout-2**31", "POST", J, 400, "INVALID_SESSION_TIMEOUT",
             json={"topics": ["orders"], "session_timeout_ms": 2**31}),
        Case("join-unknown-member", "POST", J, 409, "UNKNOWN_MEMBER_ID",
             json={"topics": ["orders"], "member_id": "nobody"}),
        Case("join-unknown-member-new-group", "POST", "/v1/groups/new-group/members", 409, "UNKNOWN_MEMBER_ID",
             json={"topics": ["orders"], "member_id": "nobody"}),
        Case("join-member-id-empty", "POST", J, 422, V, json={"topics": ["orders"], "member_id": ""}),
        Case("join-member-id-300-chars", "POST", J, 422, V, json={"topics": ["orders"], "member_id": "m" * 300}),
        Case("join-member-id-int", "POST", J, 422, V, json={"topics": ["orders"], "member_id": 1}),
        Case("join-unknown-field", "POST", J, 422, V, json={"topics": ["orders"], "protocol": "range"}),
        Case("join-malformed-json", "POST", J, 400, V, content=b'{"topics": ["orders"'),
        Case("join-group-300-chars", "POST", f"/v1/groups/{'g' * 300}/members", 422, V,
             json={"topics": ["orders"]}),
        Case("join-wrong-method", "GET", J, 405, "METHOD_NOT_ALLOWED"),
        Case("heartbeat-unknown-member", "POST", f"{J}/nobody/heartbeat", 409, "UNKNOWN_MEMBER_ID"),
        Case("heartbeat-unknown-group", "POST", "/v1/groups/new-group/members/nobody/heartbeat", 409,
             "UNKNOWN_MEMBER_ID"),
        Case("heartbeat-member-300-chars", "POST", f"{J}/{'m' * 300}/heartbeat", 422, V),
        Case("heartbeat-wrong-method", "GET", f"{J}/nobody/heartbeat", 405, "METHOD_NOT_ALLOWED"),
        Case("leave-unknown-member", "DELETE", f"{J}/nobody", 409, "UNKNOWN_MEMBER_ID"),
        Case("leave-unknown-group", "DELETE", "/v1/groups/new-group/members/nobody", 409, "UNKNOWN_MEMBER_ID"),
        Case("leave-member-300-chars", "DELETE", f"{J}/{'m' * 300}", 422, V),
        Case("describe-group-unknown", "GET", "/v1/groups/new-group", 404, "GROUP_ID_NOT_FOUND"),
        Case("describe-group-300-chars", "GET", f"/v1/groups/{'g' * 300}", 422, V),
        Case("describe-group-wrong-method", "DELETE", "/v1/groups/member-group", 405, "METHOD_NOT_ALLOWED"),
    ]
    for n in BIG:
        c.append(Case(f"join-session-timeout-{n}", "POST", J, 400, "INVALID_SESSION_TIMEOUT",
                      json={"topics": ["orders"], "session_timeout_ms": n}))
    return c


def admin_cases() -> list[Case]:
    A = "/v1/admin/transactions"
    return [
        Case("admin-abort-unknown-tid", "POST", f"{A}/no-such-id/abort", 404, "TRANSACTIONAL_ID_NOT_FOUND"),
        Case("admin-abort-not-begun", "POST", f"{A}/idle-txn/abort", 409, "INVALID_TXN_STATE"),
        Case("admin-abort-fenced-idle", "POST", f"{A}/fenced-txn/abort", 409, "INVALID_TXN_STATE"),
        Case("admin-abort-tid-300-chars", "POST", f"{A}/{'x' * 300}/abort", 422, V),
        Case("admin-abort-wrong-method", "GET", f"{A}/open-txn/abort", 405, "METHOD_NOT_ALLOWED"),
        Case("admin-unknown-action", "POST", f"{A}/open-txn/commit", 404, "NOT_FOUND"),
    ]


def misc_cases() -> list[Case]:
    return [
        Case("unknown-path", "GET", "/v1/nope", 404, "NOT_FOUND"),
        Case("unknown-version", "GET", "/v2/topics", 404, "NOT_FOUND"),
        Case("unknown-post-path", "POST", "/v1/nope", 404, "NOT_FOUND", json={"name": "x"}),
        Case("unknown-subresource", "GET", "/v1/topics/orders/segments", 404, "NOT_FOUND"),
        Case("root", "GET", "/", 404, "NOT_FOUND"),
        Case("healthz-wrong-method", "POST", "/healthz", 405, "METHOD_NOT_ALLOWED", json={}),
        Case("readyz-wrong-method", "DELETE", "/readyz", 405, "METHOD_NOT_ALLOWED"),
    ]


CASES = (topic_cases() + topic_admin_cases() + fetch_cases() + producer_cases() + transaction_cases()
         + add_offsets_cases() + send_cases() + group_cases() + membership_cases() + admin_cases()
         + misc_cases())
assert len({c.id for c in CASES}) == len(CASES), "case ids must be unique"


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_is_refused_with_an_error_body_and_changes_nothing(shared: World, case: Case) -> None:
    r = case.request(shared.client, shared.state)

    check(r, shared, case.status, case.code)


# --- refusals that must not have moved hidden state ------------------------------------------------


def test_refused_idempotent_send_leaves_the_sequence_where_it_was(client: TestClient, state: State) -> None:
    """Sequence state is not visible through the API: a refused Send must not have advanced it,
    so the batch that was next before it is still the next one."""
    # orders/1 (written first: batches are appended in partition order) is right, payments/0 wrong.
    refused = send(client, [batch("payments", 0, ["a"], 0, expected_offset=99),
                            batch("orders", 1, ["b"], 2, expected_offset=3)], state.idem)
    assert_error_body(refused, 409, "OFFSET_MISMATCH")

    ok = send(client, [batch("payments", 0, ["a"], 0), batch("orders", 1, ["b"], 2)], state.idem)
    assert ok.status_code == 200, ok.text
    assert [r["duplicate"] for r in ok.json()["results"]] == [False, False]


def test_refused_transactional_send_adds_no_partition_to_the_transaction(client: TestClient, state: State) -> None:
    # orders/1 (new to the transaction, appended first) is right; payments/1 has a gap.
    refused = send(client, [batch("payments", 1, ["a"], 9), batch("orders", 1, ["b"], 0)],
                   state.txn, "open-txn")
    assert_error_body(refused, 409, "OUT_OF_ORDER_SEQUENCE_NUMBER")

    described = client.get("/v1/transactions/open-txn").json()
    assert {(p["topic"], p["partition"]) for p in described["partitions"]} == {("orders", 0), ("payments", 1)}
    commit = client.post("/v1/transactions/open-txn/commit", json=ident(state.txn))
    assert commit.status_code == 200, commit.text
    page = client.get("/v1/topics/orders/partitions/1/records").json()
    assert [r["value"] for r in page["records"]] == ["plain-1", "idem-0", "idem-1"]
    assert page["high_watermark"] == 3


def test_refused_init_producer_id_leaves_the_open_transaction_open(client: TestClient, state: State) -> None:
    for body in ({"transactional_id": "open-txn", "transaction_timeout_ms": 900_001},
                 {"transactional_id": "open-txn", "producer_id": state.txn["producer_id"]},
                 {"transactional_id": "open-txn", **ident(state.idem)}):
        assert_error_body(client.post("/v1/producers", json=body))

    # The original instance is still live: it can still send and commit.
    r = send(client, [batch("orders", 0, ["t-3"], 2)], state.txn, "open-txn")
    assert r.status_code == 200, r.text
    r = client.post("/v1/transactions/open-txn/commit", json=ident(state.txn))
    assert r.status_code == 200, r.text
    assert r.json()["state"] == "CompleteCommit"


# --- methods: HEAD wherever GET is, and a 405 that names every method of its path ----------------


def test_head_of_a_get_route_answers_as_get_without_a_body(client: TestClient) -> None:
    got = client.get("/v1/topics")

    head = client.head("/v1/topics")

    assert (head.status_code, head.content) == (200, b"")
    assert head.headers["content-type"] == got.headers["content-type"]


def test_head_of_a_stream_answers_its_headers_and_ends(client: TestClient) -> None:
    create_topic(client, "orders")

    head = client.head("/v1/topics/orders/partitions/0/stream")

    assert (head.status_code, head.headers["content-type"], head.content) == (
        200, "text/event-stream; charset=utf-8", b"")


@pytest.mark.parametrize("last_event_id", [b"\xb2", b"1\xb9", b"\xbc", b"x"], ids=["²", "1¹", "¼", "x"])
def test_a_last_event_id_that_is_not_ascii_digits_is_invalid_request_before_the_stream_starts(
        client: TestClient, last_event_id: bytes) -> None:
    # Read as latin-1, "²" and "1¹" passed str.isdigit and then failed int(): a 500.
    create_topic(client, "orders")

    r = client.get("/v1/topics/orders/partitions/0/stream", headers={"Last-Event-ID": last_event_id})  # type: ignore[dict-item]

    assert (r.status_code, r.json()["error_code"]) == (400, "INVALID_REQUEST")


def test_head_of_a_protected_route_without_credentials_is_refused_as_get_is(settings: Settings, clock) -> None:  # type: ignore[no-untyped-def]
    with TestClient(create_app(settings.model_copy(update={"authentication": "api_key"}), clock)) as c:
        got = c.get("/v1/topics")
        head = c.head("/v1/topics")

    assert (got.status_code, head.status_code, head.content) == (401, 401, b"")
    assert head.headers["www-authenticate"] == got.headers["www-authenticate"]


def test_head_of_a_path_without_get_is_405(client: TestClient) -> None:
    r = client.head("/v1/records")

    assert (r.status_code, r.headers["allow"], r.content) == (405, "POST", b"")


def test_a_405_allows_every_method_of_its_path(client: TestClient) -> None:
    r = client.delete("/v1/topics")

    assert_error_body(r, 405, "METHOD_NOT_ALLOWED")
    assert r.headers["allow"] == "GET, HEAD, POST"


def test_a_405_on_a_path_of_several_routes_allows_the_methods_of_all_of_them(client: TestClient) -> None:
    r = client.put("/v1/topics/orders", json={})

    assert_error_body(r, 405, "METHOD_NOT_ALLOWED")
    assert r.headers["allow"] == "GET, HEAD, PATCH, DELETE"


# --- request size limits ------------------------------------------------------------------------------


@pytest.fixture
def small_client(db_url: str, clock, state: State):  # type: ignore[no-untyped-def]
    """A second app on the same database, with a 2 KiB request limit."""
    settings = Settings(database_url=db_url, max_request_bytes=2048, run_coordinator=False,
                        auto_migrate=False)
    with TestClient(create_app(settings, clock)) as c:
        yield c


def _big_send_body() -> bytes:
    import json

    body = json.dumps({"batches": [{"topic": "orders", "partition": 0,
                                    "records": [{"value": "v" * 100} for _ in range(40)]}]}).encode()
    assert len(body) > 2048
    return body


def test_body_over_the_size_limit_is_refused(client: TestClient, small_client: TestClient) -> None:
    before = snapshot(client)

    r = small_client.post("/v1/records", content=_big_send_body(),
                          headers={"content-type": "application/json"})

    assert_error_body(r, 413, "RECORD_LIST_TOO_LARGE")
    assert not _diff(before, snapshot(client))


def test_chunked_body_over_the_size_limit_is_refused(client: TestClient, small_client: TestClient) -> None:
    """Without a Content-Length (Transfer-Encoding: chunked) the limit must hold all the same."""
    before = snapshot(client)
    body = _big_send_body()

    r = small_client.post("/v1/records", content=iter([body[:1000], body[1000:]]),
                          headers={"content-type": "application/json"})

    assert "content-length" not in {k.lower() for k in r.request.headers}
    assert_error_body(r, 413, "RECORD_LIST_TOO_LARGE")
    assert not _diff(before, snapshot(client))


def test_body_under_the_size_limit_is_served(client: TestClient, small_client: TestClient) -> None:
    r = small_client.post("/v1/records", json={"batches": [batch("payments", 0, ["small"])]})
    assert r.status_code == 200, r.text


def test_body_over_the_size_limit_on_topic_create_is_refused(client: TestClient, small_client: TestClient) -> None:
    before = snapshot(client)

    r = small_client.post("/v1/topics", json={"name": "padded", "config": {}, "pad": "x" * 3000})

    assert_error_body(r, 413, "RECORD_LIST_TOO_LARGE")
    assert not _diff(before, snapshot(client))


# --- unusual but well-formed input: stored exactly, or refused; never a server error ---------------


@dataclass(frozen=True)
class Edge:
    id: str
    method: str
    path: str
    content: bytes | None = None
    params: dict | None = None
    json: Body = None
    # On success: check what was stored (gets the client and the response).
    verify: Callable[[TestClient, Any], None] | None = None


def _record_round_trips(field_: str, expected: Any) -> Callable[[TestClient, Any], None]:
    def verify(client: TestClient, r: Any) -> None:
        res = r.json()["results"][0]
        page = client.get(f"/v1/topics/{res['topic']}/partitions/{res['partition']}/records",
                          params={"offset": res["base_offset"], "isolation": "read_uncommitted",
                                  "max_records": 1}).json()
        got = page["records"][0][field_]
        if isinstance(expected, float) and math.isnan(expected):
            assert isinstance(got, float) and math.isnan(got), got
        else:
            assert got == expected, f"stored {got!r}, sent {expected!r}"
    return verify


def _edge_send(id_: str, record_json: str, field_: str, expected: Any) -> Edge:
    body = '{"batches": [{"topic": "payments", "partition": 2, "records": [%s]}]}' % record_json
    return Edge(id_, "POST", "/v1/records", body.encode(), verify=_record_round_trips(field_, expected))


def _group_round_trips(group: str, metadata: str | None) -> Callable[[TestClient, Any], None]:
    def verify(client: TestClient, r: Any) -> None:
        body = r.json()
        assert body["group_id"] == group
        assert [o["metadata"] for o in body["offsets"]] == [metadata]
    return verify


def _tid_round_trips(tid: str) -> Callable[[TestClient, Any], None]:
    def verify(client: TestClient, r: Any) -> None:
        assert r.json()["transactional_id"] == tid
        assert [m["transactional_id"] for m in client.get("/v1/transactions").json()["transactions"]
                if m["transactional_id"] == tid] == [tid]
    return verify


def _pending_group(r: Any, group: str) -> None:
    assert group in {o["group_id"] for o in r.json()["pending_offsets"]}, r.json()


def _no_offsets(r: Any, group: str) -> None:
    assert r.json() == {"group_id": group, "offsets": []}


DEEP = "[" * 300 + "]" * 300
EDGES = [
    _edge_send("record-key-with-nul", '{"key": "a\\u0000b"}', "key", "a\x00b"),
    _edge_send("record-header-value-with-nul", '{"headers": {"h": "a\\u0000b"}}', "headers", {"h": "a\x00b"}),
    _edge_send("record-header-name-with-nul", '{"headers": {"a\\u0000b": "h"}}', "headers", {"a\x00b": "h"}),
    _edge_send("record-value-with-nul", '{"value": "a\\u0000b"}', "value", "a\x00b"),
    _edge_send("record-value-2**64", '{"value": %d}' % 2**64, "value", 2**64),
    _edge_send("record-value-10**30", '{"value": %d}' % 10**30, "value", 10**30),
    _edge_send("record-value-minus-2**63-minus-1", '{"value": %d}' % (-2**63 - 1), "value", -2**63 - 1),
    _edge_send("record-value-nested-300-deep", '{"value": %s}' % DEEP, "value", __import__("json").loads(DEEP)),
    _edge_send("record-value-1e400", '{"value": 1e400}', "value", float("inf")),
    Edge("group-commit-group-with-nul", "POST", "/v1/groups/a%00b/offsets",
         b'{"offsets": [{"topic": "orders", "partition": 0, "offset": 1}]}',
         verify=_group_round_trips("a\x00b", None)),
    Edge("group-commit-metadata-with-nul", "POST", "/v1/groups/new-group/offsets",
         b'{"offsets": [{"topic": "orders", "partition": 0, "offset": 1, "metadata": "m\\u0000"}]}',
         verify=_group_round_trips("new-group", "m\x00")),
    Edge("init-tid-with-nul", "POST", "/v1/producers", b'{"transactional_id": "a\\u0000b"}',
         verify=_tid_round_trips("a\x00b")),
    Edge("describe-topic-with-nul", "GET", "/v1/topics/a%00b"),
    Edge("alter-topic-with-nul", "PATCH", "/v1/topics/a%00b", b'{"config": {"retention_ms": 1000}}'),
    Edge("delete-topic-with-nul", "DELETE", "/v1/topics/a%00b"),
    Edge("add-partitions-topic-with-nul", "POST", "/v1/topics/a%00b/partitions", b'{"partition_count": 3}'),
    Edge("delete-records-topic-with-nul", "POST", "/v1/topics/a%00b/partitions/0/delete-records",
         b'{"offset": 0}'),
    Edge("fetch-topic-with-nul", "GET", "/v1/topics/a%00b/partitions/0/records"),
    Edge("describe-tid-with-nul", "GET", "/v1/transactions/a%00b"),
    Edge("begin-tid-with-nul", "POST", "/v1/transactions/a%00b/begin",
         b'{"producer_id": 1, "producer_epoch": 0}'),
    Edge("group-fetch-group-with-nul", "GET", "/v1/groups/a%00b/offsets",
         verify=lambda client, r: _no_offsets(r, "a\x00b")),
    Edge("group-fetch-topic-with-nul", "GET", "/v1/groups/committed-group/offsets",
         params={"topic": "a\x00b"}),
    Edge("group-commit-topic-with-nul", "POST", "/v1/groups/new-group/offsets",
         b'{"offsets": [{"topic": "a\\u0000b", "partition": 0, "offset": 1}]}'),
    Edge("add-offsets-group-with-nul", "POST", "/v1/transactions/open-txn/offsets",
         json=lambda s: {**ident(s.txn), "group_id": "a\x00b",
                         "offsets": [{"topic": "orders", "partition": 0, "offset": 1}]},
         verify=lambda client, r: _pending_group(r, "a\x00b")),
    Edge("join-topic-with-nul", "POST", "/v1/groups/new-group/members", b'{"topics": ["a\\u0000b"]}'),
    Edge("heartbeat-member-with-nul", "POST", "/v1/groups/member-group/members/a%00b/heartbeat"),
    Edge("admin-abort-tid-with-nul", "POST", "/v1/admin/transactions/a%00b/abort"),
    Edge("send-topic-with-nul", "POST", "/v1/records",
         b'{"batches": [{"topic": "a\\u0000b", "partition": 0, "records": [{"value": 1}]}]}'),
]


@pytest.mark.parametrize("edge", EDGES, ids=[e.id for e in EDGES])
def test_unusual_input_is_stored_exactly_or_refused_never_a_server_error(shared: World, edge: Edge) -> None:
    kwargs: dict[str, Any] = {}
    if edge.content is not None:
        kwargs = {"content": edge.content, "headers": {"content-type": "application/json"}}
    if edge.params is not None:
        kwargs["params"] = edge.params
    if edge.json is not None:
        kwargs["json"] = edge.json(shared.state) if callable(edge.json) else edge.json

    r = shared.client.request(edge.method, edge.path, **kwargs)

    if 200 <= r.status_code < 300:
        shared.dirty = True  # stored: the next case starts over
        assert edge.verify is not None, f"unexpected success {r.status_code}: {r.text}"
        edge.verify(shared.client, r)
        return
    check(r, shared)
