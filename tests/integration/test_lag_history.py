"""The console's lag history (app.services.lag_history, its sampler app.worker.lag_history, GET
/v1/console/lag-history), on both databases: each sample holds the groups that lag most with
their exact totals, a bounded number of groups and samples, its settings acting, and a
principal shown only the groups it may describe with every topic their lag counts."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError

from app import metrics
from app.api.app import create_app
from app.composition import serve_chores
from app.services.lag_history import LagHistory
from app.settings import Settings
from app.worker.chore import ChoreConfig
from app.worker.lag_history import LagHistorySampler, LagSamplePass
from tests.helpers import batch, create_topic, send

START_MS = 1_700_000_000_000


def _client(settings: Settings, clock, **changes) -> Iterator[TestClient]:  # type: ignore[no-untyped-def]
    # No sampler thread (interval 0 on the app's own history): the tests sample by hand, with
    # a history of their own settings; a gauge reading is fresh at every sample.
    app = create_app(settings.model_copy(update={"metrics_gauge_interval_ms": 0, "console_lag_interval_ms": 0,
                                                 **changes}), clock)
    with TestClient(app) as c:
        yield c


@pytest.fixture
def client(settings: Settings, clock):  # type: ignore[no-untyped-def]
    yield from _client(settings, clock)


def _history(client: TestClient, *, interval_ms: int = 1_000, window_ms: int = 10_000, max_samples: int = 100,
             max_groups: int = 20) -> LagHistory:
    return LagHistory(client.app.state.services.gauges, interval_ms=interval_ms, window_ms=window_ms,  # type: ignore[attr-defined]
                      max_samples=max_samples, max_groups=max_groups)


def _commit(client: TestClient, group: str, topic: str, partition: int, offset: int) -> None:
    r = client.post(f"/v1/groups/{group}/offsets", json={"offsets": [
        {"topic": topic, "partition": partition, "offset": offset}]})
    assert r.status_code == 200, r.text


@pytest.fixture
def lagging(client: TestClient) -> TestClient:
    _make_lagging(client)
    return client


def _make_lagging(client: TestClient) -> None:
    """orders: 2 partitions of 5 records each; payroll: 1 partition of 3. Group far at 0 in both
    orders partitions (lag 10), near at 4 and 5 (lag 1), unknown at 5 in orders/0 only (orders/1
    not committed), payer at 1 in payroll (lag 2)."""
    create_topic(client, "orders", 2)
    create_topic(client, "payroll", 1)
    assert send(client, [batch("orders", p, list(range(5))) for p in range(2)]
                + [batch("payroll", 0, list(range(3)))]).status_code == 200
    for group, partition, offset in (("far", 0, 0), ("far", 1, 0), ("near", 0, 4), ("near", 1, 5),
                                     ("unknown", 0, 5)):
        _commit(client, group, "orders", partition, offset)
    _commit(client, "payer", "payroll", 0, 1)


def _totals(history: LagHistory) -> list[tuple[int, list[tuple[str, int | None]]]]:
    return [(s.time_ms, [(p.group_id, p.total_lag) for p in s.groups]) for s in history.since()]


def test_a_sample_holds_each_groups_total_lag_most_first_unknown_where_a_partition_has_no_offset(lagging) -> None:  # type: ignore[no-untyped-def]
    history = _history(lagging)

    assert history.sample(START_MS) == 4

    assert _totals(history) == [(START_MS, [("far", 10), ("payer", 2), ("near", 1), ("unknown", None)])]
    assert {p.group_id: p.topics for p in history.since()[0].groups} == {
        "far": {"orders"}, "payer": {"payroll"}, "near": {"orders"}, "unknown": {"orders"}}


def test_a_sample_keeps_at_most_max_groups_those_that_lag_most(lagging) -> None:  # type: ignore[no-untyped-def]
    history = _history(lagging, max_groups=2)

    assert history.sample(START_MS) == 2

    assert _totals(history) == [(START_MS, [("far", 10), ("payer", 2)])]


def test_samples_follow_the_lag_as_groups_catch_up(lagging) -> None:  # type: ignore[no-untyped-def]
    history = _history(lagging, max_groups=1)
    history.sample(START_MS)
    _commit(lagging, "far", "orders", 0, 5)
    _commit(lagging, "far", "orders", 1, 5)

    history.sample(START_MS + 1_000)

    assert _totals(history) == [(START_MS, [("far", 10)]), (START_MS + 1_000, [("payer", 2)])]
    assert [s.time_ms for s in history.since(START_MS)] == [START_MS + 1_000]


def test_samples_older_than_the_window_are_dropped_and_at_most_max_samples_kept(lagging) -> None:  # type: ignore[no-untyped-def]
    by_window = _history(lagging, window_ms=3_000)
    by_count = _history(lagging, window_ms=3_600_000, max_samples=2)

    for step in range(5):
        by_window.sample(START_MS + step * 1_000)
        by_count.sample(START_MS + step * 1_000)

    assert [s.time_ms for s in by_window.since()] == [START_MS + 2_000, START_MS + 3_000, START_MS + 4_000]
    assert [s.time_ms for s in by_count.since()] == [START_MS + 3_000, START_MS + 4_000]


def test_the_sampler_chore_samples_at_the_time_of_its_clock_and_counts_its_pass(lagging, clock) -> None:  # type: ignore[no-untyped-def]
    history = _history(lagging)
    sampler = LagHistorySampler(history, clock, ChoreConfig(interval_ms=1_000))
    ok = metrics.CONSOLE_LAG_PASSES.labels("ok")._value.get()

    assert sampler.run_once() == LagSamplePass(groups=4)
    clock.advance(1_000)
    assert sampler.run_once() == LagSamplePass(groups=4)

    assert [s.time_ms for s in history.since()] == [clock() - 1_000, clock()]
    assert metrics.CONSOLE_LAG_PASSES.labels("ok")._value.get() == ok + 2


def test_a_sample_is_read_afresh_when_the_gauges_keep_their_reading_longer_than_its_interval(settings, clock) -> None:  # type: ignore[no-untyped-def]
    # The gauges keep a reading 5 s; the history samples every second: each sample must still
    # be the lag at its time, not the reading a sample (or a scrape) took up to 4 s before.
    for c in _client(settings, clock, metrics_gauge_interval_ms=5_000):
        _make_lagging(c)
        history = _history(c, interval_ms=1_000, max_groups=1)
        sampler = LagHistorySampler(history, clock, ChoreConfig(interval_ms=1_000))
        sampler.run_once()
        _commit(c, "far", "orders", 0, 5)
        _commit(c, "far", "orders", 1, 5)
        clock.advance(1_000)

        sampler.run_once()

        assert [groups for _, groups in _totals(history)] == [[("far", 10)], [("payer", 2)]]


def test_a_process_runs_the_sampler_at_its_interval_unless_it_is_0(settings, database, clock, client) -> None:  # type: ignore[no-untyped-def]
    history = client.app.state.services.lag_history  # type: ignore[attr-defined]
    every_5s = settings.model_copy(update={"console_lag_interval_ms": 5_000})
    off = settings.model_copy(update={"console_lag_interval_ms": 0})

    samplers = [c for c in serve_chores(database, every_5s, clock, None, history) if isinstance(c, LagHistorySampler)]

    assert [c.config.interval_ms for c in samplers] == [5_000]
    assert [c for c in serve_chores(database, off, clock, None, history) if isinstance(c, LagHistorySampler)] == []


def test_an_interval_of_0_keeps_no_sample(lagging) -> None:  # type: ignore[no-untyped-def]
    history = lagging.app.state.services.lag_history  # type: ignore[attr-defined]

    assert history.sample(START_MS) == 0

    assert history.since() == []
    r = lagging.get("/v1/console/lag-history")
    assert r.json() == {"interval_ms": 0, "window_ms": 900_000, "max_groups": 20, "samples": []}


def test_the_window_and_interval_are_the_process_settings(settings, clock) -> None:  # type: ignore[no-untyped-def]
    for c in _client(settings, clock, console_lag_interval_ms=2_000, console_history_window_ms=60_000,
                     console_lag_max_groups=3):
        history = c.app.state.services.lag_history  # type: ignore[attr-defined]
        assert (history.interval_ms, history.window_ms, history.max_groups) == (2_000, 60_000, 3)
        assert history._samples.maxlen == 30  # a window of 60 s, a sample every 2 s


def test_a_window_of_more_samples_than_are_kept_is_refused() -> None:
    with pytest.raises(ValidationError, match="OUTBOX_CONSOLE_LAG_INTERVAL_MS is 10001 samples"):
        Settings(console_lag_interval_ms=100, console_history_window_ms=1_000_100)


# --- GET /v1/console/lag-history ----------------------------------------------------------------


def test_the_endpoint_answers_the_samples_with_their_totals(lagging) -> None:  # type: ignore[no-untyped-def]
    history = lagging.app.state.services.lag_history = _history(lagging, max_groups=3)  # type: ignore[attr-defined]
    history.sample(START_MS)
    history.sample(START_MS + 1_000)

    r = lagging.get("/v1/console/lag-history", params={"since_ms": START_MS})

    assert r.status_code == 200, r.text
    assert r.json() == {"interval_ms": 1_000, "window_ms": 10_000, "max_groups": 3, "samples": [
        {"time_ms": START_MS + 1_000, "group_partitions_left_out": 0,
         "groups": [{"group_id": "far", "total_lag": 10, "complete": True},
                    {"group_id": "payer", "total_lag": 2, "complete": True},
                    {"group_id": "near", "total_lag": 1, "complete": True}]}]}


# --- past OUTBOX_METRICS_MAX_GROUP_PARTITIONS ---------------------------------------------------------
# _make_lagging's group partitions, in the order the reading takes them (committed offsets by
# group id, topic, partition; then the partitions without one): far orders/0 and orders/1, near
# orders/0 and orders/1, payer payroll/0, unknown orders/0; then unknown orders/1.


def _cut_sample(settings: Settings, clock, max_group_partitions: int):  # type: ignore[no-untyped-def]
    for c in _client(settings, clock, metrics_max_group_partitions=max_group_partitions):
        _make_lagging(c)
        history = _history(c)
        history.sample(START_MS)
        (sample,) = history.since()
        return sample


def test_a_group_with_some_partitions_left_out_has_no_total(settings, clock) -> None:  # type: ignore[no-untyped-def]
    sample = _cut_sample(settings, clock, 1)  # far orders/0 only (lag 5 of far's 10)

    assert [(p.group_id, p.total_lag, p.known_lag, p.complete) for p in sample.groups] == [("far", None, 5, False)]
    assert sample.group_partitions_left_out == 6


def test_a_group_with_all_its_partitions_left_out_is_missing_and_the_sample_says_how_many_were(settings, clock) -> None:  # type: ignore[no-untyped-def]
    sample = _cut_sample(settings, clock, 4)  # far's and near's, whole; payer's and unknown's left out

    assert [(p.group_id, p.total_lag, p.complete) for p in sample.groups] == [("far", 10, True), ("near", 1, True)]
    assert sample.group_partitions_left_out == 3


def test_a_group_whose_unknown_partition_was_left_out_has_no_total(settings, clock) -> None:  # type: ignore[no-untyped-def]
    # Read without its partition that has no committed offset, `unknown` would sum to 0 where
    # GET /v1/groups/unknown/lag answers null.
    sample = _cut_sample(settings, clock, 6)

    assert [(p.group_id, p.total_lag, p.complete) for p in sample.groups] == [
        ("far", 10, True), ("payer", 2, True), ("near", 1, True), ("unknown", None, False)]
    assert sample.group_partitions_left_out == 1


def test_the_endpoint_tells_a_cut_group_and_the_partitions_left_out(settings, clock) -> None:  # type: ignore[no-untyped-def]
    for c in _client(settings, clock, metrics_max_group_partitions=1):
        _make_lagging(c)
        history = c.app.state.services.lag_history = _history(c)  # type: ignore[attr-defined]
        history.sample(START_MS)

        r = c.get("/v1/console/lag-history")

        assert r.json()["samples"] == [{"time_ms": START_MS, "group_partitions_left_out": 6, "groups": [
            {"group_id": "far", "total_lag": None, "complete": False}]}]


@pytest.fixture
def secured(settings: Settings, clock):  # type: ignore[no-untyped-def]
    for c in _client(settings, clock, authentication="api_key", super_users="User:admin"):
        security = c.app.state.services.security  # type: ignore[attr-defined]
        admin = {"Authorization": f"Bearer {security.create_api_key('admin', by='test').api_key}"}
        alice = {"Authorization": f"Bearer {security.create_api_key('alice', by='test').api_key}"}
        c.headers.update(admin)
        yield c, admin, alice


@pytest.fixture(autouse=True)
def cheap_scrypt(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("app.services.security._SCRYPT_N", 2)


def _grant(client: TestClient, *acls: tuple[str, str, str]) -> None:
    r = client.post("/v1/acls", json={"acls": [{"principal": "User:alice", "resource_type": rt, "resource_name": name,
                                                "operation": op} for rt, name, op in acls]})
    assert r.status_code == 200, r.text


def _shown(client: TestClient, headers: dict[str, str]) -> list[list[str]]:
    r = client.get("/v1/console/lag-history", headers=headers)
    assert r.status_code == 200, r.text
    return [[g["group_id"] for g in s["groups"]] for s in r.json()["samples"]]


def test_a_principal_is_shown_only_groups_it_may_describe_with_every_topic_they_count(secured) -> None:  # type: ignore[no-untyped-def]
    client, admin, alice = secured
    _make_lagging(client)
    history = client.app.state.services.lag_history = _history(client)  # type: ignore[attr-defined]
    history.sample(START_MS)

    nothing = _shown(client, alice)
    _grant(client, ("group", "far", "describe"), ("group", "payer", "describe"), ("group", "near", "describe"),
           ("topic", "orders", "describe"))
    some = _shown(client, alice)

    assert _shown(client, admin) == [["far", "payer", "near", "unknown"]]
    assert nothing == [[]]
    assert some == [["far", "near"]]  # payer counts payroll, which alice may not describe; unknown: no group ACL


def test_how_many_group_partitions_were_left_out_is_told_only_to_who_may_describe_the_cluster(secured) -> None:  # type: ignore[no-untyped-def]
    client, admin, alice = secured
    _make_lagging(client)
    history = client.app.state.services.lag_history = _history(client)  # type: ignore[attr-defined]
    history.sample(START_MS)

    def left_out(headers: dict[str, str]) -> list[int | None]:
        return [s["group_partitions_left_out"] for s in client.get("/v1/console/lag-history", headers=headers).json()["samples"]]

    refused = left_out(alice)
    _grant(client, ("cluster", "outbox-cluster", "describe"))

    assert (refused, left_out(alice), left_out(admin)) == ([None], [0], [0])


def test_the_lag_history_needs_credentials(secured) -> None:  # type: ignore[no-untyped-def]
    client, _, _ = secured
    r = client.get("/v1/console/lag-history", headers={"Authorization": "Bearer nope"})
    assert (r.status_code, r.json()["error_code"]) == (401, "AUTHENTICATION_FAILED")
