"""Guarantee 16, operation by operation: every operation in openapi.yaml against the ACLs it
needs (README, "Authentication and ACLs"), on both databases.

The table OPERATIONS below holds, for each operationId, a request and the ACL bindings it
needs; a test checks that it covers every operation of openapi.yaml, so a new endpoint
without a rule fails the suite. For each operation: no credentials, a wrong API key, an
expired and a wrongly signed JWT are 401; the principal with every binding but one is
refused with that resource's Kafka error code and nothing stored changes; with all of them it
succeeds; a DENY beside the ALLOW refuses; prefixed bindings allow. (A JWT's principal and
`all` on `*` are then checked on a few operations: the decision does not depend on them.)
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jwt
import pytest
import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from fastapi.testclient import TestClient
from prometheus_client import REGISTRY

from app.api.app import create_app
from app.domain.acl import CLUSTER_NAME, Operation, PatternType, Permission, ResourceType
from app.services.security import split_api_key
from app.settings import Settings
from tests.conftest import QUIET
from tests.fuzz.stored import StoredTables, diff
from tests.helpers import comparable_answer, serve_by_router, spy_on_router
from tests.shared_app import SharedApp, replace_with_copy

ROOT = Path(__file__).resolve().parents[2]
ISSUER, AUDIENCE = "https://login.example", "outbox"
T, G, X = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.TRANSACTIONAL_ID
C = ResourceType.CLUSTER
CODE = {T: "TOPIC_AUTHORIZATION_FAILED", G: "GROUP_AUTHORIZATION_FAILED",
        X: "TRANSACTIONAL_ID_AUTHORIZATION_FAILED", C: "CLUSTER_AUTHORIZATION_FAILED"}
Need = tuple[ResourceType, str, Operation]


@pytest.fixture(scope="session")
def signing_key(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Path]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = tmp_path_factory.mktemp("jwt") / "public.pem"
    pem.write_bytes(key.public_key().public_bytes(serialization.Encoding.PEM,
                                                  serialization.PublicFormat.SubjectPublicKeyInfo))
    return key, pem


def token(key: Any, subject: str, *, expires_in_s: int = 300, issuer: str = ISSUER, audience: str = AUDIENCE) -> str:
    now = int(time.time())
    return jwt.encode({"sub": subject, "iss": issuer, "aud": audience, "iat": now, "exp": now + expires_in_s},
                      key, algorithm="RS256")


@dataclass
class World:
    """A secured service with topic `orders` (2 partitions, 1 record), group `g` with a
    committed offset, and a super-user `admin`; `alice` has a key and no ACL yet."""

    client: TestClient
    admin: dict[str, str]
    alice: dict[str, str]
    signing_key: Any
    stored: StoredTables
    values: dict[str, Any] = field(default_factory=dict)

    def as_admin(self, method: str, url: str, json: Any = None) -> Any:
        r = self.client.request(method, url, json=json, headers=self.admin)
        assert r.status_code < 300, r.text
        return r.json() if r.content else None

    def grant(self, needs: list[Need], permission: Permission = Permission.ALLOW,
              pattern: PatternType = PatternType.LITERAL, principal: str = "User:alice") -> None:
        acls = [{"principal": principal, "resource_type": rt.value,
                 "resource_name": name if pattern is PatternType.LITERAL or rt is C else name[:2],
                 "pattern_type": pattern.value if rt is not C else "literal",
                 "operation": op.value, "permission": permission.value} for rt, name, op in needs]
        if acls:
            self.as_admin("POST", "/v1/acls", {"acls": acls})

    def producer(self, tid: str | None = "tx", **extra: Any) -> dict:
        body = {} if tid is None else {"transactional_id": tid, **extra}
        p = self.as_admin("POST", "/v1/producers", body)
        return {"producer_id": p["producer_id"], "producer_epoch": p["producer_epoch"]}

    def open_transaction(self, tid: str = "tx") -> dict:
        p = self.producer(tid)
        txn = self.as_admin("POST", f"/v1/transactions/{tid}/begin", p)
        self.as_admin("POST", "/v1/records", {**p, "transactional_id": tid, "batches": [
            {"topic": "orders", "partition": 1, "base_sequence": 0, "records": [{"value": "in txn"}]}]})
        return {**p, "txn_id": txn["txn_id"]}


@pytest.fixture(scope="session")
def other_key() -> Any:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@pytest.fixture(autouse=True)
def cheap_scrypt(monkeypatch: pytest.MonkeyPatch) -> None:
    """Keys hashed at scrypt's lowest cost: the hashes stay scrypt, the tests stay fast. The SCRAM
    credentials stored beside each key (for the Kafka door) at one PBKDF2 iteration instead of
    4,096 (4 ms a key, two keys a world): nothing here signs in by SCRAM."""
    monkeypatch.setattr("app.services.security._SCRYPT_N", 2)
    monkeypatch.setattr("app.domain.scram.ITERATIONS", 1)


@pytest.fixture(scope="module")
def shared_apps(signing_key: tuple[Any, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, SharedApp]:
    """The world's app, one a database for the module's tests (tests/shared_app.py says what each
    test gets afresh and what is put back): its first requests built every route of its routers,
    which an app per test paid again in every test's setup. SQLite's database is one file,
    copied from the migrated template before each test; PostgreSQL's the session's, emptied
    before each test (db_url)."""
    return {}


def _world_app(shared_apps: dict[str, SharedApp], db_url: str, pem: Path,
               tmp_path_factory: pytest.TempPathFactory) -> tuple[SharedApp, str]:
    backend = "sqlite" if db_url.startswith("sqlite") else "postgresql"
    if backend not in shared_apps:
        url = db_url if backend == "postgresql" else f"sqlite:///{tmp_path_factory.mktemp('world') / 'outbox.db'}"
        settings = Settings(database_url=url, **QUIET, authentication="api_key,jwt", super_users="User:admin",
                            jwt_public_key_file=str(pem), jwt_issuer=ISSUER, jwt_audience=AUDIENCE)
        shared_apps[backend] = SharedApp(lambda clock: create_app(settings, clock))
    shared = shared_apps[backend]
    return shared, shared.app.state.settings.database_url


@pytest.fixture
def world(db_url: str, clock: Any, signing_key: tuple[Any, Path], shared_apps: dict[str, SharedApp],
          sqlite_template: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    key, pem = signing_key
    shared, url = _world_app(shared_apps, db_url, pem, tmp_path_factory)
    if url.startswith("sqlite"):
        replace_with_copy(sqlite_template, Path(url.removeprefix("sqlite:///")))
    app = shared.as_built(clock)
    try:
        with TestClient(app) as client:
            security = app.state.services.security
            admin = {"Authorization": f"Bearer {security.create_api_key('admin', by='test').api_key}"}
            alice = {"Authorization": f"Bearer {security.create_api_key('alice', by='test').api_key}"}
            w = World(client, admin, alice, key, StoredTables(url))
            w.as_admin("POST", "/v1/topics", {"name": "orders", "partitions": 2})
            w.as_admin("POST", "/v1/records", {"batches": [{"topic": "orders", "partition": 0, "records": [{"value": 1}]}]})
            w.as_admin("POST", "/v1/groups/g/offsets", {"offsets": [{"topic": "orders", "partition": 0, "offset": 1}]})
            try:
                yield w
            finally:
                w.stored.dispose()
    finally:
        shared.as_built(clock)  # fails the test that left state behind, not the next one


@dataclass(frozen=True)
class Op:
    """An operation's request (built once the world is prepared) and the bindings it needs."""

    request: Callable[[World], tuple[str, str, Any]]
    needs: tuple[Need, ...]
    ok: int = 200
    prepare: Callable[[World], None] = lambda w: None


def _join(w: World) -> None:
    m = w.as_admin("POST", "/v1/groups/g/members", {"topics": ["orders"]})
    w.values["member_id"] = m["member_id"]


def _txn(w: World) -> None:
    w.values["txn"] = w.open_transaction()


def _prepared(w: World) -> None:
    _txn(w)
    w.as_admin("POST", "/v1/transactions/tx/prepare", w.values["txn"])


def _prepared_two(w: World) -> None:
    _prepared(w)
    w.values["txn2"] = w.open_transaction("tx2")
    w.as_admin("POST", "/v1/transactions/tx2/prepare", w.values["txn2"])


def _key(w: World) -> None:
    w.values["key_id"] = w.as_admin("POST", "/v1/principals/User:carol/api-keys")["key_id"]


def _acl(w: World) -> None:
    w.grant([(T, "audit", Operation.READ)], principal="User:carol")


