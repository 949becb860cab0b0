"""The console's ACL and Principals pages with authentication on, in a real browser against a
real `outbox serve`: an operator with alter on the cluster adds a binding and revokes exactly
it, creates an API key (shown once) and revokes it, each checked through the HTTP API; the ACL
form offers the operations the API answers, asked once a page; a refusal shows the API's code
and message; a principal that may only describe the cluster sees the lists without a control to
change them (nor a transaction's abort), and one that may not describe it sees the API's refusal.
Screenshots saved (OUTBOX_SCREENSHOT_DIR, or .artifacts/screenshots) and their paths printed."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import Launcher, ServiceProcess, provisioned
from tests.e2e.test_console_browser import WAIT_MS, Console, ok, sign_in
from tests.e2e import test_docs_browser

pytestmark = [pytest.mark.e2e, pytest.mark.browser]

browser = test_docs_browser.browser  # the fixture, for this module's tests


class Keys:
    def __init__(self, admin: str, auditor: str, viewer: str) -> None:
        self.admin, self.auditor, self.viewer = admin, auditor, viewer


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServiceProcess, Keys]]:
    """admin: a super-user; auditor: describe on the cluster only; viewer: nothing on it."""
    with provisioned("sqlite", tmp_path_factory.mktemp("console-acl-admin")) as backend:
        launcher = Launcher(backend)
        try:
            server = launcher.server(authentication="api_key", super_users="User:admin")
            keys = Keys(*(json.loads(launcher.cli("principals", "create", name))["api_key"]
                          for name in ("admin", "auditor", "viewer")))
            launcher.cli("acls", "add", "--allow-principal", "User:auditor", "--operation", "describe", "--cluster")
            yield server, keys
        finally:
            launcher.close()


@pytest.fixture
def signed_in(browser: Any, secured: tuple[ServiceProcess, Keys], capsys: pytest.CaptureFixture[str]) -> Iterator[Any]:
    """Opens a console page signed in with a key: signed_in(key, hash_) -> Console."""
    server, _ = secured
    opened: list[Console] = []

    def open_(key: str, hash_: str, **context: Any) -> Console:
        c = Console(browser, server.url, capsys, **context)
        opened.append(c)
        c.open(hash_)
        sign_in(c, key)
        return c

    try:
        yield open_
        for c in opened:
            c.check_clean(server.port)  # type: ignore[arg-type]
    finally:
        for c in opened:
            c.close()


def as_(server: ServiceProcess, key: str) -> httpx.Client:
    return server.client(headers={"Authorization": f"Bearer {key}"})


def accepting(c: Console) -> list[str]:
    """Accepts the page's next confirmation; its message is appended to the list returned."""
    messages: list[str] = []

    def accept(dialog: Any) -> None:
        messages.append(dialog.message)
        dialog.accept()

    c.page.once("dialog", accept)
    return messages


ERIN_ALLOW = {"principal": "User:erin", "resource_type": "group", "resource_name": "pay-", "pattern_type": "prefixed",
              "operation": "read", "permission": "allow"}
ERIN_DENY = {**ERIN_ALLOW, "permission": "deny"}


