"""The operator console (/console) in a real browser, against a real `outbox serve`.

Debian's Chromium, driven by Playwright, follows what an operator does: sees a topic it just
created, a transaction open and then committed, a consumer group's lag (in records) fall to
zero when the transaction that carries its offsets commits, browses a partition's records with
their states, and aborts a hanging transaction from the page. Pages with bad input show a
readable error. With authentication on, the console asks for an API key and shows only what
that principal may describe, and to one without describe on the cluster the overview's counts
and the topic list say they hold only that. Every request the pages make goes to the server itself, and no
page breaks its Content-Security-Policy. Screenshots of each page are saved (OUTBOX_SCREENSHOT_DIR,
or .artifacts/screenshots) and their paths printed.
"""

from __future__ import annotations

import json
import math
import re
import time
from datetime import datetime
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from tests.e2e.conftest import Launcher, ServiceProcess, provisioned
from tests.e2e.test_docs_browser import RECORD_CSP_VIOLATIONS, browser, screenshot_dir  # noqa: F401 - a fixture

pytestmark = [pytest.mark.e2e, pytest.mark.browser]

WAIT_MS = 20_000
# Short timeouts, and no coordinator worker: a transaction left open becomes hanging (open past
# the maximum timeout, nobody aborting it) within seconds.
SETTINGS = {"run_coordinator": False, "max_transaction_timeout_ms": 1500, "default_transaction_timeout_ms": 1000,
            "transactional_id_expiration_ms": 600_000, "console_history_interval_ms": 500,
            "console_history_window_ms": 120_000}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceProcess]:
    with provisioned("sqlite", tmp_path_factory.mktemp("console")) as backend:
        launcher = Launcher(backend)
        try:
            yield launcher.server(**SETTINGS)
        finally:
            launcher.close()


class Console:
    """A page of the console, the requests it made, its errors and CSP refusals."""

    def __init__(self, browser: Any, base: str, capsys: pytest.CaptureFixture[str], **context: Any) -> None:
        self.context = browser.new_context(viewport={"width": 1280, "height": 900}, **context)
        self.page = self.context.new_page()
        self.base = base
        self.capsys = capsys
        self.requests: list[str] = []
        self.errors: list[str] = []
        self.refused: list[str] = []  # "404 <url>": the API's refusals of the page's own requests
        self.page.on("request", lambda r: self.requests.append(r.url))
        self.page.on("response", lambda r: self.refused.append(f"{r.status} {r.url}") if r.status >= 400 else None)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.add_init_script(RECORD_CSP_VIOLATIONS)

    def open(self, hash_: str) -> None:
        self.page.goto(f"{self.base}/console{hash_}", wait_until="networkidle")

    def text(self, selector: str = "main") -> str:
        return self.page.locator(selector).inner_text()

    def wait_text(self, text: str, selector: str = "main") -> None:
        self.page.locator(selector).get_by_text(text).first.wait_for(timeout=WAIT_MS)

    def screenshot(self, name: str, full_page: bool = True) -> None:
        path = screenshot_dir() / name
        path.parent.mkdir(parents=True, exist_ok=True)
        self.page.screenshot(path=str(path), full_page=full_page)
        with self.capsys.disabled():
            print(f"\nscreenshot: {path}")

    def check_clean(self, port: int) -> None:
        assert self.errors == []
        assert self.page.evaluate("window.cspViolations") == []
        others = [u for u in self.requests if urlsplit(u).hostname != "127.0.0.1" or urlsplit(u).port != port]
        assert others == []

    def close(self) -> None:
        self.context.close()


@pytest.fixture
def console(browser: Any, server: ServiceProcess, capsys: pytest.CaptureFixture[str]) -> Iterator[Console]:
    c = Console(browser, server.url, capsys)
    try:
        yield c
        c.check_clean(server.port)  # type: ignore[arg-type]
    finally:
        c.close()


def ok(response: httpx.Response) -> Any:
    assert response.status_code < 300, response.text
    return response.json() if response.content else None


def transaction(api: httpx.Client, tid: str, topic: str, offsets: dict | None = None) -> dict:
    p = ok(api.post("/v1/producers", json={"transactional_id": tid}))
    ident = {"producer_id": p["producer_id"], "producer_epoch": p["producer_epoch"]}
    ok(api.post(f"/v1/transactions/{tid}/begin", json=ident))
    ok(api.post("/v1/records", json={**ident, "transactional_id": tid, "batches": [
        {"topic": topic, "partition": 0, "base_sequence": 0, "records": [{"key": "k", "value": {"from": tid}}]}]}))
    if offsets:
        ok(api.post(f"/v1/transactions/{tid}/offsets", json={**ident, **offsets}))
    return ident


