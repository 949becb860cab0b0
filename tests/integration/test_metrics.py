"""GET /metrics: what each operation adds to the counters, and the gauges read from the database.

The counters belong to the process (the tests' process here, shared by every app the suite
builds), so each test compares a counter before and after what it does.
"""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from app.services.group_expiry import EMPTY_GROUP_RETENTION_MS
from app.storage.engine import after_commit
from app.worker.chore import ChoreConfig
from app.worker.coordinator import CoordinatorWorker
from app.worker.group_expiry import GroupExpiryWorker
from tests.helpers import batch, begin, create_topic, ident, init_producer, send


def scrape(client) -> dict[tuple[str, frozenset], float]:  # type: ignore[no-untyped-def]
    r = client.get("/metrics")
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/plain")
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(r.text)
        for s in family.samples
    }


def value(scraped: dict, name: str, **labels: str) -> float:
    return scraped.get((name, frozenset(labels.items())), 0.0)


def delta(before: dict, after: dict, name: str, **labels: str) -> float:
    return value(after, name, **labels) - value(before, name, **labels)


def test_sends_count_the_records_they_wrote_by_kind_of_producer(client) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "orders", 2)
    idem = init_producer(client)
    before = scrape(client)
    assert send(client, [batch("orders", 0, [1, 2, 3]), batch("orders", 1, [4])]).status_code == 200
    assert send(client, [batch("orders", 0, [5, 6], base_sequence=0)], idem).status_code == 200
    after = scrape(client)
    assert delta(before, after, "outbox_records_appended_total", producer="plain") == 4
    assert delta(before, after, "outbox_records_appended_total", producer="idempotent") == 2
    assert delta(before, after, "outbox_records_appended_total", producer="transactional") == 0


def test_a_retried_batch_counts_as_a_duplicate_and_writes_nothing(client) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "orders")
    idem = init_producer(client)
    assert send(client, [batch("orders", 0, [1, 2], base_sequence=0)], idem).status_code == 200
    before = scrape(client)
    r = send(client, [batch("orders", 0, [1, 2], base_sequence=0)], idem)
    assert r.json()["results"][0]["duplicate"] is True
    after = scrape(client)
    assert delta(before, after, "outbox_duplicate_batches_total") == 1
    assert delta(before, after, "outbox_records_appended_total", producer="idempotent") == 0


def test_each_result_fence_reason_and_cleaner_reason_has_a_series_before_it_first_happens(client) -> None:  # type: ignore[no-untyped-def]
    labelled = {(name, tuple(v for _, v in labels)) for name, labels in scrape(client)}

    expected = {("outbox_transactions_completed_total", (r,)) for r in ("commit", "abort")} | {
        ("outbox_transactions_fenced_total", (r,)) for r in ("init_producer_id", "timeout", "admin")} | {
        ("outbox_cleaner_records_deleted_total", (r,))
        for r in ("below_log_start", "retention", "compaction", "topics_purged")}
    assert expected <= labelled


def test_commit_and_abort_count_completed_transactions_by_result(client) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "orders")
    p = init_producer(client, "t")
    before = scrape(client)
    for seq, end in enumerate(("commit", "abort")):
        begin(client, "t", p)
        assert send(client, [batch("orders", 0, [end], base_sequence=seq)], p, "t").status_code == 200
        assert client.post(f"/v1/transactions/t/{end}", json=ident(p)).status_code == 200
    # A retry of the abort is answered as the first time and completes nothing more.
    assert client.post("/v1/transactions/t/abort", json=ident(p)).status_code == 200
    after = scrape(client)
    assert delta(before, after, "outbox_transactions_completed_total", result="commit") == 1
    assert delta(before, after, "outbox_transactions_completed_total", result="abort") == 1
    assert delta(before, after, "outbox_records_appended_total", producer="transactional") == 2


def test_a_new_instance_fencing_an_open_transaction_counts_as_a_fence(client) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "orders")
    p = init_producer(client, "t")
    begin(client, "t", p)
    assert send(client, [batch("orders", 0, [1], base_sequence=0)], p, "t").status_code == 200
    before = scrape(client)
    init_producer(client, "t")
    after = scrape(client)
    assert delta(before, after, "outbox_transactions_fenced_total", reason="init_producer_id") == 1
    assert delta(before, after, "outbox_transactions_completed_total", result="abort") == 1


