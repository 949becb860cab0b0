"""Readers that wait, in real processes on both databases: a waiting Fetch in one `serve` is
woken by a commit made through another (PostgreSQL's NOTIFY, SQLite's data_version), hundreds
of waiters hold no database connection, SIGTERM ends waits and streams at once, and the
Server-Sent Events stream, read by a browser's EventSource, resumes across a server restart
with nothing skipped and nothing repeated."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import socket
import statistics
import threading
import time
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import Launcher, ServiceProcess

pytestmark = pytest.mark.e2e


def ok(r: httpx.Response) -> Any:
    assert r.status_code < 300, r.text
    return r.json() if r.content else None


def test_a_waiting_fetch_is_woken_by_a_commit_made_through_another_process(launcher: Launcher) -> None:
    waiter, writer = launcher.server(), launcher.server()
    with waiter.client() as a, writer.client() as b:
        ok(a.post("/v1/topics", json={"name": "orders"}))
        ok(a.get("/v1/topics/orders/partitions/0/records"))  # the waiter's process knows the topic id
        latencies = []
        for n in range(6):
            sent: list[float] = []

            def send_later(n: int = n) -> None:
                time.sleep(0.3)
                ok(b.post("/v1/records", json={"batches": [{"topic": "orders", "partition": 0,
                                                            "records": [{"value": n}]}]}))
                sent.append(time.monotonic())

            t = threading.Thread(target=send_later)
            t.start()
            page = ok(a.get("/v1/topics/orders/partitions/0/records", params={"offset": n, "max_wait_ms": 10_000}))
            answered = time.monotonic()
            t.join()
            assert [r["value"] for r in page["records"]] == [n]
            latencies.append(answered - sent[0])
    # A lost notification would leave the waiter to its re-check (app.storage.changes.RECHECK_S,
    # 30 s) and the 10 s wait would end empty. A late one shows here: PostgreSQL's listener
    # once passed notifications on only at the end of its half-second notifies() timeout
    # (a median of 0.18 s; 6 ms now); SQLite's watcher looks every 50 ms.
    print("latencies (s):", [round(x, 4) for x in latencies])
    assert statistics.median(latencies) < 0.1, latencies


def test_hundreds_of_waiting_fetches_hold_no_database_connection(launcher: Launcher) -> None:
    # Ten database connections at most (two, and four times as many more); the 300 waiters are
    # one principal (one address, authentication off), past its default share of the places.
    server = launcher.server(db_pool_size=2, max_waiting_requests_per_principal=300)
    with server.client() as c:
        ok(c.post("/v1/topics", json={"name": "orders"}))
        ok(c.get("/v1/topics/orders/partitions/0/records"))

    async def scenario() -> tuple[list[Any], float, float]:
        limits = httpx.Limits(max_connections=400, max_keepalive_connections=400)
        async with httpx.AsyncClient(base_url=server.url, timeout=60, limits=limits) as http:
            waiting = [asyncio.create_task(http.get("/v1/topics/orders/partitions/0/records",
                                                    params={"max_wait_ms": 30_000}))
                       for _ in range(300)]
            await asyncio.sleep(2.0)
            assert not any(w.done() for w in waiting)
            started = time.monotonic()
            # The service still answers while they wait: a describe and a Send.
            ok(await http.get("/v1/topics/orders"))
            ok(await http.post("/v1/records", json={"batches": [{"topic": "orders", "partition": 0,
                                                                  "records": [{"value": "wake"}]}]}))
            sent = time.monotonic()
            answers = await asyncio.gather(*waiting)
            return answers, sent - started, time.monotonic() - sent

    answers, busy_s, woken_s = asyncio.run(scenario())
    # Every waiter got the record the Send wrote: the describe and the Send were answered
    # while all 300 still waited (a waiter past its 30 s answers empty), which they could not
    # have been had the waiters held the pool's ten connections. How long that took depends
    # on the machine, not on the pool.
    print(f"describe and Send answered in {busy_s:.2f} s beside 300 waiters; all woken {woken_s:.2f} s after")
    assert [[r["value"] for r in a.json()["records"]] for a in answers] == [["wake"]] * 300


def test_sigterm_ends_waiting_fetches_and_streams_at_once(launcher: Launcher) -> None:
    server = launcher.server()
    with server.client() as c:
        ok(c.post("/v1/topics", json={"name": "orders"}))
    results: dict[str, Any] = {}

    def wait_fetch() -> None:
        with server.client() as c:
            r = c.get("/v1/topics/orders/partitions/0/records", params={"max_wait_ms": 25_000})
            results["fetch"] = (r.status_code, r.json()["records"], time.monotonic())

    def stream() -> None:
        lines = []
        with httpx.stream("GET", f"{server.url}/v1/topics/orders/partitions/0/stream", timeout=60) as r:
            for line in r.iter_lines():
                lines.append(line)
        results["stream"] = (r.status_code, lines, time.monotonic())

    threads = [threading.Thread(target=wait_fetch), threading.Thread(target=stream)]
    for t in threads:
        t.start()
    time.sleep(1.5)
    signalled = time.monotonic()
    os.kill(server.pid, signal.SIGTERM)
    for t in threads:
        t.join(timeout=20)
    server.proc.wait(timeout=20)
    assert results["fetch"][:2] == (200, [])
    assert results["stream"][:2] == (200, ["retry: 1000", ""])
    assert max(results["fetch"][2], results["stream"][2]) - signalled < 3.0


# --- the stream in a browser, across a restart ----------------------------------------------------


def _restart(launcher: Launcher, old: ServiceProcess) -> ServiceProcess:
    """The same port, after the old process is gone: what the browser reconnects to."""
    old.kill9()
    p = ServiceProcess(f"serve:{old.port}", ["serve", "--port", str(old.port)], launcher.env(),
                       launcher.backend.tmp / f"restarted-{old.port}.log", port=old.port)
    launcher.processes.append(p)
    p.wait_ready()
    return p


@pytest.mark.browser
def test_an_eventsource_resumes_across_a_restart_with_nothing_skipped_or_repeated(launcher: Launcher) -> None:
    from tests.conftest import unavailable
    from tests.e2e.test_docs_browser import CHROMIUM, CHROMIUM_ARGS

    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        unavailable("the playwright package is not installed: pip install -e '.[test]'")
    if not CHROMIUM.exists():
        unavailable(f"no Chromium at {CHROMIUM}: apt-get install chromium")
    server = launcher.server()
    expected: list[Any] = []

    def produce(c: httpx.Client, tag: str) -> None:
        # A plain record, a committed transaction of two, an aborted one, a plain record.
        ok(c.post("/v1/records", json={"batches": [{"topic": "orders", "partition": 0,
                                                     "records": [{"value": f"{tag}-plain-1"}]}]}))
        for tid, end in ((f"{tag}-c", "commit"), (f"{tag}-a", "abort")):
            p = ok(c.post("/v1/producers", json={"transactional_id": tid}))
            ident = {"producer_id": p["producer_id"], "producer_epoch": p["producer_epoch"]}
            ok(c.post(f"/v1/transactions/{tid}/begin", json=ident))
            ok(c.post("/v1/records", json={**ident, "transactional_id": tid, "batches": [
                {"topic": "orders", "partition": 0, "base_sequence": 0,
                 "records": [{"value": f"{tid}-1"}, {"value": f"{tid}-2"}]}]}))
            ok(c.post(f"/v1/transactions/{tid}/{end}", json=ident))
        ok(c.post("/v1/records", json={"batches": [{"topic": "orders", "partition": 0,
                                                     "records": [{"value": f"{tag}-plain-2"}]}]}))
        expected.extend([f"{tag}-plain-1", f"{tag}-c-1", f"{tag}-c-2", f"{tag}-plain-2"])

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page()
            with server.client() as c:
                ok(c.post("/v1/topics", json={"name": "orders"}))
                produce(c, "before")
            page.goto(f"{server.url}/console")  # the service's own origin: EventSource needs no CORS
            page.evaluate("""() => {
                window.got = []; window.ids = []; window.opened = 0;
                const source = new EventSource("v1/topics/orders/partitions/0/stream");
                source.onopen = () => { window.opened += 1; };
                source.addEventListener("records", e => {
                    window.ids.push(e.lastEventId);
                    for (const r of JSON.parse(e.data).records) window.got.push(r.value);
                });
            }""")

            def received(n: int) -> list[Any]:
                deadline = time.monotonic() + 30
                while len(got := page.evaluate("window.got")) < n:
                    assert time.monotonic() < deadline, got
                    time.sleep(0.1)
                return got

            received(4)
            server = _restart(launcher, server)
            with server.client() as c:
                produce(c, "after")
            got = received(8)
            time.sleep(1.0)  # anything repeated would have arrived by now
            got = page.evaluate("window.got")
            ids = page.evaluate("window.ids")
            opened = page.evaluate("window.opened")
        finally:
            browser.close()
    assert got == expected
    assert opened == 2  # it reconnected, with Last-Event-ID
    # One event per commit point, its id the position after it. Offsets: plain 0; the
    # committed transaction's records 1-2 and COMMIT marker 3 (id 4); the aborted one's 4-5 and
    # ABORT 6 (no event); plain 7 (id 8). After the restart the same from offset 8.
    assert [int(i) for i in ids] == [1, 4, 8, 9, 12, 16]


# --- the bounds on waiting requests, with real connections ------------------------------------------


def waiting(c: httpx.Client, kind: str) -> float:
    text = c.get("/metrics").text
    found = re.search(rf'^outbox_waiting_requests\{{kind="{kind}"\}} (\S+)$', text, re.M)
    return float(found.group(1)) if found else 0.0


def until_waiting(c: httpx.Client, kind: str, n: float) -> None:
    deadline = time.monotonic() + 10
    while waiting(c, kind) != n:
        assert time.monotonic() < deadline, waiting(c, kind)
        time.sleep(0.05)


def test_a_long_poll_whose_client_disconnects_gives_its_place_back_at_once(launcher: Launcher) -> None:
    server = launcher.server(max_waiting_requests=1, max_waiting_requests_per_principal=1)
    with server.client() as c:
        ok(c.post("/v1/topics", json={"name": "orders"}))
        gone = socket.create_connection(("127.0.0.1", server.port))
        gone.sendall(b"GET /v1/topics/orders/partitions/0/records?max_wait_ms=30000 HTTP/1.1\r\n"
                     b"Host: outbox\r\n\r\n")
        until_waiting(c, "fetch", 1)
        held = c.get("/v1/topics/orders/partitions/0/records", params={"max_wait_ms": 30_000})
        gone.close()
        closed = time.monotonic()
        until_waiting(c, "fetch", 0)
        freed_s = time.monotonic() - closed
        after = c.get("/v1/topics/orders/partitions/0/records", params={"max_wait_ms": 300})
    assert (held.status_code, held.json()["error_code"]) == (429, "THROTTLING_QUOTA_EXCEEDED")
    assert freed_s < 3.0  # not at the end of its 30 s wait
    assert (after.status_code, after.json()["records"]) == (200, [])


def test_a_stream_holds_a_place_for_its_whole_life_and_gives_it_back_when_its_client_goes(launcher: Launcher) -> None:
    server = launcher.server(max_waiting_requests=1, max_waiting_requests_per_principal=1)
    with server.client() as c:
        ok(c.post("/v1/topics", json={"name": "orders"}))
        with httpx.stream("GET", f"{server.url}/v1/topics/orders/partitions/0/stream", timeout=30) as r:
            lines = r.iter_lines()
            assert next(lines) == "retry: 1000"
            until_waiting(c, "stream", 1)
            ok(c.post("/v1/records", json={"batches": [{"topic": "orders", "partition": 0,
                                                         "records": [{"value": 1}]}]}))
            assert (next(lines), next(lines)) == ("", "id: 1")
            held = c.get("/v1/topics/orders/partitions/0/stream")  # still its place, between events
        closed = time.monotonic()
        until_waiting(c, "stream", 0)
        freed_s = time.monotonic() - closed
    assert (held.status_code, held.json()["error_code"]) == (429, "THROTTLING_QUOTA_EXCEEDED")
    assert freed_s < 3.0


def test_with_authentication_off_each_client_address_counts_as_a_principal(launcher: Launcher) -> None:
    server = launcher.server(max_waiting_requests=10, max_waiting_requests_per_principal=1)
    url = "/v1/topics/orders/partitions/0/records"

    def client_from(address: str) -> httpx.Client:
        return httpx.Client(base_url=server.url, timeout=60, transport=httpx.HTTPTransport(local_address=address))

    answers: dict[str, httpx.Response] = {}
    with client_from("127.0.0.1") as one, client_from("127.0.0.2") as two:
        ok(one.post("/v1/topics", json={"name": "orders"}))
        first = threading.Thread(target=lambda: answers.update(one=one.get(url, params={"max_wait_ms": 30_000})))
        first.start()
        until_waiting(two, "fetch", 1)
        second = threading.Thread(target=lambda: answers.update(two=two.get(url, params={"max_wait_ms": 30_000})))
        second.start()
        until_waiting(two, "fetch", 2)  # another address: another principal, with a place of its own
        with client_from("127.0.0.1") as again:
            refused = again.get(url, params={"max_wait_ms": 30_000})
            ok(again.post("/v1/records", json={"batches": [{"topic": "orders", "partition": 0,
                                                             "records": [{"value": "wake"}]}]}))
        first.join(timeout=30)
        second.join(timeout=30)
    assert (refused.status_code, refused.json()["details"]) == (429, {"bound": "principal", "limit": 1})
    assert refused.json()["message"].startswith("User:ANONYMOUS from 127.0.0.1 already has 1 requests waiting")
    assert [answers[k].status_code for k in ("one", "two")] == [200, 200]


def test_a_stream_whose_topic_is_deleted_ends_with_an_error_event_at_once(launcher: Launcher) -> None:
    server = launcher.server()
    with server.client() as c:
        ok(c.post("/v1/topics", json={"name": "orders"}))
        with httpx.stream("GET", f"{server.url}/v1/topics/orders/partitions/0/stream", timeout=30) as r:
            lines = r.iter_lines()
            assert next(lines) == "retry: 1000"
            until_waiting(c, "stream", 1)
            assert c.delete("/v1/topics/orders").status_code == 204
            deleted = time.monotonic()
            rest = list(lines)  # the stream ends: the server closes it
        ended_s = time.monotonic() - deleted
    assert rest[:2] == ["", "event: error"]
    data = rest[2].removeprefix("data: ")
    assert {k: v for k, v in json.loads(data).items() if k != "message"} == {
        "error_code": "UNKNOWN_TOPIC_OR_PARTITION", "retriable": False}
    assert rest[3:] == [""]
    assert ended_s < 10.0  # woken by the deletion, not by a heartbeat or the client's timeout


# --- a stream's reader checked again while it reads ------------------------------------------------


def _alices_stream(launcher: Launcher) -> tuple[ServiceProcess, dict[str, str], dict[str, str]]:
    """A server with authentication, topic `orders`, and alice allowed to read it: the server,
    admin's and alice's headers."""
    server = launcher.server(authentication="api_key", super_users="User:admin")
    admin, alice = ({"Authorization": f"Bearer {json.loads(launcher.cli('principals', 'create', name))['api_key']}"}
                    for name in ("admin", "alice"))
    with server.client(headers=admin) as c:
        ok(c.post("/v1/topics", json={"name": "orders"}))
        ok(c.post("/v1/acls", json={"acls": [{"principal": "User:alice", "resource_type": "topic",
                                              "resource_name": "orders", "operation": "read"}]}))
    return server, admin, alice


def _read_until_it_ends(server: ServiceProcess, admin: dict[str, str], alice: dict[str, str],
                        take_away: Any) -> list[str]:
    """alice's stream: one record sent while she may read it, then `take_away(admin's client)`,
    then another record; the lines of the stream after its first event."""
    with server.client(headers=admin) as c, \
            httpx.stream("GET", f"{server.url}/v1/topics/orders/partitions/0/stream", headers=alice, timeout=30) as r:
        lines = r.iter_lines()
        assert (r.status_code, next(lines)) == (200, "retry: 1000")
        send = {"batches": [{"topic": "orders", "partition": 0, "records": [{"value": "before"}]}]}
        ok(c.post("/v1/records", json=send))
        assert [next(lines) for _ in range(4)][:3] == ["", "id: 1", "event: records"]
        take_away(c)
        ok(c.post("/v1/records", json={"batches": [{"topic": "orders", "partition": 0,
                                                    "records": [{"value": "after"}]}]}))
        event = [next(lines) for _ in range(4)]
        assert event[1] != "id: 2", event  # "after" delivered: the stream went on
        return event + list(lines)  # the stream ends: the server closes it


def _error_event(rest: list[str]) -> dict[str, Any]:
    assert rest[:2] == ["", "event: error"] and rest[3:] == [""], rest
    return {k: v for k, v in json.loads(rest[2].removeprefix("data: ")).items() if k != "message"}


def test_a_stream_ends_with_an_error_event_once_its_readers_acl_is_removed(launcher: Launcher) -> None:
    server, admin, alice = _alices_stream(launcher)

    rest = _read_until_it_ends(server, admin, alice, lambda c: ok(c.delete(
        "/v1/acls", params={"principal": "User:alice", "resource_type": "topic", "resource_name": "orders"})))

    assert _error_event(rest) == {"error_code": "TOPIC_AUTHORIZATION_FAILED", "retriable": False}


def test_a_stream_ends_with_an_error_event_once_its_api_key_is_revoked(launcher: Launcher) -> None:
    server, admin, alice = _alices_stream(launcher)

    def revoke(c: httpx.Client) -> None:
        key_id = alice["Authorization"].removeprefix("Bearer outbox_").split("_")[0]
        ok(c.delete(f"/v1/principals/User:alice/api-keys/{key_id}"))

    rest = _read_until_it_ends(server, admin, alice, revoke)

    assert _error_event(rest) == {"error_code": "AUTHENTICATION_FAILED", "retriable": False}