def _ident(w: World) -> dict:
    txn = w.values["txn"]
    return {"producer_id": txn["producer_id"], "producer_epoch": txn["producer_epoch"]}


def _offsets(w: World) -> dict:
    return {**_ident(w), "group_id": "g", "offsets": [{"topic": "orders", "partition": 0, "offset": 1}]}


OPERATIONS: dict[str, Op] = {
    "create_topic": Op(lambda w: ("POST", "/v1/topics", {"name": "orders-new"}),
                       ((T, "orders-new", Operation.CREATE),), ok=201),
    "list_topics": Op(lambda w: ("GET", "/v1/topics", None), ()),
    "describe_topic": Op(lambda w: ("GET", "/v1/topics/orders", None), ((T, "orders", Operation.DESCRIBE),)),
    "alter_topic_config": Op(lambda w: ("PATCH", "/v1/topics/orders", {"config": {"retention_ms": 1000}}),
                             ((T, "orders", Operation.ALTER_CONFIGS),)),
    "create_partitions": Op(lambda w: ("POST", "/v1/topics/orders/partitions", {"partition_count": 3}),
                            ((T, "orders", Operation.ALTER),)),
    "delete_topic": Op(lambda w: ("DELETE", "/v1/topics/orders", None), ((T, "orders", Operation.DELETE),), ok=204),
    "delete_records": Op(lambda w: ("POST", "/v1/topics/orders/partitions/0/delete-records", {"consumed_by": ["g"]}),
                         ((T, "orders", Operation.DELETE), (G, "g", Operation.DESCRIBE))),
    "fetch_records": Op(lambda w: ("GET", "/v1/topics/orders/partitions/0/records", None),
                        ((T, "orders", Operation.READ),)),
    "list_offsets": Op(lambda w: ("GET", "/v1/topics/orders/partitions/0/offsets?timestamp_ms=0", None),
                       ((T, "orders", Operation.DESCRIBE),)),
    "describe_topic_authorized_operations": Op(lambda w: ("GET", "/v1/topics/orders/authorized-operations", None),
                                               ((T, "orders", Operation.DESCRIBE),)),
    "fetch_partitions": Op(lambda w: ("POST", "/v1/fetch", {"partitions": [{"topic": "orders", "partition": 0}]}),
                           ()),
    # The stream ends at once once the server is stopping: what the successful call needs here.
    "stream_records": Op(lambda w: ("GET", "/v1/topics/orders/partitions/0/stream", None),
                         ((T, "orders", Operation.READ),), prepare=lambda w: w.client.app.state.log_changes.close()),
    "init_producer_id": Op(lambda w: ("POST", "/v1/producers", {"transactional_id": "tx"}),
                           ((X, "tx", Operation.WRITE),)),
    "send": Op(lambda w: ("POST", "/v1/records", {**_ident(w), "transactional_id": "tx", "batches": [
                   {"topic": "orders", "partition": 0, "base_sequence": 0, "records": [{"value": 2}]}]}),
               ((X, "tx", Operation.WRITE), (T, "orders", Operation.WRITE)), prepare=_txn),
    "begin_transaction": Op(lambda w: ("POST", "/v1/transactions/tx/begin", w.values["p"]),
                            ((X, "tx", Operation.WRITE),), prepare=lambda w: w.values.update(p=w.producer())),
    "add_offsets": Op(lambda w: ("POST", "/v1/transactions/tx/offsets", _offsets(w)),
                      ((X, "tx", Operation.WRITE), (G, "g", Operation.READ), (T, "orders", Operation.READ)),
                      prepare=_txn),
    "prepare_transaction": Op(lambda w: ("POST", "/v1/transactions/tx/prepare", w.values["txn"]),
                              ((X, "tx", Operation.WRITE),), prepare=_txn),
    # A joint commit: WRITE on each transaction it commits, its own and the one it names.
    "commit_transaction": Op(lambda w: ("POST", "/v1/transactions/tx/commit", {**w.values["txn"], "prepared": [
                                 {"transactional_id": "tx2", "txn_id": w.values["txn2"]["txn_id"]}]}),
                             ((X, "tx", Operation.WRITE), (X, "tx2", Operation.WRITE)), prepare=_prepared_two),
    "abort_transaction": Op(lambda w: ("POST", "/v1/transactions/tx/abort", w.values["txn"]),
                            ((X, "tx", Operation.WRITE),), prepare=_txn),
    "describe_transaction": Op(lambda w: ("GET", "/v1/transactions/tx", None), ((X, "tx", Operation.DESCRIBE),),
                               prepare=_txn),
    "list_transactions": Op(lambda w: ("GET", "/v1/transactions", None), (), prepare=_txn),
    "admin_abort_transaction": Op(lambda w: ("POST", "/v1/admin/transactions/tx/abort", None),
                                  ((C, CLUSTER_NAME, Operation.ALTER),), prepare=_txn),
    "commit_offsets": Op(lambda w: ("POST", "/v1/groups/g/offsets",
                                    {"offsets": [{"topic": "orders", "partition": 1, "offset": 0}]}),
                         ((G, "g", Operation.READ), (T, "orders", Operation.READ))),
    # A reset is an OffsetCommit (Kafka's tool commits the offsets it plans).
    "reset_offsets": Op(lambda w: ("POST", "/v1/groups/g/offsets/reset", {"topic": "orders", "to": "earliest"}),
                        ((G, "g", Operation.READ), (T, "orders", Operation.READ))),
    "fetch_offsets": Op(lambda w: ("GET", "/v1/groups/g/offsets?topic=orders", None),
                        ((G, "g", Operation.DESCRIBE), (T, "orders", Operation.DESCRIBE))),
    "join_group": Op(lambda w: ("POST", "/v1/groups/g/members", {"topics": ["orders"]}),
                     ((G, "g", Operation.READ), (T, "orders", Operation.DESCRIBE))),
    "heartbeat": Op(lambda w: ("POST", f"/v1/groups/g/members/{w.values['member_id']}/heartbeat", None),
                    ((G, "g", Operation.READ),), prepare=_join),
    "leave_group": Op(lambda w: ("DELETE", f"/v1/groups/g/members/{w.values['member_id']}", None),
                      ((G, "g", Operation.READ),), ok=204, prepare=_join),
    "describe_group": Op(lambda w: ("GET", "/v1/groups/g", None), ((G, "g", Operation.DESCRIBE),), prepare=_join),
    "list_groups": Op(lambda w: ("GET", "/v1/groups", None), ()),
    "describe_group_lag": Op(lambda w: ("GET", "/v1/groups/g/lag", None), ((G, "g", Operation.DESCRIBE),)),
    "console_history": Op(lambda w: ("GET", "/v1/console/history", None), ((C, CLUSTER_NAME, Operation.DESCRIBE),)),
    # Groups, and groups whose lag counts topics, the principal may not describe are left out.
    "console_lag_history": Op(lambda w: ("GET", "/v1/console/lag-history", None), ()),
    "describe_acls": Op(lambda w: ("GET", "/v1/acls", None), ((C, CLUSTER_NAME, Operation.DESCRIBE),)),
    "describe_acl_operations": Op(lambda w: ("GET", "/v1/acls/operations", None),
                                  ((C, CLUSTER_NAME, Operation.DESCRIBE),)),
    "create_acls": Op(lambda w: ("POST", "/v1/acls", {"acls": [{"principal": "User:carol", "resource_type": "group",
                                                                 "resource_name": "g", "operation": "read"}]}),
                      ((C, CLUSTER_NAME, Operation.ALTER),)),
    "delete_acls": Op(lambda w: ("DELETE", "/v1/acls?principal=User:carol", None),
                      ((C, CLUSTER_NAME, Operation.ALTER),), prepare=_acl),
    # Without describe on the cluster it answers no operation (Kafka's DescribeCluster).
    "describe_cluster_authorized_operations": Op(lambda w: ("GET", "/v1/cluster/authorized-operations", None), ()),
    "list_principals": Op(lambda w: ("GET", "/v1/principals", None), ((C, CLUSTER_NAME, Operation.DESCRIBE),)),
    "create_api_key": Op(lambda w: ("POST", "/v1/principals/User:carol/api-keys", None),
                         ((C, CLUSTER_NAME, Operation.ALTER),), ok=201),
    "revoke_api_key": Op(lambda w: ("DELETE", f"/v1/principals/User:carol/api-keys/{w.values['key_id']}", None),
                         ((C, CLUSTER_NAME, Operation.ALTER),), prepare=_key),
    # Topic names, group ids, lag and offsets: with OUTBOX_PROTECT_METRICS unset, as here.
    "metrics": Op(lambda w: ("GET", "/metrics", None), ((C, CLUSTER_NAME, Operation.DESCRIBE),)),
}
# Requests of an operation above that need more than its rule there.
VARIANTS: dict[str, Op] = {
    # A Commit carrying its transaction's last batches (transaction version 2) writes them too.
    "commit_transaction carrying batches": Op(
        lambda w: ("POST", "/v1/transactions/tx/commit", {**w.values["p"], "batches": [
            {"topic": "orders", "partition": 0, "base_sequence": 0, "records": [{"value": 3}]}]}),
        ((X, "tx", Operation.WRITE), (T, "orders", Operation.WRITE)),
        prepare=lambda w: w.values.update(p=w.producer(transaction_version=2))),
    # A dry run reads only: DescribeGroups, OffsetFetch and ListOffsets in Kafka's tool.
    "reset_offsets as a dry run": Op(
        lambda w: ("POST", "/v1/groups/g/offsets/reset", {"topic": "orders", "to": "earliest", "dry_run": True}),
        ((G, "g", Operation.DESCRIBE), (T, "orders", Operation.DESCRIBE))),
}
ALL = {**OPERATIONS, **VARIANTS}
# Open with authentication on: the probes (a load balancer has no credentials).
OPEN = {"healthz", "readyz"}
# Never refused for want of an ACL: they leave out what the principal may not describe.
FILTERED = {"list_topics", "list_transactions", "list_groups", "fetch_partitions", "console_lag_history",
            "describe_cluster_authorized_operations"}