def test_a_topic_a_transaction_and_a_groups_lag_falling_to_zero(console: Console, server: ServiceProcess) -> None:
    from playwright.sync_api import expect

    with server.client() as api:
        ok(api.post("/v1/topics", json={"name": "orders", "partitions": 2}))
        ok(api.post("/v1/topics", json={"name": "income", "partitions": 1}))
        console.open("#/topics")
        console.wait_text("orders")
        assert "orders\t2\t0\t0 B\tno group\tdelete" in console.text()

        ok(api.post("/v1/records", json={"batches": [{"topic": "orders", "partition": 0, "records": [
            {"key": f"order-{i}", "value": {"price": i}} for i in range(3)]}]}))
        ok(api.post("/v1/groups/pizza-income/offsets", json={"offsets": [
            {"topic": "orders", "partition": 0, "offset": 0}, {"topic": "orders", "partition": 1, "offset": 0}]}))
        ident = transaction(api, "copier", "income", {"group_id": "pizza-income", "offsets": [
            {"topic": "orders", "partition": 0, "offset": 3}]})

        console.open("#/transactions")
        console.wait_text("copier")
        assert "Ongoing" in console.text()
        console.screenshot("console-transactions.png")

        console.refused.clear()
        console.open("#/groups/pizza-income")
        expect(console.page.locator("#total-lag")).to_have_text("3", timeout=WAIT_MS)
        assert "offsets staged" in console.text()
        # A group of offsets only is described (no generation, no members), not refused.
        expect(console.page.locator("#members")).to_have_text(
            "No members: its offsets are committed by transactions or without joining.", timeout=WAIT_MS)
        assert console.refused == []
        ok(api.post("/v1/transactions/copier/commit", json=ident))
        # The page polls: the lag falls to zero without a reload.
        expect(console.page.locator("#total-lag")).to_have_text("0", timeout=WAIT_MS)
        time.sleep(2.5)  # one more point on the chart
        console.screenshot("console-group-lag.png")

        console.open("#/topics/income/0?isolation=read_uncommitted&offset=0")
        console.page.locator("#records").wait_for(timeout=WAIT_MS)  # the same document: the group's page is gone
        row = console.page.locator("#records tbody tr").first.inner_text().split("\t")
        assert row[:4] == ["0", "1", "committed", "k"]  # offset 0, exposed at its COMMIT marker 1

        console.open("#/transactions?show=all")
        console.wait_text("CompleteCommit", "main tbody")
        console.open("#/transactions")
        console.wait_text("No transaction here.")


def test_a_bytes_topics_records_show_their_bytes_in_base64_named(console: Console, server: ServiceProcess) -> None:
    with server.client() as api:
        ok(api.post("/v1/topics", json={"name": "raw", "config": {"value_format": "bytes"}}))
        ok(api.post("/v1/records", json={"batches": [{"topic": "raw", "partition": 0, "records": [
            {"key": {"type": "BINARY", "data": "/wA="}, "value": {"type": "BINARY", "data": "AP8="},
             "headers": [{"name": "h", "value": "AQ=="}, {"name": "h", "value": None}]},
            {"key": "k"}]}]}))

        console.open("#/topics/raw/0?isolation=read_uncommitted&offset=0")
        console.wait_text("committed")

        rows = [r.split("\t")[:6] for r in console.page.locator("tbody tr").all_inner_texts()]
        assert rows == [["0", "0", "committed", "base64:/wA=", "base64:AP8=", "h=base64:AQ== h=null"],
                        ["1", "1", "committed", "base64:aw==", "null", "–"]]
        assert "shown in base64" in console.text()


def test_a_group_that_never_committed_shows_its_lag_as_unknown_not_zero(console: Console,
                                                                        server: ServiceProcess) -> None:
    from playwright.sync_api import expect

    with server.client() as api:
        ok(api.post("/v1/topics", json={"name": "deliveries", "partitions": 1}))
        ok(api.post("/v1/records", json={"batches": [{"topic": "deliveries", "partition": 0, "records": [
            {"key": "d", "value": 1}]}]}))
        ok(api.post("/v1/groups/new-dispatch/members", json={"topics": ["deliveries"]}))
        console.open("#/groups/new-dispatch")
        expect(console.page.locator("#total-lag")).to_have_text("unknown", timeout=WAIT_MS)
        assert "total lag unknown: the group has committed no offset" in console.text()
        row = console.page.locator("#lag-table tbody tr").first.inner_text().split("\t")
        assert row[:6] == ["deliveries", "0", "–", "1", "1", "unknown"]
        console.open("#/groups")  # the same document: wait for the list to replace the group's page
        expect(console.page.locator("main h1")).to_have_text("Consumer groups", timeout=WAIT_MS)
        assert "new-dispatch\t1\t1\tunknown" in console.text()