def test_the_coordinator_counts_its_pass_and_the_timeout_it_aborts(client, services, clock) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "orders")
    p = init_producer(client, "t", transaction_timeout_ms=1_000)
    begin(client, "t", p)
    worker = CoordinatorWorker(services.coordinator, clock, ChoreConfig(interval_ms=200))
    before = scrape(client)
    clock.advance(1_001)
    assert worker.run_once().timed_out == 1
    after = scrape(client)
    assert delta(before, after, "outbox_transactions_fenced_total", reason="timeout") == 1
    assert delta(before, after, "outbox_coordinator_passes_total", outcome="ok") == 1


def test_an_operator_abort_counts_as_an_admin_fence(client) -> None:  # type: ignore[no-untyped-def]
    begin(client, "t", init_producer(client, "t"))
    before = scrape(client)
    assert client.post("/v1/admin/transactions/t/abort").status_code == 200
    after = scrape(client)
    assert delta(before, after, "outbox_transactions_fenced_total", reason="admin") == 1
    assert delta(before, after, "outbox_transactions_completed_total", result="abort") == 1


def test_the_coordinator_counts_the_transactional_ids_it_expires(client, services, clock) -> None:  # type: ignore[no-untyped-def]
    init_producer(client, "idle")
    worker = CoordinatorWorker(services.coordinator, clock, ChoreConfig(interval_ms=200))
    before = scrape(client)
    clock.advance(services.settings.transactional_id_expiration_ms + 1)
    assert worker.run_once().expired_transactional_ids == 1
    after = scrape(client)
    assert delta(before, after, "outbox_transactional_ids_expired_total") == 1


def test_group_expiry_counts_its_pass_and_the_members_it_expires(client, services, clock) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "orders")
    r = client.post("/v1/groups/g/members", json={"topics": ["orders"], "session_timeout_ms": 10_000})
    assert r.status_code == 200, r.text
    worker = GroupExpiryWorker(services.group_expiry, clock, ChoreConfig(interval_ms=200))
    before = scrape(client)
    clock.advance(10_001)
    assert worker.run_once().expired_members == 1
    after = scrape(client)
    assert delta(before, after, "outbox_group_members_expired_total") == 1
    assert delta(before, after, "outbox_group_expiry_passes_total", outcome="ok") == 1


def test_group_expiry_counts_the_empty_groups_it_deletes(client, services, clock) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "orders")
    for group in ("a", "b"):
        r = client.post(f"/v1/groups/{group}/members", json={"topics": ["orders"], "session_timeout_ms": 10_000})
        assert client.delete(f"/v1/groups/{group}/members/{r.json()['member_id']}").status_code == 204
    worker = GroupExpiryWorker(services.group_expiry, clock, ChoreConfig(interval_ms=200))
    before = scrape(client)
    clock.advance(EMPTY_GROUP_RETENTION_MS + 1)
    assert worker.run_once().deleted_groups == 2
    assert delta(before, scrape(client), "outbox_groups_deleted_empty_total") == 2


def test_a_refused_send_counts_no_records(client) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "orders")
    before = scrape(client)
    # The second batch names a partition that does not exist: the whole Send is refused.
    assert send(client, [batch("orders", 0, [1, 2]), batch("orders", 7, [3])]).status_code == 404
    after = scrape(client)
    assert delta(before, after, "outbox_records_appended_total", producer="plain") == 0
    assert delta(before, after, "outbox_errors_total", error_code="UNKNOWN_TOPIC_OR_PARTITION") == 1


def test_refusals_are_counted_by_error_code(client) -> None:  # type: ignore[no-untyped-def]
    before = scrape(client)
    assert client.get("/v1/topics/nope").status_code == 404
    assert client.post("/v1/topics", json={"name": ""}).status_code == 422
    after = scrape(client)
    assert delta(before, after, "outbox_errors_total", error_code="UNKNOWN_TOPIC_OR_PARTITION") == 1
    assert delta(before, after, "outbox_errors_total", error_code="INVALID_REQUEST") == 1


def test_requests_are_labelled_by_route_template_not_by_path(client) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "orders")
    before = scrape(client)
    assert client.get("/v1/topics/orders").status_code == 200
    assert client.get("/v1/topics/nope").status_code == 404
    assert client.get("/no/such/path").status_code == 404
    after = scrape(client)
    route = "/v1/topics/{topic}"
    assert delta(before, after, "outbox_http_requests_total", method="GET", route=route, status="200") == 1
    assert delta(before, after, "outbox_http_requests_total", method="GET", route=route, status="404") == 1
    assert delta(before, after, "outbox_http_requests_total", method="GET", route="<unmatched>", status="404") == 1
    assert delta(before, after, "outbox_http_request_duration_seconds_count", method="GET", route=route) == 2
    assert not any(name == "outbox_http_requests_total" and ("route", "/v1/topics/orders") in labels
                   for name, labels in after)


