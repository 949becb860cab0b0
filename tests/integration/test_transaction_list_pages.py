"""GET /v1/transactions, `outbox transactions list` and Kafka's ListTransactions list every
transaction the caller may describe that matches its filters, up to its limit, in id order,
however many ids of other principals (or other producers) come before it; a list cut by its
limit or by the ids one request reads says so (`next_after`) and goes on from there (`after`).
On SQLite and PostgreSQL."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, insert

from app.api.app import create_app
from app.services.transaction_listing import TransactionListing
from app.settings import Settings
from app.storage.tables import transactions
from tests.conftest import QUIET

# Past the 10,000 ids the list once read before it dropped those the caller may not describe.
OTHERS = 10_001


def _store(db_url: str, ids: list[str], *, state: str = "Empty", first_producer_id: int = 1_000_000) -> None:
    """Transactional ids written straight into the table: ten thousand InitProducerIds over
    HTTP would take the test minutes."""
    started = 0 if state == "Ongoing" else None
    rows = [{"transactional_id": tid, "producer_id": first_producer_id + i, "producer_epoch": 0, "state": state,
             "txn_id": i if state == "Ongoing" else None, "transaction_timeout_ms": 60_000,
             "txn_started_ms": started, "updated_ms": 0} for i, tid in enumerate(ids)]
    engine = create_engine(db_url)
    try:
        with engine.begin() as conn:
            conn.execute(insert(transactions), rows)
    finally:
        engine.dispose()


class Secured:
    def __init__(self, client: TestClient) -> None:
        self.client = client
        security = client.app.state.services.security
        self.admin = {"Authorization": f"Bearer {security.create_api_key('admin', by='test').api_key}"}
        self.keys: dict[str, dict[str, str]] = {}

    def key(self, user: str) -> dict[str, str]:
        if user not in self.keys:
            created = self.client.app.state.services.security.create_api_key(user, by="test")
            self.keys[user] = {"Authorization": f"Bearer {created.api_key}"}
        return self.keys[user]

    def grant_describe(self, user: str, names: list[str], pattern: str = "literal") -> None:
        r = self.client.post("/v1/acls", headers=self.admin, json={"acls": [
            {"principal": f"User:{user}", "resource_type": "transactional_id", "resource_name": name,
             "pattern_type": pattern, "operation": "describe", "permission": "allow"} for name in names]})
        assert r.status_code < 300, r.text


@pytest.fixture
def secured(db_url: str, clock: Any) -> Iterator[Secured]:
    settings = Settings(database_url=db_url, **QUIET, authentication="api_key", super_users="User:admin")
    with TestClient(create_app(settings, clock)) as client:
        yield Secured(client)


def _page(client: TestClient, headers: dict[str, str] | None = None, **params: Any) -> dict[str, Any]:
    r = client.get("/v1/transactions", params=params, headers=headers or {})
    assert r.status_code == 200, r.text
    return r.json()


def _ids(answer: dict[str, Any]) -> list[str]:
    return [t["transactional_id"] for t in answer["transactions"]]


def test_a_transaction_the_caller_may_describe_is_listed_after_ten_thousand_it_may_not(
        secured: Secured, db_url: str) -> None:
    _store(db_url, [f"aaa-{i:05d}" for i in range(9_000)] + [f"bbb-{i:05d}" for i in range(OTHERS - 9_000)])
    r = secured.client.post("/v1/producers", headers=secured.admin, json={"transactional_id": "zz-shop-1"})
    assert r.status_code == 200, r.text
    secured.grant_describe("shopops", ["zz-shop-"], pattern="prefixed")
    shopops = secured.key("shopops")

    listed = _page(secured.client, shopops)

    assert (_ids(listed), listed["next_after"]) == (["zz-shop-1"], None)
    assert _ids(_page(secured.client, shopops, limit=10_000)) == ["zz-shop-1"]


@pytest.mark.parametrize("hanging", [False, True], ids=["list", "hanging"])
def test_a_paged_walk_lists_every_describable_id_exactly_once(
        secured: Secured, db_url: str, monkeypatch: pytest.MonkeyPatch, hanging: bool) -> None:
    # Small chunks and a small bound per request, so that pages end both ways: at the limit,
    # and at the bound with fewer than the limit found.
    monkeypatch.setattr("app.services.transaction_listing.TRANSACTION_LIST_CHUNK", 4)
    monkeypatch.setattr(TransactionListing, "examined_max", 9)
    every = [f"t{i:03d}" for i in range(60)]
    _store(db_url, every, state="Ongoing")  # begun at 0: hanging, too, by the test's clock
    mine = [tid for i, tid in enumerate(every) if i % 7 in (0, 3) or 40 <= i < 46]
    secured.grant_describe("alice", mine)
    alice = secured.key("alice")

    walked: list[str] = []
    sizes: list[int] = []
    after = None
    for _ in range(len(every)):  # each page reads at least one id: the walk ends before this does
        params: dict[str, Any] = {"limit": 5, "hanging": hanging}
        if after is not None:
            params["after"] = after
        answer = _page(secured.client, alice, **params)
        walked += _ids(answer)
        sizes.append(len(answer["transactions"]))
        after = answer["next_after"]
        if after is None:
            break

    assert walked == mine
    assert 5 in sizes and any(0 < n < 5 for n in sizes[:-1])  # cut by the limit, and by the bound


def test_without_authentication_a_list_cut_at_its_limit_says_where_to_go_on(client: TestClient, db_url: str) -> None:
    _store(db_url, [f"t{i}" for i in range(6)])

    first = _page(client, limit=3)
    second = _page(client, limit=3, after=first["next_after"])

    assert (_ids(first), first["next_after"]) == (["t0", "t1", "t2"], "t2")
    assert (_ids(second), second["next_after"]) == (["t3", "t4", "t5"], None)  # nothing after t5
    assert _page(client, limit=6)["next_after"] is None


def test_the_command_says_when_its_list_is_cut_and_goes_on_with_after(cli, db_url: str) -> None:  # type: ignore[no-untyped-def]
    _store(db_url, ["a", "b", "c"])

    first = cli(db_url, "transactions", "list", "--limit", "2")
    rest = cli(db_url, "transactions", "list", "--limit", "2", "--after", "b")

    assert [t["transactional_id"] for t in json.loads(first.stdout)["transactions"]] == ["a", "b"]
    assert first.stderr == "outbox: 2 listed, and more may follow: add --after b for the next ones (or a larger --limit)\n"
    answer = json.loads(rest.stdout)
    assert ([t["transactional_id"] for t in answer["transactions"]], answer["next_after"], rest.stderr) == (
        ["c"], None, "")