def test_a_hanging_transaction_is_aborted_from_the_page(console: Console, server: ServiceProcess) -> None:
    with server.client() as api:
        ok(api.post("/v1/topics", json={"name": "payments"}))
        transaction(api, "stuck", "payments")
        deadline = time.monotonic() + 10
        while not ok(api.get("/v1/transactions", params={"hanging": "true"}))["transactions"]:
            assert time.monotonic() < deadline, "the transaction never became hanging"
            time.sleep(0.2)

        console.open("")
        console.wait_text("stuck")  # the overview lists hanging transactions
        console.screenshot("console-overview-hanging.png")
        console.page.get_by_role("link", name="stuck").click()
        console.wait_text("Transaction stuck")
        console.screenshot("console-hanging-transaction.png")
        messages: list[str] = []

        def accept(dialog: Any) -> None:
            messages.append(dialog.message)
            dialog.accept()

        console.page.once("dialog", accept)
        console.page.locator("#abort").click()
        console.wait_text("Aborted: stuck is CompleteAbort.", "#banner")
        assert messages and messages[0].startswith("Abort transaction")
        console.wait_text("CompleteAbort")
        assert ok(api.get("/v1/transactions/stuck"))["state"] == "CompleteAbort"
        assert ok(api.get("/v1/topics/payments/partitions/0/records"))["records"] == []


def time_axis(console: Console, chart: str) -> list[str]:
    """The tick labels of a chart's time axis, as its accessible label names them."""
    label = console.page.locator(chart).get_attribute("aria-label") or ""
    return label.split("time axis: ", 1)[1].split(", ")


def assert_times_of_today(ticks: list[str], first: float, last: float) -> None:
    """Ticks are times of day (HH:MM or HH:MM:SS, no date), in order, between two moments
    (seconds since the epoch) of the same day; across midnight the console dates them
    (M/D HH:MM), and they are checked in that form, in order, between the same moments."""
    low, high = datetime.fromtimestamp(first), datetime.fromtimestamp(last + 1)
    assert len(ticks) >= 3, ticks
    if low.date() != high.date():
        assert all(re.fullmatch(r"\d{1,2}/\d{1,2} \d\d:\d\d(:\d\d)?", t) for t in ticks), ticks

        def dated(t: str) -> datetime:
            day, clock = t.split(" ")
            for year in (low.year, high.year):  # a window across New Year's midnight too
                at = datetime.strptime(f"{year} {day} {clock}", "%Y %m/%d " + ("%H:%M:%S" if clock.count(":") == 2 else "%H:%M"))
                if low.date() <= at.date() <= high.date():
                    return at
            raise AssertionError((t, low, high))

        shown = [dated(t) for t in ticks]
    else:
        assert all(re.fullmatch(r"\d\d:\d\d(:\d\d)?", t) for t in ticks), ticks
        shown = [datetime.combine(high.date(), datetime.strptime(t, "%H:%M:%S" if t.count(":") == 2 else "%H:%M").time())
                 for t in ticks]
    assert shown == sorted(shown) and low.replace(second=0, microsecond=0) <= shown[0] and shown[-1] <= high, (ticks, low, high)


LOAD_RATE = 300  # records a second, at least, that the test's load produces


def test_the_overview_plots_the_rates_and_a_reload_keeps_their_history(console: Console, server: ServiceProcess) -> None:
    import threading
    from playwright.sync_api import expect

    stop = threading.Event()

    def load() -> None:
        with server.client() as api:
            if api.get("/v1/topics/rates").status_code == 404:
                ok(api.post("/v1/topics", json={"name": "rates"}))
            while not stop.is_set():
                ok(api.post("/v1/records", json={"batches": [{"topic": "rates", "partition": 0, "records": [
                    {"value": i} for i in range(100)]}]}))
                api.get("/v1/topics/rates/partitions/0/records", params={"max_records": 50})
                time.sleep(0.05)

    loader = threading.Thread(target=load)
    loader.start()
    try:
        with server.client() as api:  # the service has sampled the load (every 500 ms here)
            deadline = time.monotonic() + 20
            # Only this load produces hundreds a second (the other tests send a few records).
            while sum(s["records_produced_per_s"] >= LOAD_RATE for s in ok(api.get("/v1/console/history"))["samples"]) < 4:
                assert time.monotonic() < deadline, "the service never sampled the load"
                time.sleep(0.2)
    finally:
        stop.set()
        loader.join()
    # A page opened now, not polling yet, plots the history the service kept.
    started = time.time()
    console.open("")
    # The load has stopped: only the history can hold its peak.
    assert int(console.text("#produced-peak").replace(",", "")) >= LOAD_RATE
    assert int(console.text("#fetched-peak").replace(",", "")) >= LOAD_RATE / 2
    expect(console.page.locator("#rates .chart-empty")).to_be_hidden()
    console.screenshot("console-overview-rates.png")
    assert console.page.locator("#rates canvas").count() == 1
    # The time axis reads times of today, in order, within the window (2 min), none a date.
    assert_times_of_today(time_axis(console, "#rates"), started - 125, time.time())
    # The chart fills its card, and its time labels are at least 90 px apart (none overlaps).
    card, canvas = (console.page.locator(x).bounding_box() for x in ("#rates", "#rates canvas"))
    assert card and canvas and card["width"] - 20 <= canvas["width"] <= card["width"]
    assert len(time_axis(console, "#rates")) <= canvas["width"] // 90 + 1
    console.page.set_viewport_size({"width": 700, "height": 900})
    expect(console.page.locator("#rates canvas")).to_have_attribute("width", re.compile(r"^[56]\d\d$"))


