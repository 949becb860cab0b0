"""The overview's "Lag of the groups that lag most" in a real browser, against a real `outbox
serve` that samples the groups' lag every 500 ms (GET /v1/console/lag-history): a page opened
after the groups started lagging plots what the service kept, names the groups that lag most
now with their totals, and follows a group that catches up without a reload, each group
keeping its colour when the ranks change, its legend naming them in their own case; a group's page opens with what the service kept of
its lag, for a principal that may describe the group and its topic but not the cluster too. The ACL and
principal pages list what GET /v1/acls and GET /v1/principals answer, never a key. Screenshots
saved (OUTBOX_SCREENSHOT_DIR, or .artifacts/screenshots) and their paths printed."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest

from tests.e2e.conftest import Launcher, ServiceProcess, provisioned
from tests.e2e.test_console_browser import WAIT_MS, Console, console, ok, sign_in  # noqa: F401 - a fixture
from tests.e2e.test_docs_browser import browser  # noqa: F401 - a fixture

pytestmark = [pytest.mark.e2e, pytest.mark.browser]

SETTINGS = {"run_coordinator": False, "console_lag_interval_ms": 500, "metrics_gauge_interval_ms": 0,
            "console_history_window_ms": 120_000}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceProcess]:
    with provisioned("sqlite", tmp_path_factory.mktemp("lag-history")) as backend:
        launcher = Launcher(backend)
        try:
            yield launcher.server(**SETTINGS)
        finally:
            launcher.close()


def _commit(api, group: str, topic: str, offset: int) -> None:  # type: ignore[no-untyped-def]
    ok(api.post(f"/v1/groups/{group}/offsets", json={"offsets": [{"topic": topic, "partition": 0, "offset": offset}]}))


def _samples_with(api, group: str, lag: int | None) -> int:  # type: ignore[no-untyped-def]
    return sum(any(g["group_id"] == group and g["total_lag"] == lag for g in s["groups"])
               for s in ok(api.get("/v1/console/lag-history"))["samples"])


def _wait_for_samples(api, group: str, lag: int | None, count: int) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + 20
    while _samples_with(api, group, lag) < count:
        assert time.monotonic() < deadline, f"the service never sampled {group} at {lag}"
        time.sleep(0.2)


def legend_colours(page: Console) -> dict[str, str]:
    """Each charted group's colour, as its legend marker shows it."""
    return dict(page.page.evaluate("""[...document.querySelectorAll("#lag-history .u-legend .u-series")]
        .slice(1).map(s => [s.querySelector(".u-label").textContent,
                            getComputedStyle(s.querySelector(".u-marker")).borderColor])"""))


def test_the_overview_plots_the_lag_the_service_kept_and_follows_a_group_catching_up(console: Console,  # noqa: F811
                                                                                     server: ServiceProcess) -> None:
    from playwright.sync_api import expect

    with server.client() as api:
        for topic, count in (("shipments", 10), ("returns", 4)):
            ok(api.post("/v1/topics", json={"name": topic}))
            ok(api.post("/v1/records", json={"batches": [{"topic": topic, "partition": 0, "records": [
                {"value": i} for i in range(count)]}]}))
        _commit(api, "slow-shippers", "shipments", 0)  # lag 10
        _commit(api, "fast-shippers", "shipments", 8)  # lag 2
        _commit(api, "returns-desk", "returns", 1)  # lag 3
        ok(api.post("/v1/groups/new-readers/members", json={"topics": ["returns"]}))  # unknown: nothing committed
        _wait_for_samples(api, "slow-shippers", 10, 4)

        # A page opened now plots the samples the service kept before it opened.
        console.open("")
        expect(console.page.locator("#lag-history-now")).to_have_text(
            "Now: slow-shippers 10, returns-desk 3, fast-shippers 2, new-readers unknown", timeout=WAIT_MS)
        expect(console.page.locator("#lag-history .chart-empty")).to_be_hidden()
        assert console.page.locator("#lag-history canvas").count() == 1
        legend = console.page.locator("#lag-history .u-legend .u-series .u-label").all_text_contents()
        assert legend[1:] == [
            "slow-shippers", "returns-desk", "fast-shippers", "new-readers"]
        assert "sample every 500 ms" in console.text("#lag-history-about")
        colours = legend_colours(console)
        assert len(set(colours.values())) == 4

        # It catches up; the page follows without a reload, its line falling to 0.
        _commit(api, "slow-shippers", "shipments", 10)
        _wait_for_samples(api, "slow-shippers", 0, 4)
        expect(console.page.locator("#lag-history-now")).to_have_text(
            "Now: returns-desk 3, fast-shippers 2, new-readers unknown, slow-shippers 0", timeout=WAIT_MS)
        assert legend_colours(console) == colours  # each group keeps its colour in its new rank
        console.screenshot("console-overview-lag-history.png")