GUARDED = sorted(set(ALL) - FILTERED)


def spec_operations() -> set[str]:
    spec = yaml.safe_load((ROOT / "openapi.yaml").read_text())
    return {op["operationId"] for item in spec["paths"].values() for op in item.values()}


def test_every_operation_in_openapi_yaml_has_a_rule_here() -> None:
    assert spec_operations() == set(OPERATIONS) | OPEN


def call(w: World, operation_id: str, headers: dict[str, str] | None) -> Any:
    op = ALL[operation_id]
    method, url, body = op.request(w)
    return w.client.request(method, url, json=body, headers=headers or {})


def prepared(w: World, operation_id: str) -> None:
    ALL[operation_id].prepare(w)


@pytest.mark.parametrize("operation_id", sorted(ALL))
def test_no_credentials_wrong_key_expired_or_badly_signed_jwt_are_401(world: World, operation_id: str,
                                                                      other_key: Any) -> None:
    prepared(world, operation_id)
    world.grant(list(ALL[operation_id].needs))
    before = world.stored.snapshot()
    wrong_key = world.alice["Authorization"][:-4] + "AAAA"
    for headers in (None, {"Authorization": wrong_key},
                    {"Authorization": f"Bearer {token(world.signing_key, 'alice', expires_in_s=-120)}"},
                    {"Authorization": f"Bearer {token(other_key, 'alice')}"},
                    {"Authorization": f"Bearer {token(world.signing_key, 'alice', issuer='https://else')}"},
                    {"Authorization": f"Bearer {token(world.signing_key, 'alice', audience='other')}"}):
        r = call(world, operation_id, headers)
        assert (r.status_code, r.json()["error_code"]) == (401, "AUTHENTICATION_FAILED"), (headers, r.text)
        assert r.headers.get_list("www-authenticate")[0].startswith('Bearer realm="outbox"')
    assert diff(before, world.stored.snapshot()) == []


@pytest.mark.parametrize("operation_id", GUARDED)
def test_each_binding_missing_refuses_with_its_resources_code_and_changes_nothing(world: World,
                                                                                 operation_id: str) -> None:
    prepared(world, operation_id)
    needs = list(ALL[operation_id].needs)
    for missing in needs:
        world.grant([n for n in needs if n != missing])
        before = world.stored.snapshot()
        r = call(world, operation_id, world.alice)
        assert (r.status_code, r.json()["error_code"]) == (403, CODE[missing[0]]), (missing, r.text)
        assert "User:alice" in r.json()["message"]
        assert diff(before, world.stored.snapshot()) == []
        world.as_admin("DELETE", "/v1/acls?principal=User:alice")


@pytest.mark.parametrize("operation_id", sorted(ALL))
def test_with_its_bindings_it_succeeds_with_an_api_key(world: World, operation_id: str) -> None:
    prepared(world, operation_id)
    world.grant(list(ALL[operation_id].needs))
    r = call(world, operation_id, world.alice)
    assert r.status_code == ALL[operation_id].ok, r.text


@pytest.mark.parametrize("operation_id", ["send", "fetch_offsets"])
def test_a_jwt_principal_is_allowed_what_its_bindings_allow(world: World, operation_id: str) -> None:
    prepared(world, operation_id)
    world.grant(list(ALL[operation_id].needs))
    r = call(world, operation_id, {"Authorization": f"Bearer {token(world.signing_key, 'alice')}"})
    assert r.status_code == ALL[operation_id].ok, r.text


# A refused Send as the direct route answers it (app.api.direct_route: the Send past FastAPI's
# router and solver) and as FastAPI's router answers the same request: the same bytes, which
# holds the direct route to FastAPI's order of the checks (the credentials before the body, the
# body before the ACLs).
@dataclass(frozen=True)
class SendRefusal:
    needs: tuple[Need, ...]  # alice's bindings
    credentials: Callable[[World], dict[str, str]]
    body: Callable[[World], Any]  # bytes as they are, anything else as JSON
    error_code: str


def _wrong_key(w: World) -> dict[str, str]:
    return {"Authorization": w.alice["Authorization"][:-4] + "AAAA"}


def _transactional_send(w: World) -> Any:
    prepared(w, "send")
    return ALL["send"].request(w)[2]


_PLAIN_SEND = {"batches": [{"topic": "orders", "partition": 0, "records": [{"value": 2}]}]}
_NOT_JSON = b'{"batches": ['
_READ_ONLY = ((T, "orders", Operation.READ), (T, "orders", Operation.DESCRIBE), (G, "g", Operation.READ))
SEND_REFUSALS = {
    "no credentials, a body that is not JSON": SendRefusal((), lambda w: {}, lambda w: _NOT_JSON,
                                                           "AUTHENTICATION_FAILED"),
    "a wrong API key": SendRefusal((), _wrong_key, lambda w: _PLAIN_SEND, "AUTHENTICATION_FAILED"),
    "a wrong API key, a body that is not JSON": SendRefusal((), _wrong_key, lambda w: _NOT_JSON,
                                                            "AUTHENTICATION_FAILED"),
    "a key without the topic's Write": SendRefusal((), lambda w: w.alice, lambda w: _PLAIN_SEND,
                                                   "TOPIC_AUTHORIZATION_FAILED"),
    "a key without the topic's Write, a body that is not JSON": SendRefusal((), lambda w: w.alice,
                                                                            lambda w: _NOT_JSON, "INVALID_REQUEST"),
    "a transactional Send without the transactional id's Write": SendRefusal(
        ((T, "orders", Operation.WRITE),), lambda w: w.alice, _transactional_send,
        "TRANSACTIONAL_ID_AUTHORIZATION_FAILED"),
    "a read-only key": SendRefusal(_READ_ONLY, lambda w: w.alice, lambda w: _PLAIN_SEND, "TOPIC_AUTHORIZATION_FAILED"),
}


@pytest.mark.parametrize("case", list(SEND_REFUSALS))
def test_a_refused_send_is_answered_by_the_direct_route_as_by_fastapis_router(world: World, case: str) -> None:
    refusal = SEND_REFUSALS[case]
    body = refusal.body(world)
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    headers = {"content-type": "application/json", **refusal.credentials(world)}
    world.grant(list(refusal.needs))
    app = world.client.app
    router_calls = spy_on_router(app)
    before = world.stored.snapshot()
    direct = world.client.post("/v1/records", headers=headers, content=content)
    assert router_calls.paths == []
    serve_by_router(app)
    routed = world.client.post("/v1/records", headers=headers, content=content)
    assert router_calls.paths == ["POST /v1/records"]
    assert comparable_answer(direct) == comparable_answer(routed)
    assert direct.json()["error_code"] == refusal.error_code, direct.text
    assert diff(before, world.stored.snapshot()) == []


@pytest.mark.parametrize("operation_id", GUARDED)
def test_a_deny_beside_the_allow_refuses(world: World, operation_id: str) -> None:
    prepared(world, operation_id)
    needs = list(ALL[operation_id].needs)
    world.grant(needs)
    world.grant(needs[:1], Permission.DENY)
    before = world.stored.snapshot()
    r = call(world, operation_id, world.alice)
    assert (r.status_code, r.json()["error_code"]) == (403, CODE[needs[0][0]]), r.text
    assert diff(before, world.stored.snapshot()) == []