def test_a_chart_with_nothing_to_plot_says_so_over_times_of_today(console: Console, server: ServiceProcess) -> None:
    from playwright.sync_api import expect

    with server.client() as api:
        if api.get("/v1/topics/quiet").status_code == 404:
            ok(api.post("/v1/topics", json={"name": "quiet"}))
        ok(api.post("/v1/groups/quiet-readers/members", json={"topics": ["quiet"]}))
    started = time.time()
    console.open("#/groups/quiet-readers")
    expect(console.page.locator("#total-lag")).to_have_text("unknown", timeout=WAIT_MS)  # a gap, not a point
    expect(console.page.locator("#lag-chart .chart-empty")).to_have_text(
        "Lag unknown: the group has committed no offset")
    assert_times_of_today(time_axis(console, "#lag-chart"), started - 305, time.time())
    console.screenshot("console-empty-chart.png")


def test_a_groups_chart_says_its_lag_is_unknown_where_a_partition_has_no_committed_offset(
        console: Console, server: ServiceProcess) -> None:
    from playwright.sync_api import expect

    with server.client() as api:
        ok(api.post("/v1/topics", json={"name": "visits", "partitions": 2}))
        for partition in (0, 1):
            ok(api.post("/v1/records", json={"batches": [{"topic": "visits", "partition": partition, "records": [
                {"key": "v", "value": 1}]}]}))
        ok(api.post("/v1/groups/visit-counter/offsets", json={"offsets": [
            {"topic": "visits", "partition": 0, "offset": 0}]}))
        ok(api.post("/v1/groups/visit-counter/members", json={"topics": ["visits"]}))  # partition 1 too
    console.open("#/groups/visit-counter")
    expect(console.page.locator("#total-lag")).to_have_text("unknown", timeout=WAIT_MS)
    rows = [r.split("\t")[:6] for r in console.page.locator("#lag-table tbody tr").all_inner_texts()]
    assert rows == [["visits", "0", "0", "1", "1", "1"], ["visits", "1", "–", "1", "1", "unknown"]]
    console.screenshot("console-group-lag-unknown.png")
    expect(console.page.locator("#lag-chart .chart-empty")).to_have_text(
        "Lag unknown: some partitions have no committed offset")


def test_the_record_browser_opens_at_the_newest_and_jumps_to_an_offset_a_time_and_a_key(
        console: Console, server: ServiceProcess) -> None:
    from playwright.sync_api import expect

    def value(i: int) -> dict:
        return {"n": i, "order": {"id": f"o-{i}", "paid": i % 2 == 0}}

    with server.client() as api:
        ok(api.post("/v1/topics", json={"name": "browse"}))
        ok(api.post("/v1/records", json={"batches": [{"topic": "browse", "partition": 0, "records": [
            {"key": f"a-{i}", "value": value(i)} for i in range(120)]}]}))
        # A time after every record of the first Send and before every one of the second.
        between = math.ceil(time.time())
        time.sleep(between - time.time() + 0.2)
        ok(api.post("/v1/records", json={"batches": [{"topic": "browse", "partition": 0, "records": [
            {"key": f"b-{i}", "value": value(120 + i), "headers": {"trace": f"t-{i}"}} for i in range(130)]}]}))

    rows = console.page.locator("#records tbody tr")
    console.open("#/topics/browse/0")  # no position: the newest page
    expect(rows.first.locator("td").first).to_have_text("150", timeout=WAIT_MS)
    assert rows.count() == 100 and rows.last.locator("td").first.inner_text() == "249"
    # Each value indented as JSON, each header on its line.
    assert rows.last.locator("pre").inner_text() == json.dumps(value(249), indent=2)
    assert rows.last.locator("td").nth(5).inner_text() == "trace: t-129"
    console.screenshot("console-records.png", full_page=False)  # the top of a long page

    console.page.locator("#offset").fill("10")
    console.page.locator("#read-form button").click()
    expect(rows.first.locator("td").first).to_have_text("10", timeout=WAIT_MS)

    console.page.locator("#time").fill(datetime.fromtimestamp(between).strftime("%Y-%m-%dT%H:%M:%S"))
    console.page.locator("#time-form button").click()
    expect(rows.first.locator("td").first).to_have_text("120", timeout=WAIT_MS)
    assert rows.first.locator("td").nth(3).inner_text() == "b-0"
    console.wait_text("is at offset 120.", "#banner")

    console.page.locator("#key-filter").fill("b-7")
    expect(console.page.locator("#key-count")).to_have_text(
        "11 of 100 records on this page have a key containing “b-7”.")
    assert [r.locator("td").nth(3).inner_text() for r in rows.all() if r.is_visible()] == [
        "b-7", *(f"b-7{i}" for i in range(10))]
    console.screenshot("console-records-found-by-key.png", full_page=False)

    console.page.locator("#send summary").click()
    console.page.locator("#send-key").fill("test-key")
    console.page.locator("#send-value").fill("{hello}")
    console.page.locator("#send-button").click()
    expect(console.page.locator("#send-status")).to_contain_text("INVALID_REQUEST: the value is not JSON")
    console.page.locator("#send-value").fill('{"hello": "world"}')
    console.page.locator("#send-button").click()
    console.wait_text("Sent: offset 250.", "#banner")
    expect(rows.last.locator("td").nth(3)).to_have_text("test-key")
    assert rows.last.locator("pre").inner_text() == '{\n  "hello": "world"\n}'