def test_an_operator_adds_a_binding_and_revokes_exactly_that_binding(secured: tuple[ServiceProcess, Keys],
                                                                      signed_in: Any) -> None:
    from playwright.sync_api import expect

    server, keys = secured
    with as_(server, keys.admin) as api:
        ok(api.post("/v1/acls", json={"acls": [ERIN_ALLOW]}))
        c = signed_in(keys.admin, "#/acls?principal=User:erin")
        c.wait_text("pay-", "main tbody")
        c.page.locator("#acl-add summary").click()
        assert c.page.locator("#acl-principal").input_value() == "User:erin"  # from the page's filter
        c.page.locator("#acl-resource_type").select_option("group")
        assert c.page.locator("#acl-operation option").all_text_contents() == ["read", "delete", "describe", "all"]
        c.page.locator("#acl-permission").select_option("deny")
        c.page.locator("#acl-operation").select_option("read")
        c.page.locator("#acl-resource_name").fill("pay-")
        c.page.locator("#acl-pattern_type").select_option("prefixed")
        c.screenshot("console-acl-add.png")
        c.page.locator("#acl-add-button").click()
        expect(c.page.locator("#banner")).to_have_text(
            "Added: deny User:erin read on group:pay- (prefixed).", timeout=WAIT_MS)
        assert ok(api.get("/v1/acls", params={"principal": "User:erin"}))["acls"] == [ERIN_ALLOW, ERIN_DENY]
        expect(c.page.locator("main tbody tr")).to_have_count(2, timeout=WAIT_MS)
        c.screenshot("console-acls-admin.png")

        # The two bindings differ in their permission only: the revoke deletes the one clicked.
        confirmed = accepting(c)
        c.page.get_by_role("button", name="Revoke deny User:erin read on group:pay- (prefixed)").click()
        expect(c.page.locator("#banner")).to_have_text(
            "Revoked: deny User:erin read on group:pay- (prefixed).", timeout=WAIT_MS)
        assert confirmed == ["Revoke the binding deny User:erin read on group:pay- (prefixed)? It stops acting in "
                             "this process at once, and in every process within OUTBOX_SECURITY_REFRESH_INTERVAL_MS."]
        assert ok(api.get("/v1/acls", params={"principal": "User:erin"}))["acls"] == [ERIN_ALLOW]
        expect(c.page.locator("main tbody tr")).to_have_count(1, timeout=WAIT_MS)
        assert c.page.locator("main tbody tr").all_inner_texts() == [
            "User:erin\tgroup\tpay-\tprefixed\tread\tallow\tRevoke…"]


def test_the_cluster_is_offered_as_its_one_literal_resource(secured: tuple[ServiceProcess, Keys],
                                                           signed_in: Any) -> None:
    server, keys = secured
    c = signed_in(keys.admin, "#/acls")
    c.page.locator("#acl-add summary").click()
    c.page.locator("#acl-resource_type").select_option("cluster")
    assert c.page.locator("#acl-operation option").all_text_contents() == [
        "create", "alter", "describe", "cluster_action", "describe_configs", "alter_configs",
        "idempotent_write", "all"]
    assert c.page.locator("#acl-resource_name").input_value() == "outbox-cluster"
    assert c.page.locator("#acl-resource_name").get_attribute("readonly") is not None
    assert c.page.locator("#acl-pattern_type").is_disabled()
    assert c.page.locator("#acl-pattern_type").input_value() == "literal"


def test_the_form_offers_the_operations_the_api_answers_for_each_resource_type(secured: tuple[ServiceProcess, Keys],
                                                                             signed_in: Any) -> None:
    # An answer unlike the service's own table: the form can only have it from the API.
    served = {"group": ["describe", "all"], "topic": ["read"]}
    server, keys = secured
    c = signed_in(keys.admin, "#/topics")
    c.page.locator("main h1").get_by_text("Topics").wait_for(timeout=WAIT_MS)
    c.page.route("**/v1/acls/operations", lambda route: route.fulfill(json={"operations_of": served}))
    c.page.evaluate("location.hash = '#/acls'")
    c.page.locator("#acl-add summary").click()
    assert c.page.locator("#acl-resource_type option").all_text_contents() == ["group", "topic"]
    c.page.locator("#acl-resource_type").select_option("group")
    assert c.page.locator("#acl-operation option").all_text_contents() == ["describe", "all"]