@pytest.mark.parametrize("operation_id", GUARDED)
def test_prefixed_bindings_allow(world: World, operation_id: str) -> None:
    prepared(world, operation_id)
    world.grant(list(ALL[operation_id].needs), pattern=PatternType.PREFIXED)
    r = call(world, operation_id, world.alice)
    assert r.status_code == ALL[operation_id].ok, r.text


@pytest.mark.parametrize("operation_id", ["add_offsets", "create_acls"])
def test_an_allow_of_all_operations_on_every_resource_allows(world: World, operation_id: str) -> None:
    prepared(world, operation_id)
    world.grant([(rt, "*" if rt is not C else CLUSTER_NAME, Operation.ALL)
                 for rt in {rt for rt, _, _ in OPERATIONS[operation_id].needs}])
    r = call(world, operation_id, world.alice)
    assert r.status_code == ALL[operation_id].ok, r.text


def test_a_401_offers_basic_only_to_a_browser_navigating_each_scheme_in_a_header_of_its_own(world: World) -> None:
    script = world.client.get("/v1/topics", headers={"sec-fetch-mode": "cors"})
    navigation = world.client.get("/v1/topics", headers={"sec-fetch-mode": "navigate"})
    old_browser = world.client.get("/v1/topics", headers={"accept": "text/html,application/xhtml+xml"})
    assert script.headers.get_list("www-authenticate") == ['Bearer realm="outbox"']
    assert navigation.headers.get_list("www-authenticate") == old_browser.headers.get_list("www-authenticate") == [
        'Bearer realm="outbox"', 'Basic realm="outbox", charset="UTF-8"']


@pytest.mark.parametrize("path", ["/v1/transactions/", "/v1/topics/", "/v1/groups/"])
def test_a_trailing_slash_is_a_plain_404_never_a_redirect_to_the_callers_host(world: World, path: str) -> None:
    r = world.client.get(path, headers={"Host": "evil.example"}, follow_redirects=False)

    assert (r.status_code, r.json()["error_code"]) == (404, "NOT_FOUND")
    assert "location" not in r.headers


@pytest.mark.parametrize("path", ["/v1/principals/User:%ED%A0%80/api-keys", "/v1/principals/User:a%FFb/api-keys"],
                         ids=["lone surrogate", "not UTF-8"])
def test_a_principal_whose_percent_encoded_name_is_not_utf8_is_refused_and_nothing_stored(world: World,
                                                                                        path: str) -> None:
    before = world.client.get("/v1/principals", headers=world.admin).json()

    r = world.client.post(path, headers=world.admin)

    assert (r.status_code, r.json()["error_code"]) == (422, "INVALID_REQUEST")
    assert r.json()["details"]["errors"] == [{"field": "path", "problem": "must be UTF-8 once percent-decoded"}]
    assert world.client.get("/v1/principals", headers=world.admin).json() == before


def test_the_probes_need_no_credentials(world: World) -> None:
    assert [world.client.get(p).status_code for p in ("/healthz", "/readyz")] == [200, 200]


def test_metrics_opened_with_protect_metrics_false_need_no_credentials(db_url: str, clock: Any) -> None:
    settings = Settings(database_url=db_url, **QUIET, authentication="api_key", protect_metrics=False)
    with TestClient(create_app(settings, clock)) as c:
        assert c.get("/metrics").status_code == 200
        assert "security" not in c.get("/openapi.json").json()["paths"]["/metrics"]["get"]


def test_the_served_openapi_document_says_metrics_need_credentials(world: World) -> None:
    operation = world.client.get("/openapi.json").json()["paths"]["/metrics"]["get"]
    assert operation["security"] == [{"bearerAuth": []}, {"basicAuth": []}]


def test_list_topics_shows_only_the_topics_the_principal_may_describe(world: World) -> None:
    world.as_admin("POST", "/v1/topics", {"name": "payroll"})
    assert world.client.get("/v1/topics", headers=world.alice).json()["topics"] == []
    world.grant([(T, "orders", Operation.READ)])  # READ implies DESCRIBE
    names = [t["name"] for t in world.client.get("/v1/topics", headers=world.alice).json()["topics"]]
    assert names == ["orders"]


def test_a_topics_authorized_operations_are_those_the_principals_acls_allow(world: World) -> None:
    world.grant([(T, "orders", Operation.READ)])  # READ implies DESCRIBE
    got = world.client.get("/v1/topics/orders/authorized-operations", headers=world.alice).json()
    assert got == {"topic": "orders", "authorized_operations": ["read", "describe"]}
    world.grant([(T, "orders", Operation.WRITE)])
    got = world.client.get("/v1/topics/orders/authorized-operations", headers=world.alice).json()
    assert got == {"topic": "orders", "authorized_operations": ["read", "write", "describe"]}


def test_the_clusters_authorized_operations_are_those_the_principals_acls_allow(world: World) -> None:
    def refusals() -> float:
        return REGISTRY.get_sample_value("outbox_authorization_refusals_total",
                                         {"resource_type": "cluster", "operation": "describe"}) or 0.0

    world.grant([(C, CLUSTER_NAME, Operation.IDEMPOTENT_WRITE)])
    before = refusals()
    got = world.client.get("/v1/cluster/authorized-operations", headers=world.alice)
    # Without describe: none, as Kafka's DescribeCluster answers, and no refusal counted.
    assert (got.status_code, got.json(), refusals()) == (200, {"authorized_operations": []}, before)
    world.grant([(C, CLUSTER_NAME, Operation.DESCRIBE)])
    got = world.client.get("/v1/cluster/authorized-operations", headers=world.alice).json()
    assert got == {"authorized_operations": ["describe", "idempotent_write"]}
    world.grant([(C, CLUSTER_NAME, Operation.ALTER)])
    got = world.client.get("/v1/cluster/authorized-operations", headers=world.alice).json()
    assert got == {"authorized_operations": ["alter", "describe", "idempotent_write"]}


def test_all_on_a_topic_and_on_the_cluster_authorizes_kafkas_eight_and_seven_operations(world: World) -> None:
    world.grant([(T, "orders", Operation.ALL), (C, CLUSTER_NAME, Operation.ALL)])
    got = world.client.get("/v1/topics/orders/authorized-operations", headers=world.alice).json()
    assert got == {"topic": "orders", "authorized_operations": [
        "read", "write", "create", "delete", "alter", "describe", "describe_configs", "alter_configs"]}
    got = world.client.get("/v1/cluster/authorized-operations", headers=world.alice).json()
    assert got == {"authorized_operations": [
        "create", "alter", "describe", "cluster_action", "describe_configs", "alter_configs", "idempotent_write"]}


_ORDERS_CONFIG = {"cleanup_policy": "delete", "retention_ms": 604800000, "retention_bytes": -1,
                  "delete_retention_ms": 86400000, "check_expected_offsets": False,
                  "max_message_bytes": 1048588, "value_format": "json"}


def _configs_shown(w: World) -> tuple[object, object]:
    """The config of `orders` as alice is answered it by GET /v1/topics/orders and GET /v1/topics."""
    described = w.client.get("/v1/topics/orders", headers=w.alice).json()
    listed = w.client.get("/v1/topics", headers=w.alice).json()["topics"]
    return described["config"], [t["config"] for t in listed if t["name"] == "orders"][0]


def test_describe_alone_shows_a_topic_without_its_config(world: World) -> None:
    world.grant([(T, "orders", Operation.DESCRIBE)])
    assert _configs_shown(world) == (None, None)


def test_describe_alone_shows_a_bytes_topics_value_format_outside_its_null_config(world: World) -> None:
    world.as_admin("POST", "/v1/topics", {"name": "raw", "config": {"value_format": "bytes"}})
    world.grant([(T, "raw", Operation.DESCRIBE)])
    listed = world.client.get("/v1/topics", headers=world.alice).json()
    assert listed == {"topics": [{"name": "raw", "partition_count": 1, "value_format": "bytes", "config": None}]}
    described = world.client.get("/v1/topics/raw", headers=world.alice).json()
    assert {k: v for k, v in described.items() if k != "partitions"} == listed["topics"][0]


@pytest.mark.parametrize("granted", [Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS, Operation.ALL])
def test_describe_configs_or_what_implies_it_shows_a_topics_config(world: World, granted: Operation) -> None:
    world.grant([(T, "orders", Operation.DESCRIBE), (T, "orders", granted)])
    assert _configs_shown(world) == (_ORDERS_CONFIG, _ORDERS_CONFIG)