def test_the_overview_counts_and_the_topic_list_shows_sizes_and_lag(console: Console, server: ServiceProcess) -> None:
    from playwright.sync_api import expect

    with server.client() as api:
        for name in ("sized", "sized-out"):
            ok(api.post("/v1/topics", json={"name": name}))
        ok(api.post("/v1/records", json={"batches": [{"topic": "sized", "partition": 0, "records": [
            {"key": "k", "value": i} for i in range(3)]}]}))
        ok(api.post("/v1/groups/sized-readers/offsets", json={"offsets": [
            {"topic": "sized", "partition": 0, "offset": 1}]}))
        transaction(api, "sized-copier", "sized-out")  # left open

        console.open("")
        console.page.locator("#count-topics").wait_for(timeout=WAIT_MS)
        console.screenshot("console-overview.png")
        # What the API answers now, counted here the way the page says it counts.
        topics = ok(api.get("/v1/topics"))["topics"]
        open_ = ok(api.get("/v1/transactions", params={"state": ["Ongoing", "Prepared", "PrepareCommit",
                                                                    "PrepareAbort"]}))["transactions"]
        groups = ok(api.get("/v1/groups"))["groups"]
        lags = [ok(api.get(f"/v1/groups/{g['group_id']}/lag"))["total_lag"] for g in groups]
        size = sum(p["size_bytes"] for p in ok(api.get("/v1/topics/sized"))["partitions"])
    ongoing = sum(t["state"] == "Ongoing" for t in open_)
    assert console.text("#count-topics").split("\n") == [
        str(len(topics)), "topics", f"{sum(t['partition_count'] for t in topics)} partitions"]
    assert console.text("#count-open").split("\n") == [
        str(len(open_)), "open transactions", f"{ongoing} ongoing, 0 prepared, {len(open_) - ongoing} completing"]
    assert console.text("#count-lagging").split("\n")[:2] == [
        str(sum(lag is None or lag > 0 for lag in lags)), "groups with lag"]
    assert ongoing >= 1 and "sized-readers" in [g["group_id"] for g in groups]

    console.page.locator("#count-topics").click()
    expect(console.page.locator("main h1")).to_have_text("Topics", timeout=WAIT_MS)
    console.wait_text("sized-readers")
    console.screenshot("console-topics.png")
    assert f"sized\t1\t3\t{size} B\t2 sized-readers\tdelete" in console.text()
    assert "sized-out\t1\t1\t" in console.text()


def test_a_topics_settings_are_edited_from_its_page_and_only_the_changed_keys_are_sent(console: Console,
                                                                                     server: ServiceProcess) -> None:
    from playwright.sync_api import expect

    with server.client() as api:
        ok(api.post("/v1/topics", json={"name": "tuned", "config": {"retention_ms": 3_600_000}}))
        before = ok(api.get("/v1/topics/tuned"))["config"]
        console.open("#/topics/tuned")
        console.page.locator("#topic-settings").wait_for(timeout=WAIT_MS)
        expect(console.page.locator("#setting-retention_ms")).to_have_value("3600000")
        patches: list[Any] = []
        console.page.on("request", lambda r: patches.append(r.post_data_json) if r.method == "PATCH" else None)

        console.page.locator("#setting-retention_ms").fill("86400000")
        console.page.locator("#setting-cleanup_policy").select_option("compact")
        console.page.locator("#settings-save").click()
        console.wait_text("Saved: cleanup_policy = compact, retention_ms = 86400000.", "#banner")
        console.screenshot("console-topic-settings.png")

        assert patches == [{"config": {"cleanup_policy": "compact", "retention_ms": 86_400_000}}]
        assert ok(api.get("/v1/topics/tuned"))["config"] == {**before, "retention_ms": 86_400_000,
                                                              "cleanup_policy": "compact"}
        expect(console.page.locator("#setting-retention_ms")).to_have_value("86400000")
        expect(console.page.locator("#setting-cleanup_policy")).to_have_value("compact")