def test_the_operations_are_asked_of_the_api_once_a_page(secured: tuple[ServiceProcess, Keys],
                                                         signed_in: Any) -> None:
    server, keys = secured
    c = signed_in(keys.admin, "#/topics")
    c.page.locator("main h1").get_by_text("Topics").wait_for(timeout=WAIT_MS)
    asked: list[str] = []
    c.page.on("request", lambda r: asked.append(r.url) if r.url.endswith("/v1/acls/operations") else None)
    for _ in range(3):
        c.page.evaluate("location.hash = '#/acls'")
        c.page.locator("#acl-add summary").wait_for(timeout=WAIT_MS)
        c.page.evaluate("location.hash = '#/topics'")
        c.page.locator("main h1").get_by_text("Topics").wait_for(timeout=WAIT_MS)
    assert len(asked) == 1


def test_a_binding_the_api_refuses_shows_its_code_and_message_and_nothing_is_stored(
        secured: tuple[ServiceProcess, Keys], signed_in: Any) -> None:
    from playwright.sync_api import expect

    server, keys = secured
    c = signed_in(keys.admin, "#/acls")
    c.page.locator("#acl-add summary").click()
    c.page.locator("#acl-principal").fill("User:gina")
    c.page.locator("#acl-resource_name").fill("*")
    c.page.locator("#acl-pattern_type").select_option("prefixed")
    c.page.locator("#acl-add-button").click()
    expect(c.page.locator("#acl-add-status")).to_have_text(
        "INVALID_REQUEST: invalid ACL binding (allow User:gina read on topic:* (prefixed)): a prefixed pattern of "
        "'*' matches only names that start with '*'; use literal '*' for every resource", timeout=WAIT_MS)
    c.screenshot("console-acl-add-refused.png", full_page=False)
    with as_(server, keys.admin) as api:
        assert ok(api.get("/v1/acls", params={"principal": "User:gina"}))["acls"] == []


def test_an_operator_creates_a_key_shown_once_and_revokes_it(secured: tuple[ServiceProcess, Keys],
                                                             signed_in: Any) -> None:
    from playwright.sync_api import expect

    server, keys = secured
    c = signed_in(keys.admin, "#/principals", permissions=["clipboard-read", "clipboard-write"])
    c.page.locator("#key-create").wait_for(timeout=WAIT_MS)
    c.page.locator("#key-principal").fill("frank")
    c.page.locator("#key-create-button").click()
    c.page.locator("#new-key-value").wait_for(timeout=WAIT_MS)
    key = c.text("#new-key-value")
    with as_(server, keys.admin) as api:
        [frank] = [p for p in ok(api.get("/v1/principals"))["principals"] if p["principal"] == "User:frank"]
    [issued] = frank["api_keys"]
    assert c.text("#new-key").startswith(
        f"New API key for User:frank (key id {issued['key_id']}). Copy it now: it will not be shown again")
    c.page.locator("#new-key-copy").click()
    expect(c.page.locator("#new-key-copied")).to_have_text("Copied.", timeout=WAIT_MS)
    assert c.page.evaluate("navigator.clipboard.readText()") == key
    frank_row = c.page.get_by_role("row", name="User:frank")
    cells = frank_row.locator("td").all_inner_texts()
    assert cells[:2] == ["User:frank", "1"] and cells[2].startswith(f"{issued['key_id']} ")
    assert cells[2].endswith(" Revoke…")
    c.screenshot("console-principals-new-key.png")
    assert c.page.get_by_role("row", name="User:admin").locator("td").nth(2).inner_text().endswith(
        " (this console's) Revoke…")  # the key it signed in with
    # Kept by nothing but the page: not in the tab's storage, nor in its address.
    stored = c.page.evaluate("JSON.stringify([{...localStorage}, {...sessionStorage}, location.href])")
    assert key not in stored

    with as_(server, key) as frank_api:
        assert frank_api.get("/v1/topics").status_code == 200  # the new key authenticates

    confirmed = accepting(c)
    c.page.get_by_role("button", name=f"Revoke key {issued['key_id']} of User:frank").click()
    expect(c.page.locator("#banner")).to_have_text(f"Revoked: key {issued['key_id']} of User:frank.", timeout=WAIT_MS)
    assert confirmed and confirmed[0].startswith(f"Revoke API key {issued['key_id']} of User:frank?")
    with as_(server, key) as frank_api:
        assert frank_api.get("/v1/topics").status_code == 401
    expect(frank_row).to_contain_text(" revoked ", timeout=WAIT_MS)
    cells = frank_row.locator("td").all_inner_texts()
    assert cells[:2] == ["User:frank", "0"] and cells[2].startswith(f"{issued['key_id']} ")
    assert c.page.get_by_role("button", name=f"Revoke key {issued['key_id']} of User:frank").count() == 0
    c.page.locator("#new-key-done").click()
    expect(c.page.locator("#new-key")).to_be_hidden()
    assert key not in c.text("body")