def test_a_deny_of_describe_configs_hides_the_config_of_every_answer_that_shows_one(world: World) -> None:
    world.grant([(T, "orders", Operation.ALL), (C, CLUSTER_NAME, Operation.CREATE)])
    world.grant([(T, "orders", Operation.DESCRIBE_CONFIGS), (T, "fresh", Operation.DESCRIBE_CONFIGS)],
                Permission.DENY)
    assert _configs_shown(world) == (None, None)
    grown = world.client.post("/v1/topics/orders/partitions", json={"partition_count": 3}, headers=world.alice)
    assert (grown.status_code, grown.json()["partition_count"], grown.json()["config"]) == (200, 3, None)
    created = world.client.post("/v1/topics", json={"name": "fresh"}, headers=world.alice)
    assert (created.status_code, created.json()["name"], created.json()["config"]) == (201, "fresh", None)
    # The topics' configs are as they were: only the answer leaves them out.
    assert world.as_admin("GET", "/v1/topics/orders")["config"] == _ORDERS_CONFIG


def test_cluster_action_on_the_cluster_allows_an_operators_abort(world: World) -> None:
    world.open_transaction("tx")
    world.grant([(C, CLUSTER_NAME, Operation.CLUSTER_ACTION)])
    aborted = world.client.post("/v1/admin/transactions/tx/abort", headers=world.alice)
    assert (aborted.status_code, aborted.json()["state"]) == (200, "CompleteAbort")


def test_a_deny_of_cluster_action_refuses_an_operators_abort_that_only_cluster_action_allows(world: World) -> None:
    world.open_transaction("tx")
    world.grant([(C, CLUSTER_NAME, Operation.CLUSTER_ACTION)])
    world.grant([(C, CLUSTER_NAME, Operation.CLUSTER_ACTION)], Permission.DENY)
    refused = world.client.post("/v1/admin/transactions/tx/abort", headers=world.alice)
    # The refusal names cluster_action, as Kafka's, which asks alter silently first.
    assert (refused.status_code, refused.json()["error_code"], refused.json()["message"]) == (
        403, "CLUSTER_AUTHORIZATION_FAILED",
        "User:alice is not authorized for cluster_action on the cluster: no ACL allows it")
    assert world.as_admin("GET", "/v1/transactions/tx")["state"] == "Ongoing"


def test_list_transactions_shows_only_the_transactional_ids_the_principal_may_describe(world: World) -> None:
    world.open_transaction("tx")
    world.open_transaction("other")
    assert world.client.get("/v1/transactions", headers=world.alice).json()["transactions"] == []
    world.grant([(X, "tx", Operation.DESCRIBE)])
    listed = world.client.get("/v1/transactions", headers=world.alice).json()["transactions"]
    assert [t["transactional_id"] for t in listed] == ["tx"]


def test_a_multi_partition_fetch_answers_a_partition_it_may_not_read_with_its_own_refusal(world: World) -> None:
    world.as_admin("POST", "/v1/topics", {"name": "payroll"})
    world.grant([(T, "orders", Operation.READ)])
    before = world.stored.snapshot()
    r = world.client.post("/v1/fetch", headers=world.alice, json={"partitions": [
        {"topic": "payroll", "partition": 0}, {"topic": "orders", "partition": 0}, {"topic": "ghost", "partition": 0}]})
    got = r.json()["partitions"]
    assert [(g["topic"], g.get("error_code")) for g in got] == [
        ("payroll", "TOPIC_AUTHORIZATION_FAILED"), ("orders", None), ("ghost", "TOPIC_AUTHORIZATION_FAILED")]
    assert [rec["value"] for rec in got[1]["records"]] == [1]
    assert diff(before, world.stored.snapshot()) == []


def test_list_groups_shows_only_the_groups_the_principal_may_describe(world: World) -> None:
    world.as_admin("POST", "/v1/groups/other/offsets", {"offsets": [{"topic": "orders", "partition": 0, "offset": 0}]})
    assert world.client.get("/v1/groups", headers=world.alice).json()["groups"] == []
    world.grant([(G, "g", Operation.READ)])
    listed = world.client.get("/v1/groups", headers=world.alice).json()["groups"]
    assert [g["group_id"] for g in listed] == ["g"]