def test_a_groups_page_opens_with_the_lag_the_service_kept_so_a_reload_keeps_its_chart(
        request: pytest.FixtureRequest, server: ServiceProcess) -> None:
    from playwright.sync_api import expect

    c: Console = request.getfixturevalue("console")

    with server.client() as api:
        ok(api.post("/v1/topics", json={"name": "invoices"}))
        ok(api.post("/v1/records", json={"batches": [{"topic": "invoices", "partition": 0, "records": [
            {"value": i} for i in range(6)]}]}))
        _commit(api, "billing", "invoices", 1)  # lag 5
        _wait_for_samples(api, "billing", 5, 6)

        c.open("#/groups/billing")
        expect(c.page.locator("#total-lag")).to_have_text("5", timeout=WAIT_MS)
        # The page has read the lag once or twice itself (every 2 s): the other points are the
        # samples the service kept before it opened.
        assert int(c.page.locator("#lag-chart").get_attribute("data-points")) >= 6
        expect(c.page.locator("#lag-chart .chart-empty")).to_be_hidden()

        c.page.reload(wait_until="networkidle")
        expect(c.page.locator("#total-lag")).to_have_text("5", timeout=WAIT_MS)
        assert int(c.page.locator("#lag-chart").get_attribute("data-points")) >= 6
        c.screenshot("console-group-lag-kept.png")


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServiceProcess, str, str]]:
    """Authentication on: User:admin a super user, User:viewer with describe on the group
    `billing` and the topic `invoices` and nothing on the cluster."""
    with provisioned("sqlite", tmp_path_factory.mktemp("lag-history-secured")) as backend:
        launcher = Launcher(backend)
        try:
            server = launcher.server(authentication="api_key", super_users="User:admin", **SETTINGS)
            admin = json.loads(launcher.cli("principals", "create", "admin"))["api_key"]
            viewer = json.loads(launcher.cli("principals", "create", "viewer"))["api_key"]
            for resource in (("--group", "billing"), ("--topic", "invoices")):
                launcher.cli("acls", "add", "--allow-principal", "User:viewer", "--operation", "describe", *resource)
            yield server, admin, viewer
        finally:
            launcher.close()


def test_a_groups_page_opens_with_the_kept_lag_for_a_principal_without_describe_on_the_cluster(
        request: pytest.FixtureRequest, secured: tuple[ServiceProcess, str, str],
        capsys: pytest.CaptureFixture[str]) -> None:
    from playwright.sync_api import expect

    server, admin, viewer = secured
    with server.client(headers={"Authorization": f"Bearer {admin}"}) as api:
        ok(api.post("/v1/topics", json={"name": "invoices"}))
        ok(api.post("/v1/records", json={"batches": [{"topic": "invoices", "partition": 0, "records": [
            {"value": i} for i in range(6)]}]}))
        _commit(api, "billing", "invoices", 1)  # lag 5
        _wait_for_samples(api, "billing", 5, 6)
    c = Console(request.getfixturevalue("browser"), server.url, capsys)
    try:
        c.open("#/groups/billing")
        sign_in(c, viewer)

        expect(c.page.locator("#total-lag")).to_have_text("5", timeout=WAIT_MS)
        # The history filters by the group and its topics and never refuses: the kept samples
        # are there, and nothing the page asked was refused after the sign-in.
        assert int(c.page.locator("#lag-chart").get_attribute("data-points")) >= 6
        assert [r for r in c.refused if "/v1/console/lag-history" in r] == []
        c.check_clean(server.port)  # type: ignore[arg-type]
    finally:
        c.close()