def test_a_bad_topic_setting_shows_its_error_and_changes_nothing(console: Console, server: ServiceProcess) -> None:
    with server.client() as api:
        ok(api.post("/v1/topics", json={"name": "guarded"}))
        before = ok(api.get("/v1/topics/guarded"))["config"]
        console.open("#/topics/guarded")
        console.page.locator("#topic-settings").wait_for(timeout=WAIT_MS)

        console.page.locator("#setting-retention_bytes").fill("lots")
        console.page.locator("#settings-save").click()
        console.wait_text('INVALID_REQUEST: retention_bytes "lots" is not a whole number', "#settings-status")
        console.page.locator("#setting-retention_bytes").fill("-5")  # the service's own check
        console.page.locator("#settings-save").click()
        console.wait_text("INVALID_", "#settings-status")
        refusal = console.text("#settings-status")
        console.page.locator("#setting-retention_bytes").fill(str(before["retention_bytes"]))
        console.page.locator("#settings-save").click()
        console.wait_text("Nothing changed.", "#settings-status")

        assert "retention_bytes" in refusal, refusal
        assert ok(api.get("/v1/topics/guarded"))["config"] == before


def test_transactions_are_filtered_by_state_age_and_id_prefix_from_the_keyboard(console: Console,
                                                                                server: ServiceProcess) -> None:
    from playwright.sync_api import expect

    with server.client() as api:
        ok(api.post("/v1/topics", json={"name": "filtered"}))
        for tid in ("flt-a-1", "flt-a-2", "flt-b-1"):
            ident = transaction(api, tid, "filtered")
        ok(api.post("/v1/transactions/flt-b-1/commit", json=ident))

    ids = console.page.locator("main tbody tr td:first-child")
    console.open("#/transactions")
    console.page.locator("#txn-prefix").focus()
    console.page.keyboard.type("flt-")
    console.page.keyboard.press("Enter")  # submits the filters
    expect(ids).to_have_text(["flt-a-1", "flt-a-2"], timeout=WAIT_MS)  # open ones only
    console.screenshot("console-transactions.png")

    console.open("#/transactions?show=all&prefix=flt-")
    console.page.locator("#txn-state").select_option("CompleteCommit")
    console.page.locator("#txn-filters button").press("Enter")
    expect(ids).to_have_text(["flt-b-1"], timeout=WAIT_MS)
    assert "show=all&state=CompleteCommit&prefix=flt-" in console.page.url

    console.page.locator("#txn-state").select_option("")
    console.page.locator("#txn-min-age").fill("3600")
    console.page.locator("#txn-min-age").press("Enter")
    console.wait_text("No transaction here.")


def test_every_page_fits_a_narrow_window(browser: Any, server: ServiceProcess, capsys: pytest.CaptureFixture[str]) -> None:
    with server.client() as api:
        if api.get("/v1/topics/narrow").status_code == 404:
            ok(api.post("/v1/topics", json={"name": "narrow"}))
            ok(api.post("/v1/records", json={"batches": [{"topic": "narrow", "partition": 0, "records": [
                {"key": f"k{i}", "value": {"i": i, "text": "a longer value " * 4}} for i in range(3)]}]}))
            ok(api.post("/v1/groups/narrow-readers/offsets", json={"offsets": [
                {"topic": "narrow", "partition": 0, "offset": 1}]}))
    c = Console(browser, server.url, capsys)
    c.page.set_viewport_size({"width": 480, "height": 900})
    try:
        for hash_, shot, ready in [("", "overview", "#rates canvas"), ("#/topics", "topics", "main table"),
                                   ("#/topics/narrow", "topic", "main table"),
                                   ("#/topics/narrow/0", "records", "#records"),
                                   ("#/transactions?show=all", "transactions", "#txn-filters"),
                                   ("#/groups/narrow-readers", "group", "#lag-chart canvas"),
                                   ("#/acls", "acls", "#acl-add"), ("#/principals", "principals", "#key-create")]:
            c.open(hash_)
            c.page.locator(ready).first.wait_for(timeout=WAIT_MS)
            c.screenshot(f"console-narrow-{shot}.png")
            assert c.page.evaluate("document.documentElement.scrollWidth") <= 480, hash_
        c.check_clean(server.port)  # type: ignore[arg-type]
    finally:
        c.close()