def test_list_groups_for_a_principal_who_may_describe_few_reads_a_bounded_page_and_says_where_it_stopped(
        world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    from app.services import group_service

    for g in ("g1", "g2", "g3", "g4", "g5"):
        world.as_admin("POST", f"/v1/groups/{g}/offsets", {"offsets": [{"topic": "orders", "partition": 0, "offset": 0}]})
    world.grant([(G, "g5", Operation.DESCRIBE)])
    monkeypatch.setattr(group_service, "GROUP_LIST_CHUNK", 2)
    monkeypatch.setattr(group_service, "GROUP_LIST_EXAMINED_MAX", 4)  # g, g1, g2, g3: none of them alice's

    first = world.client.get("/v1/groups", headers=world.alice).json()
    rest = world.client.get("/v1/groups", params={"after": first["next_after"]}, headers=world.alice).json()

    assert (first["groups"], first["next_after"]) == ([], "g3")
    assert ([g["group_id"] for g in rest["groups"]], rest["next_after"]) == (["g5"], None)


def test_a_groups_lag_leaves_out_topics_the_principal_may_not_describe(world: World) -> None:
    world.as_admin("POST", "/v1/topics", {"name": "payroll"})
    world.as_admin("POST", "/v1/groups/g/offsets", {"offsets": [{"topic": "payroll", "partition": 0, "offset": 0}]})
    world.grant([(G, "g", Operation.DESCRIBE), (T, "orders", Operation.DESCRIBE)])
    got = world.client.get("/v1/groups/g/lag", headers=world.alice).json()["partitions"]
    assert [(p["topic"], p["partition"]) for p in got] == [("orders", 0), ("orders", 1)]  # no payroll


def _payroll_consumed_too(world: World) -> None:
    world.as_admin("POST", "/v1/topics", {"name": "payroll"})
    world.as_admin("POST", "/v1/groups/g/offsets", {"offsets": [{"topic": "payroll", "partition": 0, "offset": 0}]})


def _reset_all(world: World, **body: Any) -> Any:
    return world.client.post("/v1/groups/g/offsets/reset", json={"all_topics": True, "to": "latest", **body},
                             headers=world.alice)


@pytest.mark.parametrize(("dry_run", "operation"), [(False, Operation.READ), (True, Operation.DESCRIBE)],
                         ids=["execute", "dry run"])
def test_a_reset_of_all_topics_leaves_out_topics_the_principal_may_not_describe(world: World, dry_run: bool,
                                                                               operation: Operation) -> None:
    _payroll_consumed_too(world)
    world.grant([(G, "g", operation), (T, "orders", operation)])
    before = world.stored.snapshot()

    r = _reset_all(world, dry_run=dry_run)

    assert r.status_code == 200, r.text
    assert [(o["topic"], o["partition"], o["new_offset"]) for o in r.json()["offsets"]] == [
        ("orders", 0, 1), ("orders", 1, 0)]  # no payroll
    got = world.as_admin("GET", "/v1/groups/g/offsets")["offsets"]
    assert [(o["topic"], o["partition"], o["offset"]) for o in got] == (
        [("orders", 0, 1), ("payroll", 0, 0)] if dry_run else [("orders", 0, 1), ("orders", 1, 0), ("payroll", 0, 0)])
    if dry_run:
        assert diff(before, world.stored.snapshot()) == []


def test_a_reset_of_all_topics_is_refused_for_a_topic_the_principal_may_describe_but_not_read(world: World) -> None:
    _payroll_consumed_too(world)
    world.grant([(G, "g", Operation.READ), (T, "orders", Operation.READ), (T, "payroll", Operation.DESCRIBE)])
    before = world.stored.snapshot()

    r = _reset_all(world)

    assert (r.status_code, r.json()["error_code"]) == (403, "TOPIC_AUTHORIZATION_FAILED"), r.text
    assert "payroll" in r.json()["message"]
    assert diff(before, world.stored.snapshot()) == []


def test_fetch_offsets_of_a_whole_group_leaves_out_topics_the_principal_may_not_describe(world: World) -> None:
    world.as_admin("POST", "/v1/topics", {"name": "payroll"})
    world.as_admin("POST", "/v1/groups/g/offsets", {"offsets": [{"topic": "payroll", "partition": 0, "offset": 0}]})
    world.grant([(G, "g", Operation.DESCRIBE), (T, "orders", Operation.DESCRIBE)])
    got = world.client.get("/v1/groups/g/offsets", headers=world.alice).json()["offsets"]
    assert [(o["topic"], o["partition"], o["offset"]) for o in got] == [("orders", 0, 1)]


def test_a_principal_without_describe_cannot_tell_a_topic_that_exists_from_one_that_does_not(world: World) -> None:
    answers = [world.client.get(f"/v1/topics/{name}", headers=world.alice) for name in ("orders", "no-such-topic")]
    assert [(r.status_code, r.json()) for r in answers] == [
        (403, {"error_code": "TOPIC_AUTHORIZATION_FAILED", "retriable": False,
               "message": f"User:alice is not authorized for describe on topic {name!r}: no ACL allows it"})
        for name in ("orders", "no-such-topic")]
    world.grant([(T, "or", Operation.CREATE)], pattern=PatternType.PREFIXED)
    r = world.client.post("/v1/topics", json={"name": "orders"}, headers=world.alice)
    assert (r.status_code, r.json()["error_code"]) == (403, "TOPIC_AUTHORIZATION_FAILED")


def test_a_zombie_with_a_valid_key_but_no_write_on_the_transactional_id_cannot_fence_its_owner(world: World) -> None:
    owner = world.open_transaction("tx")
    world.grant([(T, "orders", Operation.ALL)])  # everything on the topic, nothing on the id
    before = world.stored.snapshot()
    r = world.client.post("/v1/producers", json={"transactional_id": "tx"}, headers=world.alice)
    assert (r.status_code, r.json()["error_code"]) == (403, "TRANSACTIONAL_ID_AUTHORIZATION_FAILED")
    assert diff(before, world.stored.snapshot()) == []
    committed = world.as_admin("POST", "/v1/transactions/tx/commit", owner)
    assert committed["state"] == "CompleteCommit"


def test_an_idempotent_producer_id_needs_idempotent_write_or_write_on_some_topic(world: World) -> None:
    refused = world.client.post("/v1/producers", json={}, headers=world.alice)
    assert (refused.status_code, refused.json()["error_code"]) == (403, "CLUSTER_AUTHORIZATION_FAILED")
    world.grant([(T, "orders", Operation.WRITE)])
    assert world.client.post("/v1/producers", json={}, headers=world.alice).status_code == 200
    world.as_admin("DELETE", "/v1/acls?principal=User:alice")
    world.grant([(C, CLUSTER_NAME, Operation.IDEMPOTENT_WRITE)])
    assert world.client.post("/v1/producers", json={}, headers=world.alice).status_code == 200


def test_create_on_the_cluster_allows_creating_any_topic(world: World) -> None:
    world.grant([(C, CLUSTER_NAME, Operation.CREATE)])
    assert world.client.post("/v1/topics", json={"name": "anything"}, headers=world.alice).status_code == 201


def test_a_removed_acl_stops_access_at_once_in_the_process_that_removed_it(world: World) -> None:
    world.grant([(T, "orders", Operation.READ)])
    url = "/v1/topics/orders/partitions/0/records"
    assert world.client.get(url, headers=world.alice).status_code == 200
    world.as_admin("DELETE", "/v1/acls?principal=User:alice&resource_name=orders")
    assert world.client.get(url, headers=world.alice).status_code == 403


def test_a_revoked_key_stops_working_at_once_in_the_process_that_revoked_it(world: World) -> None:
    world.grant([(T, "orders", Operation.READ)])
    key_id = world.as_admin("GET", "/v1/principals")["principals"]
    alice_key = next(k["key_id"] for p in key_id if p["principal"] == "User:alice" for k in p["api_keys"])
    url = "/v1/topics/orders/partitions/0/records"
    assert world.client.get(url, headers=world.alice).status_code == 200
    world.as_admin("DELETE", f"/v1/principals/alice/api-keys/{alice_key}")
    r = world.client.get(url, headers=world.alice)
    assert (r.status_code, r.json()["error_code"]) == (401, "AUTHENTICATION_FAILED")


def test_an_api_key_in_basic_credentials_is_taken_with_its_principals_name_or_none(world: World) -> None:
    import base64

    world.grant([(T, "orders", Operation.DESCRIBE)])
    key = world.alice["Authorization"].removeprefix("Bearer ")

    def basic(user: str) -> dict[str, str]:
        return {"Authorization": "Basic " + base64.b64encode(f"{user}:{key}".encode()).decode()}

    statuses = [world.client.get("/v1/topics/orders", headers=basic(u)).status_code
                for u in ("alice", "User:alice", "", "bob")]
    assert statuses == [200, 200, 200, 401]


@pytest.mark.parametrize("credentials", [b"Basic \xff\xfe", b"Basic \xc3\xa9A==", b"Basic ###"],
                         ids=["bytes past ASCII", "UTF-8 past ASCII", "not base64"])
def test_basic_credentials_that_are_not_base64_text_are_a_401_not_a_500(world: World, credentials: bytes) -> None:
    # base64 refuses a str holding anything but ASCII with a ValueError of its own, which was
    # answered 500 UNKNOWN_SERVER_ERROR with a traceback, to a caller with no credentials.
    r = world.client.get("/v1/topics/orders", headers={"Authorization": credentials})  # type: ignore[dict-item]
    assert (r.status_code, r.json()["error_code"]) == (401, "AUTHENTICATION_FAILED")


def test_the_admin_endpoints_refuse_bad_bindings_and_change_nothing(world: World) -> None:
    before = world.stored.snapshot()
    for acl in ({"principal": "alice", "resource_type": "topic", "resource_name": "t", "operation": "read"},
                {"principal": "User:alice", "resource_type": "group", "resource_name": "g", "operation": "write"},
                {"principal": "User:alice", "resource_type": "cluster", "resource_name": "c", "operation": "alter"},
                {"principal": "User:alice", "resource_type": "topic", "resource_name": "t", "operation": "fly"}):
        r = world.client.post("/v1/acls", json={"acls": [acl]}, headers=world.admin)
        assert r.status_code in (400, 422) and r.json()["error_code"] == "INVALID_REQUEST", r.text
    r = world.client.delete("/v1/acls", headers=world.admin)
    assert (r.status_code, r.json()["error_code"]) == (400, "INVALID_REQUEST")
    r = world.client.delete("/v1/principals/alice/api-keys/0123456789abcdef", headers=world.admin)
    assert (r.status_code, r.json()["error_code"]) == (404, "RESOURCE_NOT_FOUND")
    assert diff(before, world.stored.snapshot()) == []


def test_an_api_key_is_stored_only_as_a_salted_scrypt_hash(world: World) -> None:
    created = world.as_admin("POST", "/v1/principals/dave/api-keys")
    rows = world.stored.snapshot()["api_keys"]
    stored = next(r for r in rows if r[0] == created["key_id"])
    assert created["api_key"] not in repr(rows)
    assert split_api_key(created["api_key"])[1] not in repr(rows)  # type: ignore[index]
    assert stored[2].startswith("scrypt$2$8$1$")  # N=2 here (cheap_scrypt); 16384 in service


@pytest.mark.parametrize(("authentication", "caller", "status"), [
    (None, "127.0.0.1", 200), (None, "::1", 200), (None, "10.1.2.3", 401), ("none", "10.1.2.3", 200),
])
def test_with_authentication_unset_only_local_callers_are_answered(settings: Settings, clock: Any,
                                                                   authentication: str | None, caller: str,
                                                                   status: int) -> None:
    app = create_app(settings.model_copy(update={"authentication": authentication}), clock)
    with TestClient(app, client=(caller, 50000)) as c:
        r = c.get("/v1/topics")
        assert r.status_code == status, r.text
        assert c.get("/healthz").status_code == 200
    if status == 401:
        assert "answers local callers only" in r.json()["message"]


def test_an_app_with_a_v1_route_that_skips_authentication_is_refused() -> None:
    from fastapi import APIRouter, FastAPI

    from app.api.app import _check_every_api_route_is_authenticated

    app = FastAPI()
    router = APIRouter(prefix="/v1/things")

    @router.get("")
    def things() -> list[str]:
        return []

    app.include_router(router)
    with pytest.raises(RuntimeError, match="/v1/things would be served without authentication"):
        _check_every_api_route_is_authenticated(app)


def test_a_v1_route_added_to_a_router_after_an_app_was_built_is_checked_afresh(  # type: ignore[no-untyped-def]
        settings: Settings, clock: Any, monkeypatch) -> None:
    from app.api.routers import health

    create_app(settings, clock, prepare_database=False)  # the routers as they are: authenticated
    monkeypatch.setattr(health.router, "routes", list(health.router.routes))  # given back after the test

    @health.router.get("/v1/sneaky")
    def sneaky() -> list[str]:
        return []

    with pytest.raises(RuntimeError, match="/v1/sneaky would be served without authentication"):
        create_app(settings, clock, prepare_database=False)


# --- from the review: what refusals and answers may reveal, CSRF, the cache under a reload -------


def _basic(key_header: dict[str, str]) -> str:
    import base64

    key = key_header["Authorization"].removeprefix("Bearer ")
    return "Basic " + base64.b64encode(f":{key}".encode()).decode()


@pytest.mark.parametrize(("credential", "site", "status"), [
    ("basic", "cross-site", 401), ("basic", "same-site", 401), ("basic", "same-origin", 200), ("basic", None, 200),
    ("bearer", "cross-site", 200),
])
def test_credentials_a_browser_sends_by_itself_cannot_change_anything_from_another_site(
        world: World, credential: str, site: str | None, status: int) -> None:
    world.open_transaction("tx")
    headers = {"Authorization": _basic(world.admin) if credential == "basic" else world.admin["Authorization"]}
    if site is not None:
        headers["Sec-Fetch-Site"] = site
    before = world.stored.snapshot()
    r = world.client.post("/v1/admin/transactions/tx/abort", headers=headers)
    assert r.status_code == status, r.text
    if status == 401:
        assert "another site" in r.json()["message"]
        assert diff(before, world.stored.snapshot()) == []
    # Reading is not changing: a page from another site may not read the answer anyway (CORS).
    assert world.client.get("/v1/topics", headers=headers).status_code == 200


def test_an_origin_header_of_another_site_is_refused_where_fetch_metadata_is_missing(world: World) -> None:
    world.open_transaction("tx")
    r = world.client.post("/v1/admin/transactions/tx/abort",
                          headers={"Authorization": _basic(world.admin), "Origin": "https://evil.example"})
    assert r.status_code == 401


def test_a_topic_that_cannot_be_deleted_names_only_the_transactional_ids_the_principal_may_describe(world: World) -> None:
    world.open_transaction("secret-tx")
    world.grant([(T, "orders", Operation.DELETE)])
    r = world.client.delete("/v1/topics/orders", headers=world.alice)
    assert (r.status_code, r.json()["error_code"]) == (409, "TOPIC_HAS_OPEN_TRANSACTIONS")
    assert "secret-tx" not in r.text and r.json()["details"]["transactional_ids"] == []
    world.grant([(X, "secret-tx", Operation.DESCRIBE)])
    assert world.client.delete("/v1/topics/orders", headers=world.alice).json()["details"]["transactional_ids"] == [
        "secret-tx"]


def test_a_producer_id_of_another_principals_transactional_id_is_refused_as_unknown(world: World) -> None:
    owner = world.open_transaction("secret-tx")
    world.grant([(T, "orders", Operation.WRITE)])
    ident = {"producer_id": owner["producer_id"], "producer_epoch": owner["producer_epoch"]}
    send = world.client.post("/v1/records", headers=world.alice, json={**ident, "batches": [
        {"topic": "orders", "partition": 0, "base_sequence": 0, "records": [{"value": 1}]}]})
    init = world.client.post("/v1/producers", headers=world.alice, json=ident)
    assert [(a.status_code, a.json()["error_code"]) for a in (send, init)] == [(409, "UNKNOWN_PRODUCER_ID")] * 2
    assert "secret-tx" not in send.text + init.text and "transactional" not in send.text + init.text


def test_describe_transaction_leaves_out_topics_and_groups_the_principal_may_not_describe(world: World) -> None:
    txn = world.open_transaction("tx")  # writes orders/1
    world.as_admin("POST", "/v1/transactions/tx/offsets", {
        "producer_id": txn["producer_id"], "producer_epoch": txn["producer_epoch"], "group_id": "g",
        "offsets": [{"topic": "orders", "partition": 0, "offset": 1}]})
    world.grant([(X, "tx", Operation.DESCRIBE)])
    described = world.client.get("/v1/transactions/tx", headers=world.alice).json()
    assert (described["partitions"], described["pending_offsets"]) == ([], [])
    world.grant([(T, "orders", Operation.DESCRIBE), (G, "g", Operation.DESCRIBE)])
    described = world.client.get("/v1/transactions/tx", headers=world.alice).json()
    assert [(p["topic"], p["partition"]) for p in described["partitions"]] == [("orders", 1)]
    assert [(o["group_id"], o["offset"]) for o in described["pending_offsets"]] == [("g", 1)]


def test_describe_group_leaves_out_the_members_topics_the_principal_may_not_describe(world: World) -> None:
    _join(world)
    world.grant([(G, "g", Operation.DESCRIBE)])
    (member,) = world.client.get("/v1/groups/g", headers=world.alice).json()["members"]
    assert (member["topics"], member["assignment"]) == ([], [])


def test_describe_on_the_cluster_lists_every_group(world: World) -> None:
    world.as_admin("POST", "/v1/groups/other/offsets", {"offsets": [{"topic": "orders", "partition": 0, "offset": 0}]})
    world.grant([(C, CLUSTER_NAME, Operation.DESCRIBE)])
    assert [g["group_id"] for g in world.client.get("/v1/groups", headers=world.alice).json()["groups"]] == [
        "g", "other"]


def test_list_transactions_limit_counts_what_the_principal_sees(world: World) -> None:
    for tid in ("a", "b", "c", "d", "zz"):
        world.open_transaction(tid)
    world.grant([(X, "zz", Operation.DESCRIBE)])
    listed = world.client.get("/v1/transactions", params={"limit": 3}, headers=world.alice).json()["transactions"]
    assert [t["transactional_id"] for t in listed] == ["zz"]


def test_a_decision_made_while_the_acls_reload_is_not_kept_past_the_reload(world: World,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """The window the review found: a decision computed on the old bindings, stored after a
    reload swapped them, must not survive in the new state."""
    from app.services import security as security_module
    from app.domain.acl import AclFilter

    state = world.client.app.state.security
    world.grant([(T, "orders", Operation.READ)])
    real = security_module.is_allowed
    removed = threading.Event()

    def decide_then_reload(bindings, principal, operation, resource):  # type: ignore[no-untyped-def]
        decision = real(bindings, principal, operation, resource)  # on the old bindings: allowed
        if not removed.is_set():
            removed.set()
            # What DELETE /v1/acls does (an HTTP call cannot be made from inside the app here).
            world.client.app.state.services.security.remove_acls(AclFilter(principal="User:alice"), by="test")
        return decision

    monkeypatch.setattr(security_module, "is_allowed", decide_then_reload)
    url = "/v1/topics/orders/partitions/0/records"
    assert world.client.get(url, headers=world.alice).status_code == 200  # decided before the removal
    assert state.version >= 3
    assert world.client.get(url, headers=world.alice).status_code == 403  # not the remembered stale allow


def test_after_a_wrong_secret_no_hash_is_paid_for_that_client_for_a_moment(
        world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    """A client sending wrong secrets for a known key id costs one scrypt per interval, not
    one per request; a key already verified is not affected."""
    from app.services import security as security_module

    monkeypatch.setattr(security_module, "_FAILED_KEY_DELAY_S", 0.3)
    created = world.as_admin("POST", "/v1/principals/bob/api-keys")
    key_id, key = created["key_id"], created["api_key"]
    hashed: list[str] = []
    real = security_module.secret_matches
    monkeypatch.setattr(security_module, "secret_matches", lambda s, h: hashed.append(s) or real(s, h))
    wrong = {"Authorization": f"Bearer outbox_{key_id}_{'x' * 43}"}
    statuses = [world.client.get("/v1/topics", headers=wrong).status_code for _ in range(5)]
    assert statuses == [401] * 5 and len(hashed) == 1
    refused = world.client.get("/v1/topics", headers={"Authorization": f"Bearer {key}"})
    assert refused.status_code == 401 and "a moment ago" in refused.json()["message"]
    time.sleep(0.35)
    assert world.client.get("/v1/topics", headers={"Authorization": f"Bearer {key}"}).status_code == 200
    assert world.client.get("/v1/topics", headers=world.alice).status_code == 200  # remembered: unaffected


def test_wrong_secrets_for_a_key_do_not_keep_its_owner_out(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    """Key ids are public: a guesser sending wrong secrets for bob's key id is throttled, and
    bob, from another address, is not."""
    from app.services import security as security_module

    created = world.as_admin("POST", "/v1/principals/bob/api-keys")
    key_id, key = created["key_id"], created["api_key"]
    guesser = TestClient(world.client.app, client=("10.0.0.66", 40000))
    owner = TestClient(world.client.app, client=("10.0.0.2", 40000))
    hashed: list[str] = []
    real = security_module.secret_matches
    monkeypatch.setattr(security_module, "secret_matches", lambda s, h: hashed.append(s) or real(s, h))
    wrong = {"Authorization": f"Bearer outbox_{key_id}_{'x' * 43}"}

    guesses = [guesser.get("/v1/topics", headers=wrong) for _ in range(5)]
    answer = owner.get("/v1/topics", headers={"Authorization": f"Bearer {key}"})

    assert [g.status_code for g in guesses] == [401] * 5
    assert answer.status_code == 200, answer.text
    assert len(hashed) == 2  # the first guess, then bob's key: the guesser's next four cost nothing
    another_guess = guesser.get("/v1/topics", headers={"Authorization": f"Bearer outbox_{key_id}_{'y' * 43}"})
    assert another_guess.status_code == 401 and "a moment ago" in another_guess.json()["message"]
    assert len(hashed) == 2


def test_a_wrong_secret_for_one_key_does_not_throttle_another_key_from_that_client(
        world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    """The throttle holds the guessed key id for the guessing address: the same address's
    other keys (a gateway, a process with two principals' keys) are verified as usual."""
    from app.services import security as security_module

    monkeypatch.setattr(security_module, "_FAILED_KEY_DELAY_S", 30)
    bob = world.as_admin("POST", "/v1/principals/bob/api-keys")
    carol = world.as_admin("POST", "/v1/principals/carol/api-keys")
    wrong = {"Authorization": f"Bearer outbox_{bob['key_id']}_{'x' * 43}"}

    assert world.client.get("/v1/topics", headers=wrong).status_code == 401
    answer = world.client.get("/v1/topics", headers={"Authorization": f"Bearer {carol['api_key']}"})
    throttled = world.client.get("/v1/topics", headers={"Authorization": f"Bearer {bob['api_key']}"})

    assert answer.status_code == 200, answer.text
    assert throttled.status_code == 401 and "a moment ago" in throttled.json()["message"]


def test_scrypt_checks_from_many_threads_at_once_all_run_on_one_thread(
        world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    """The C library keeps a 16 MiB scrypt buffer for every thread that ran one: the checks
    of every caller thread run on the security state's own, so the process keeps one."""
    from app.domain.errors import AuthenticationFailed
    from app.services import security as security_module

    state = world.client.app.state.security
    created = world.as_admin("POST", "/v1/principals/bob/api-keys")
    key_id, key = created["key_id"], created["api_key"]
    ran_on: list[int] = []
    real = security_module.secret_matches
    monkeypatch.setattr(security_module, "secret_matches",
                        lambda s, h: ran_on.append(threading.get_ident()) or real(s, h))
    callers = 8
    start = threading.Barrier(callers)
    outcomes: dict[int, str] = {}
    caller_threads: set[int] = set()

    def check(i: int) -> None:
        caller_threads.add(threading.get_ident())
        # Each a wrong secret of its own from an address of its own (no throttle, nothing
        # remembered: a scrypt each), but the last, bob's own key.
        presented = key if i == callers - 1 else f"outbox_{key_id}_{str(i) * 43}"
        start.wait()
        try:
            outcomes[i] = state.api_key_principal(presented, f"10.0.0.{i}")
        except AuthenticationFailed:
            outcomes[i] = "refused"

    threads = [threading.Thread(target=check, args=(i,)) for i in range(callers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    assert outcomes == {**{i: "refused" for i in range(callers - 1)}, callers - 1: "User:bob"}
    assert len(ran_on) == callers and len(set(ran_on)) == 1
    assert not set(ran_on) & caller_threads


@pytest.mark.parametrize("subject", ["alice\nWARNING outbox.audit: User:admin create_api_key allowed", "bob\x1b[2K",
                                     "x" * 300], ids=["a newline", "an escape", "too long"])
def test_a_jwt_whose_principal_claim_is_no_principals_name_is_refused(world: World, subject: str) -> None:
    r = world.client.get("/v1/topics", headers={"Authorization": f"Bearer {token(world.signing_key, subject)}"})

    assert r.status_code == 401
    assert r.json()["error_code"] == "AUTHENTICATION_FAILED"
    assert "claim is not a principal's name" in r.json()["message"]


def test_a_refused_authentication_is_audited_with_the_route_s_template_not_the_path_the_caller_sent(
        world: World, caplog: pytest.LogCaptureFixture) -> None:
    """A path holds whatever the caller put in it: a key pasted where a topic's name goes was
    written whole into the audit log by a refusal to authenticate."""
    pasted = world.alice["Authorization"].removeprefix("Bearer ")
    caplog.set_level(logging.INFO, logger="outbox.audit")

    r = world.client.get(f"/v1/topics/{pasted}", headers=_wrong_key(world))

    assert r.status_code == 401
    (line,) = [rec.getMessage() for rec in caplog.records if rec.name == "outbox.audit"]
    assert "authenticate GET /v1/topics/{topic} refused" in line, line
    assert pasted not in line and pasted.split(".")[-1] not in line


def test_a_forgotten_producer_id_is_taken_back_only_by_a_send_the_principal_may_make(world: World, clock: Any) -> None:
    # The take-back is the Send's: a Send refused for its topic makes no row, and one allowed
    # (WRITE on its topic, which grants an idempotent producer id as KIP-679 does) makes it.
    world.as_admin("POST", "/v1/topics", {"name": "secret", "partitions": 1})
    world.grant([(T, "orders", Operation.WRITE)])
    p = world.client.post("/v1/producers", headers=world.alice, json={}).json()
    ident = {"producer_id": p["producer_id"], "producer_epoch": p["producer_epoch"]}

    def send(topic: str, base_sequence: int) -> Any:
        return world.client.post("/v1/records", headers=world.alice, json={**ident, "batches": [
            {"topic": topic, "partition": 0, "base_sequence": base_sequence, "records": [{"value": 1}]}]})

    assert send("orders", 0).status_code == 200
    services = world.client.app.state.services
    clock.advance(services.settings.producer_id_expiration_ms + 1)
    assert services.producer_expiry.expire(clock()).expired == 1
    before = world.stored.snapshot()

    refused = send("secret", 5)

    assert (refused.status_code, refused.json()["error_code"]) == (403, "TOPIC_AUTHORIZATION_FAILED")
    assert diff(before, world.stored.snapshot()) == []
    taken = send("orders", 1)
    assert (taken.status_code, taken.json()["results"][0]["base_offset"]) == (200, 2), taken.text


def test_a_forgotten_producer_id_is_taken_back_by_its_holder_alone_while_expiry_keeps_its_holder(
        world: World, clock: Any) -> None:
    # Another principal allowed to write the same topic is answered as for an id never handed
    # out, and makes nothing; the holder's next Send takes its id back as before.
    bob = {"Authorization": f"Bearer {world.as_admin('POST', '/v1/principals/bob/api-keys')['api_key']}"}
    world.grant([(T, "orders", Operation.WRITE)])
    world.grant([(T, "orders", Operation.WRITE)], principal="User:bob")
    p = world.client.post("/v1/producers", headers=world.alice, json={}).json()
    ident = {"producer_id": p["producer_id"], "producer_epoch": p["producer_epoch"]}

    def send(who: dict[str, str], base_sequence: int) -> Any:
        return world.client.post("/v1/records", headers=who, json={**ident, "batches": [
            {"topic": "orders", "partition": 0, "base_sequence": base_sequence, "records": [{"value": 1}]}]})

    assert send(world.alice, 0).status_code == 200
    services = world.client.app.state.services
    clock.advance(services.settings.producer_id_expiration_ms + 1)
    assert services.producer_expiry.expire(clock()).expired == 1
    before = world.stored.snapshot()
    never_handed_out = world.client.post("/v1/records", headers=bob, json={
        "producer_id": p["producer_id"] + 1, "producer_epoch": 0,
        "batches": [{"topic": "orders", "partition": 0, "base_sequence": 5, "records": [{"value": 1}]}]})

    refused = send(bob, 5)

    assert (refused.status_code, refused.json()) == (never_handed_out.status_code, {
        **never_handed_out.json(), "message": never_handed_out.json()["message"].replace(
            str(p["producer_id"] + 1), str(p["producer_id"]))})
    assert refused.json()["error_code"] == "UNKNOWN_PRODUCER_ID"
    assert diff(before, world.stored.snapshot()) == []
    taken = send(world.alice, 1)
    assert (taken.status_code, taken.json()["results"][0]["base_offset"]) == (200, 2), taken.text
    assert send(bob, 2).json()["error_code"] == "UNKNOWN_PRODUCER_ID"