def test_a_principal_that_may_only_describe_the_cluster_sees_the_lists_and_no_control(
        secured: tuple[ServiceProcess, Keys], signed_in: Any) -> None:
    server, keys = secured
    with as_(server, keys.admin) as api:
        ok(api.post("/v1/acls", json={"acls": [{**ERIN_ALLOW, "principal": "User:hal"}]}))
    c = signed_in(keys.auditor, "#/acls?principal=User:hal")
    c.wait_text("pay-", "main tbody")
    assert c.page.locator("main tbody tr").all_inner_texts() == ["User:hal\tgroup\tpay-\tprefixed\tread\tallow"]
    assert "Adding and revoking bindings needs alter on the cluster." in c.text("main")
    assert (c.page.locator("#acl-add").count(), c.page.locator("main button").count()) == (0, 0)
    c.screenshot("console-acls-read-only.png", full_page=False)
    c.open("#/principals")
    c.wait_text("User:auditor", "main tbody")
    assert "Creating and revoking keys needs alter on the cluster." in c.text("main")
    assert (c.page.locator("#key-create").count(), c.page.locator("main button").count()) == (0, 0)


@pytest.mark.parametrize("hash_", ["#/acls", "#/principals"])
def test_a_principal_that_may_not_describe_the_cluster_sees_the_apis_refusal(
        secured: tuple[ServiceProcess, Keys], signed_in: Any, hash_: str) -> None:
    from playwright.sync_api import expect

    server, keys = secured
    c = signed_in(keys.viewer, hash_)
    expect(c.page.locator("#page-error")).to_have_text(
        "CLUSTER_AUTHORIZATION_FAILED: User:viewer is not authorized for describe on the cluster: no ACL allows it",
        timeout=WAIT_MS)
    assert c.page.locator("main button, main form").count() == 0
    c.screenshot(f"console-{hash_[2:]}-refused.png", full_page=False)


def test_only_a_principal_with_alter_on_the_cluster_is_offered_a_transactions_abort(
        secured: tuple[ServiceProcess, Keys], signed_in: Any) -> None:
    from playwright.sync_api import expect

    server, keys = secured
    with as_(server, keys.admin) as api:
        ok(api.post("/v1/topics", json={"name": "audited"}))
        p = ok(api.post("/v1/producers", json={"transactional_id": "t-audit"}))
        ident = {"producer_id": p["producer_id"], "producer_epoch": p["producer_epoch"]}
        ok(api.post("/v1/transactions/t-audit/begin", json=ident))
        ok(api.post("/v1/acls", json={"acls": [{"principal": "User:auditor", "resource_type": "transactional_id",
                                                "resource_name": "t-audit", "operation": "describe"}]}))
    auditor = signed_in(keys.auditor, "#/transactions/t-audit")
    expect(auditor.page.locator("#abort-needs")).to_have_text(
        "Aborting a transaction as an operator needs alter or cluster_action on the cluster.", timeout=WAIT_MS)
    assert "Ongoing" in auditor.text("main dl")
    assert auditor.page.locator("#abort").count() == 0
    admin = signed_in(keys.admin, "#/transactions/t-audit")
    expect(admin.page.locator("#abort")).to_be_enabled(timeout=WAIT_MS)
    assert admin.page.locator("#abort-needs").count() == 0