@pytest.mark.parametrize(("hash_", "shown"), [
    ("#/topics/no-such-topic", "UNKNOWN_TOPIC_OR_PARTITION"),
    ("#/topics/orders/0?offset=abc", "INVALID_REQUEST: offset \"abc\" is not a number"),
    ("#/topics/orders/0?offset=999999", "OFFSET_OUT_OF_RANGE"),
    ("#/topics/orders/7", "UNKNOWN_TOPIC_OR_PARTITION"),
    ("#/transactions/nobody", "TRANSACTIONAL_ID_NOT_FOUND"),
    ("#/transactions?min_age_s=soon", "INVALID_REQUEST: min_age_s \"soon\" is not a number of seconds"),
    ("#/transactions?state=CompleteCommit", "INVALID_REQUEST: state \"CompleteCommit\" is not one of Ongoing"),
    ("#/nowhere", "NOT_FOUND"),
    ("#/topics/%E0%A4%A", "INVALID_REQUEST: the address"),
])
def test_bad_input_shows_a_readable_error_not_a_blank_page(console: Console, server: ServiceProcess,
                                                             hash_: str, shown: str) -> None:
    with server.client() as api:
        if api.get("/v1/topics/orders").status_code == 404:
            ok(api.post("/v1/topics", json={"name": "orders", "partitions": 2}))
    console.open(hash_)
    console.wait_text("Could not show this page")
    assert shown in console.text("#page-error")


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServiceProcess, str, str, str]]:
    with provisioned("sqlite", tmp_path_factory.mktemp("console-secured")) as backend:
        launcher = Launcher(backend)
        try:
            server = launcher.server(authentication="api_key", super_users="User:admin")
            admin = json.loads(launcher.cli("principals", "create", "admin"))["api_key"]
            viewer = json.loads(launcher.cli("principals", "create", "viewer"))["api_key"]
            launcher.cli("acls", "add", "--allow-principal", "User:viewer", "--operation", "read",
                         "--topic", "public")  # read implies describe
            # describe_configs is its own operation: read does not imply it.
            launcher.cli("acls", "add", "--allow-principal", "User:viewer", "--operation", "describe_configs",
                         "--topic", "public")
            reader = json.loads(launcher.cli("principals", "create", "reader"))["api_key"]
            launcher.cli("acls", "add", "--allow-principal", "User:reader", "--operation", "read",
                         "--topic", "public")
            with server.client(headers={"Authorization": f"Bearer {admin}"}) as api:
                for name in ("public", "secret"):
                    ok(api.post("/v1/topics", json={"name": name}))
            yield server, admin, viewer, reader
        finally:
            launcher.close()


def test_with_authentication_on_it_asks_for_a_key_and_shows_what_the_principal_may_describe(
        browser: Any, secured: tuple[ServiceProcess, str, str, str], capsys: pytest.CaptureFixture[str]) -> None:
    server, _, viewer, _ = secured
    c = Console(browser, server.url, capsys)
    try:
        c.open("#/")
        c.page.locator("#sign-in").wait_for(timeout=WAIT_MS)
        time.sleep(2.5)  # past the overview's polling interval
        # One request was refused, and audited, before the sign-in: not each of the page's, nor
        # one more every poll while it waits.
        assert [r.split()[0] for r in c.refused] == ["401"]
        c.page.locator("#credential").fill("outbox_0123456789abcdef_wrong")
        c.page.locator("#sign-in-button").click()
        c.wait_text("Not accepted", "#sign-in")
        c.page.locator("#credential").fill(viewer)
        c.page.locator("#sign-in-button").click()
        c.open("#/topics")
        c.wait_text("public")
        c.screenshot("console-signed-in.png")
        assert "secret" not in c.text()
        c.open("#/topics/secret")
        c.wait_text("TOPIC_AUTHORIZATION_FAILED")
        c.check_clean(server.port)  # type: ignore[arg-type]
    finally:
        c.close()


def sign_in(c: Console, key: str) -> None:
    c.page.locator("#sign-in").wait_for(timeout=WAIT_MS)
    c.page.locator("#credential").fill(key)
    c.page.locator("#sign-in-button").click()


def test_a_principal_that_may_read_but_not_write_a_topic_sees_no_send_form(
        browser: Any, secured: tuple[ServiceProcess, str, str, str], capsys: pytest.CaptureFixture[str]) -> None:
    server, admin, viewer, _ = secured
    for key, may_send in ((viewer, False), (admin, True)):
        c = Console(browser, server.url, capsys)
        try:
            c.open("#/topics/public/0")
            sign_in(c, key)
            c.wait_text("No records from this position.")
            assert c.page.locator("#send").count() == (1 if may_send else 0)
            if not may_send:
                c.screenshot("console-records-read-only.png", full_page=False)
            c.check_clean(server.port)  # type: ignore[arg-type]
        finally:
            c.close()


def test_a_principal_without_alter_configs_sees_the_settings_but_no_form(
        browser: Any, secured: tuple[ServiceProcess, str, str, str], capsys: pytest.CaptureFixture[str]) -> None:
    server, admin, viewer, _ = secured
    for key, may_edit in ((viewer, False), (admin, True)):
        c = Console(browser, server.url, capsys)
        try:
            c.open("#/topics/public")
            sign_in(c, key)
            c.page.locator("#topic-settings").wait_for(timeout=WAIT_MS)
            assert c.page.locator("#settings-save").count() == (1 if may_edit else 0)
            if not may_edit:
                assert "retention_ms\n604,800,000 (7 days)" in c.text("#topic-settings")
                c.screenshot("console-topic-settings-read-only.png")
            c.check_clean(server.port)  # type: ignore[arg-type]
        finally:
            c.close()