def test_the_acl_and_principal_pages_list_the_apis_bindings_and_keys(console: Console,  # noqa: F811
                                                                   server: ServiceProcess) -> None:
    from playwright.sync_api import expect

    with server.client() as api:
        ok(api.post("/v1/acls", json={"acls": [
            {"principal": "User:carol", "resource_type": "topic", "resource_name": "orders", "operation": "read"},
            {"principal": "User:carol", "resource_type": "group", "resource_name": "pay", "pattern_type": "prefixed",
             "operation": "read"},
            {"principal": "User:dave", "resource_type": "topic", "resource_name": "orders", "operation": "write",
             "permission": "deny"}]}))
        key = ok(api.post("/v1/principals/User:carol/api-keys"))
        ok(api.delete(f"/v1/principals/User:carol/api-keys/{key['key_id']}"))
        kept = ok(api.post("/v1/principals/User:carol/api-keys"))

    console.open("#/acls")
    console.wait_text("User:dave", "main tbody")
    # Authentication off: the caller may alter the cluster, so each binding has its revoke.
    rows = [r.split("\t") for r in console.page.locator("main tbody tr").all_inner_texts()]
    assert sorted(rows) == [["User:carol", "group", "pay", "prefixed", "read", "allow", "Revoke…"],
                            ["User:carol", "topic", "orders", "literal", "read", "allow", "Revoke…"],
                            ["User:dave", "topic", "orders", "literal", "write", "deny", "Revoke…"]]
    console.page.get_by_role("link", name="User:dave").click()
    expect(console.page.locator("#acl-filter")).to_have_text("principal User:dave", timeout=WAIT_MS)
    assert console.page.locator("main tbody tr").all_inner_texts() == [
        "User:dave\ttopic\torders\tliteral\twrite\tdeny\tRevoke…"]
    console.screenshot("console-acls.png")

    console.open("#/principals")
    console.wait_text("User:carol", "main tbody")
    row = console.page.locator("main tbody tr").first.inner_text().split("\t")
    assert row[:2] == ["User:carol", "1"]
    assert f"{key['key_id']} " in row[2] and "revoked" in row[2] and kept["key_id"] in row[2]
    assert kept["api_key"] not in console.text()
    console.screenshot("console-principals.png")
    console.page.get_by_role("link", name="ACLs").last.click()
    expect(console.page.locator("#acl-filter")).to_have_text("principal User:carol", timeout=WAIT_MS)
    console.screenshot("console-principals-acls.png")


def test_a_charts_legend_shows_group_ids_in_their_own_case(console: Console, server: ServiceProcess) -> None:  # noqa: F811
    from playwright.sync_api import expect

    with server.client() as api:
        ok(api.post("/v1/topics", json={"name": "visits"}))
        ok(api.post("/v1/records", json={"batches": [{"topic": "visits", "partition": 0, "records": [
            {"value": i} for i in range(50)]}]}))
        _commit(api, "Visits-Counter", "visits", 0)  # lag 50: the group that lags most
        _wait_for_samples(api, "Visits-Counter", 50, 2)

    console.open("")
    labels = console.page.locator("#lag-history .u-legend .u-series .u-label")
    expect(labels.nth(1)).to_have_text("Visits-Counter", timeout=WAIT_MS)
    console.screenshot("console-overview-legend-case.png")
    # As drawn (inner_text follows text-transform), not only as written.
    assert labels.nth(1).inner_text() == "Visits-Counter"
    console.open("#/groups/Visits-Counter")
    expect(console.page.locator("#total-lag")).to_have_text("50", timeout=WAIT_MS)
    assert console.page.locator("#lag-chart .u-legend .u-series .u-label").nth(1).inner_text() == "lag"
    assert console.page.locator("#lag-table thead th").first.inner_text() == "TOPIC"  # column headings stay capitals