def test_methods_outside_the_usual_set_share_one_label(client) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "orders")
    before = scrape(client)
    assert client.request("PROPFIND", "/v1/topics/orders").status_code == 405
    after = scrape(client)
    route = "/v1/topics/{topic}"
    assert delta(before, after, "outbox_http_requests_total", method="other", route=route, status="405") == 1
    assert not any(("method", "PROPFIND") in labels for _, labels in after)


def test_a_head_is_counted_as_head_on_its_route(client) -> None:  # type: ignore[no-untyped-def]
    before = scrape(client)
    assert client.head("/v1/topics").status_code == 200
    after = scrape(client)

    assert delta(before, after, "outbox_http_requests_total", method="HEAD", route="/v1/topics", status="200") == 1


def test_the_coordinator_metrics_port_answers_head(settings) -> None:  # type: ignore[no-untyped-def]
    from fastapi.testclient import TestClient

    from app.api.coordinator_metrics import create_metrics_app

    with TestClient(create_metrics_app(settings, None)) as c:
        r = c.head("/metrics")

    assert (r.status_code, r.headers["content-type"].split(";")[0], r.content) == (200, "text/plain", b"")


def test_the_coordinator_metrics_port_allows_get_and_head(settings) -> None:  # type: ignore[no-untyped-def]
    from fastapi.testclient import TestClient

    from app.api.coordinator_metrics import create_metrics_app

    with TestClient(create_metrics_app(settings, None)) as c:
        r = c.post("/metrics")

    assert (r.status_code, r.headers["allow"], r.json()["error_code"]) == (405, "GET, HEAD", "METHOD_NOT_ALLOWED")


def test_a_scrape_answers_with_database_up_0_when_the_database_is_down() -> None:
    from fastapi.testclient import TestClient

    from app.api.app import create_app
    from app.settings import Settings

    down = Settings(database_url="postgresql+psycopg://postgres@127.0.0.1:1/none",
                    run_coordinator=False, auto_migrate=False)
    with TestClient(create_app(down)) as c:
        scraped = scrape(c)
    assert value(scraped, "outbox_database_up") == 0
    assert ("outbox_transactions", frozenset({("state", "Ongoing")})) not in scraped


def test_transaction_states_are_every_state_a_transaction_is_stored_in(client) -> None:  # type: ignore[no-untyped-def]
    # PrepareEpochFence is never stored (a fence and its abort are one write): a series of it
    # would be 0 for ever.
    exported = {dict(labels)["state"] for name, labels in scrape(client) if name == "outbox_transactions"}
    assert exported == {"Empty", "Ongoing", "Prepared", "PrepareCommit", "PrepareAbort", "CompleteCommit",
                        "CompleteAbort", "Dead"}


def test_transaction_states_and_hanging_transactions_are_read_from_the_database(client, clock) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "orders")
    for tid in ("a", "b", "c"):
        init_producer(client, tid)
    begin(client, "a", init_producer(client, "a"))
    begin(client, "b", init_producer(client, "b"))
    scraped = scrape(client)
    assert value(scraped, "outbox_database_up") == 1
    assert value(scraped, "outbox_transactions", state="Ongoing") == 2
    assert value(scraped, "outbox_transactions", state="Empty") == 1
    assert value(scraped, "outbox_transactions", state="PrepareCommit") == 0
    assert value(scraped, "outbox_transactions_hanging") == 0
    clock.advance(900_001)  # past the maximum transaction timeout, with no worker running
    assert value(scrape(client), "outbox_transactions_hanging") == 2


def test_after_commit_effects_run_only_once_the_write_has_committed(database) -> None:  # type: ignore[no-untyped-def]
    ran: list[str] = []
    with pytest.raises(RuntimeError), database.write() as conn:
        after_commit(conn, lambda: ran.append("rolled back"))
        raise RuntimeError("the write fails")
    with database.write() as conn:
        after_commit(conn, lambda: ran.append("committed"))
        assert ran == []
    assert ran == ["committed"]