def test_a_principal_without_describe_configs_is_told_what_reading_the_settings_needs(
        browser: Any, secured: tuple[ServiceProcess, str, str, str], capsys: pytest.CaptureFixture[str]) -> None:
    server, _, _, reader = secured
    c = Console(browser, server.url, capsys)
    try:
        c.open("#/topics/public")
        sign_in(c, reader)
        c.page.locator("#settings-need").wait_for(timeout=WAIT_MS)
        assert c.text("#settings-need") == "Reading the settings needs describe_configs on the topic."
        assert c.page.locator("#topic-settings").count() == 0
        c.check_clean(server.port)  # type: ignore[arg-type]
    finally:
        c.close()



# Where a cell's first line of text sits: the bottom of an empty inline-block put before its
# first character is that line's baseline.
FIRST_BASELINE = """cell => {
    const text = cell.querySelector("pre") || cell, probe = document.createElement("span");
    probe.style.display = "inline-block";
    text.prepend(probe);
    const baseline = probe.getBoundingClientRect().bottom;
    probe.remove();
    return baseline;
}"""


def test_a_scalar_value_reads_on_its_rows_line_in_the_size_of_an_object_value(console: Console,
                                                                             server: ServiceProcess) -> None:
    with server.client() as api:
        ok(api.post("/v1/topics", json={"name": "scalars"}))
        ok(api.post("/v1/records", json={"batches": [{"topic": "scalars", "partition": 0, "records": [
            {"key": "object", "value": {"visits": 1}}, {"key": "scalar", "value": 1}]}]}))
    console.open("#/topics/scalars/0")
    console.page.locator("#records").wait_for(timeout=WAIT_MS)
    console.screenshot("console-records-scalar.png", full_page=False)
    # Per row: the value's font size, and how far its first line's baseline is from the key's.
    looks = console.page.evaluate(f"""[...document.querySelectorAll("#records tbody tr")].map(tr => {{
        const baseline = {FIRST_BASELINE}, cells = tr.querySelectorAll("td");
        return [getComputedStyle(cells[4].querySelector("pre")).fontSize,
                Math.round(baseline(cells[4]) - baseline(cells[3]))];
    }})""")
    assert looks == [["12px", 0], ["12px", 0]]


def test_a_principal_without_describe_on_the_cluster_is_told_the_counts_hold_only_what_it_may_describe(
        request: pytest.FixtureRequest, secured: tuple[ServiceProcess, str, str, str],
        capsys: pytest.CaptureFixture[str]) -> None:
    from playwright.sync_api import expect

    chromium = request.getfixturevalue("browser")

    server, admin, _, _ = secured
    with server.client(headers={"Authorization": f"Bearer {admin}"}) as api:
        ok(api.post("/v1/topics", json={"name": "pizza"}))
        ok(api.post("/v1/records", json={"batches": [{"topic": "pizza", "partition": 0, "records": [
            {"key": "p", "value": i} for i in range(2)]}]}))
        ok(api.post("/v1/groups/pizza-kitchen/offsets", json={"offsets": [
            {"topic": "pizza", "partition": 0, "offset": 0}]}))  # lag 2, in a group the shop may not describe
        transaction(api, "oven", "pizza")  # left open, of a transactional id the shop may not describe
        shop = ok(api.post("/v1/principals/User:pizza-shop/api-keys"))["api_key"]
        ok(api.post("/v1/acls", json={"acls": [
            {"principal": "User:pizza-shop", "resource_type": "topic", "resource_name": "pizza", "operation": "read"},
            {"principal": "User:pizza-shop", "resource_type": "group", "resource_name": "pizza-shop",
             "operation": "read"}]}))
    for key, who in ((shop, "shop"), (admin, "admin")):
        c = Console(chromium, server.url, capsys)
        try:
            c.open("#/")
            sign_in(c, key)
            expect(c.page.locator("#hanging")).not_to_be_empty(timeout=WAIT_MS)
            c.page.locator("#count-open").wait_for(timeout=WAIT_MS)
            c.screenshot(f"console-overview-{who}.png")
            cards = [c.text(f"#count-{card}").split("\n")[:2] for card in ("open", "hanging")]
            hanging = c.text("#hanging")
            c.open("#/topics")
            c.wait_text("pizza", "main tbody")
            c.screenshot(f"console-topics-{who}.png")
            pizza = c.page.locator("main tbody tr", has_text="pizza").inner_text().split("\t")
            if who == "shop":
                assert cards == [["0", "open transactions you may describe"], ["0", "hanging, of those you may describe"]]
                assert hanging == "None you may describe."
                assert pizza[4] == "none you may describe"
            else:  # the admin's view, as it was
                assert cards == [["1", "open transactions"], ["0", "hanging"]]
                assert hanging == "None: every transaction is ending within its timeout."
                assert pizza[4] == "2 pizza-kitchen"
            c.check_clean(server.port)  # type: ignore[arg-type]
        finally:
            c.close()
