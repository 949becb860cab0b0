"""Swagger UI (/docs) and ReDoc (/redoc) in a real browser, against a real `outbox serve`.

Debian's Chromium, driven by Playwright, opens each page and waits until it has rendered; the
test then holds the rendered operations against /openapi.json, and every request the page
made against the server's own address. A full-page screenshot of each page is saved (in
OUTBOX_SCREENSHOT_DIR, or .artifacts/screenshots) for a person to look at; the paths are
printed.

The page's Content-Security-Policy (app.api.docs_ui) lets the browser load nothing from
another origin. ReDoc 2's sidebar always asks for Redocly's logo from Redocly's CDN; the
browser refuses it before any connection is made (Playwright reports it as a request that
failed with "csp"). The policy's refusals are read from the page's own
securitypolicyviolation events, which also see what is no network request (a data: image, a
worker from a blob), and asserted exactly: a policy that broke part of a page would show here.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from tests.conftest import unavailable
from tests.e2e.conftest import ROOT, Launcher, ServiceProcess, provisioned

pytestmark = [pytest.mark.e2e, pytest.mark.browser]

CHROMIUM = Path("/usr/bin/chromium")
# --no-sandbox: the tests run as root, where Chromium's sandbox refuses to start. The rest keep
# Chromium from its own calls home (updates, sync, field trials), which would show up as
# refused connections on a machine without internet.
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]
RENDER_TIMEOUT_MS = 30_000
REDOCLY_LOGO = "https://cdn.redoc.ly/redoc/logo-mini.svg"
RECORD_CSP_VIOLATIONS = """
    window.cspViolations = [];
    document.addEventListener("securitypolicyviolation",
        e => window.cspViolations.push([e.effectiveDirective, e.blockedURI]));
"""


def screenshot_dir() -> Path:
    return Path(os.environ.get("OUTBOX_SCREENSHOT_DIR") or ROOT / ".artifacts" / "screenshots")


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        unavailable("the playwright package is not installed: pip install -e '.[test]'")
    if not CHROMIUM.exists():
        unavailable(f"no Chromium at {CHROMIUM}: apt-get install chromium")
    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceProcess]:
    # SQLite is enough: this is about the pages, and the pages never touch the database.
    with provisioned("sqlite", tmp_path_factory.mktemp("docs-browser")) as backend:
        launcher = Launcher(backend)
        try:
            yield launcher.server()
        finally:
            launcher.close()


@pytest.fixture(scope="module")
def operations(server: ServiceProcess) -> list[tuple[str, str]]:
    """(METHOD, path) of every operation in /openapi.json, once per tag it is listed under
    (both UIs show an operation in each of its tags' sections)."""
    spec = httpx.get(server.url + "/openapi.json", timeout=10).json()
    ops = [
        (method.upper(), path)
        for path, item in spec["paths"].items()
        for method, op in item.items()
        for _tag in op.get("tags") or ["default"]
    ]
    assert ops, "the served OpenAPI document lists no operation"
    return sorted(ops)


class PageVisit:
    """One page load: every request the page made, how each ended, and the page's errors."""

    def __init__(self, browser: Any, url: str) -> None:
        self.page = browser.new_page(viewport={"width": 1280, "height": 900})
        self.requests: list[Any] = []
        self.errors: list[str] = []
        self.page.on("request", lambda r: self.requests.append(r))
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.add_init_script(RECORD_CSP_VIOLATIONS)
        started = time.monotonic()
        # networkidle: no request in flight for 500 ms, so every request has ended when the
        # assertions read them.
        self.page.goto(url, wait_until="networkidle", timeout=RENDER_TIMEOUT_MS)
        self.load_s = time.monotonic() - started

    def rendered(self, selector: str, script: str, screenshot: str,
                 capsys: pytest.CaptureFixture[str]) -> list[tuple[str, ...]]:
        """Waits for `selector`, saves the full-page screenshot (rendered or not), and returns
        `script` run over every element `selector` matches."""
        from playwright.sync_api import TimeoutError as PlaywrightTimeout

        try:
            self.page.wait_for_selector(selector, timeout=RENDER_TIMEOUT_MS)
            found = True
        except PlaywrightTimeout:
            found = False
        path = screenshot_dir() / screenshot
        path.parent.mkdir(parents=True, exist_ok=True)
        self.page.screenshot(path=str(path), full_page=True)
        with capsys.disabled():  # in CI's log whether the test passes or not
            print(f"\nscreenshot: {path} (page loaded in {self.load_s:.1f} s)")
        assert found, (f"{selector} never appeared; requests: {self.outcomes()}, "
                       f"refused by CSP: {self.csp_violations()}, page errors: {self.errors}")
        return [tuple(x) for x in self.page.eval_on_selector_all(selector, script)]

    def outcomes(self) -> list[tuple[str, str]]:
        """(url, outcome) of every request but those the page's CSP refused: the HTTP status,
        or the failure."""
        out = []
        for r in self.requests:
            if r.failure == "csp":
                continue
            response = r.response()
            out.append((r.url, str(response.status) if response else f"failed: {r.failure}"))
        return out

    def csp_violations(self) -> list[tuple[str, str]]:
        """(directive, blocked URI) of everything the page's policy refused."""
        return [tuple(v) for v in self.page.evaluate("window.cspViolations")]

    def close(self) -> None:
        self.page.close()


@pytest.fixture
def visit(browser: Any, server: ServiceProcess) -> Iterator[Any]:
    visits: list[PageVisit] = []

    def open_page(path: str) -> PageVisit:
        v = PageVisit(browser, server.url + path)
        visits.append(v)
        return v

    yield open_page
    for v in visits:
        v.close()


def is_own(url: str, server: ServiceProcess) -> bool:
    """A request to the server under test on loopback; or a blob: URL of its origin (ReDoc's
    search worker, made in the page's memory: no request leaves the browser)."""
    parts = urlsplit(url.removeprefix("blob:"))
    return parts.scheme == "http" and parts.hostname == "127.0.0.1" and parts.port == server.port


def test_swagger_ui_renders_every_operation_loading_only_from_the_server(visit, server, operations, capsys) -> None:  # type: ignore[no-untyped-def]
    v = visit("/docs")
    rendered = v.rendered(
        "#swagger-ui .opblock",
        """blocks => blocks.map(b => [
            b.querySelector('.opblock-summary-method').textContent.trim(),
            b.querySelector('.opblock-summary-path').getAttribute('data-path')])""",
        "swagger-ui.png", capsys,
    )

    assert sorted(rendered) == operations
    # This service takes no credentials: no Authorize button, no lock on an operation (the
    # secured service's test below clicks both).
    assert v.page.locator(".btn.authorize").count() == 1
    assert not v.page.locator(".btn.authorize").is_visible()
    assert not v.page.locator(".authorization__btn").first.is_visible()
    outcomes = v.outcomes()
    assert [u for u, _ in outcomes if not is_own(u, server)] == []
    assert [(u, o) for u, o in outcomes if o != "200"] == []
    assert sorted(urlsplit(u).path for u, _ in outcomes) == [
        "/docs", "/docs/static/swagger-ui/favicon-32x32.png",
        "/docs/static/swagger-ui/swagger-ui-bundle.js", "/docs/static/swagger-ui/swagger-ui.css",
        "/openapi.json",
    ]
    assert v.csp_violations() == []
    assert v.errors == []


def test_redoc_renders_every_operation_loading_only_from_the_server(visit, server, operations, capsys) -> None:  # type: ignore[no-untyped-def]
    v = visit("/redoc")
    # Each operation's endpoint box: its method, and beside it the path.
    rendered = v.rendered(
        ".http-verb",
        "verbs => verbs.map(v => [v.textContent.trim().toUpperCase(), v.nextElementSibling.textContent.trim()])",
        "redoc.png", capsys,
    )

    assert sorted(rendered) == operations
    outcomes = v.outcomes()
    assert [u for u, _ in outcomes if not is_own(u, server)] == []
    assert [(u, o) for u, o in outcomes if o != "200"] == []
    assert sorted(urlsplit(u).path for u, _ in outcomes if not u.startswith("blob:")) == [
        "/docs/static/redoc/redoc.standalone.js", "/docs/static/swagger-ui/favicon-32x32.png",
        "/openapi.json", "/redoc",
    ]
    assert v.csp_violations() == [("img-src", REDOCLY_LOGO)]
    assert v.errors == []


# --- with authentication on ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServiceProcess, ServiceProcess, str]]:
    """Two servers with API keys on one database: docs open, and docs protected
    (OUTBOX_PROTECT_DOCS); and the super-user's key."""
    import json

    with provisioned("sqlite", tmp_path_factory.mktemp("docs-secured")) as backend:
        launcher = Launcher(backend)
        try:
            settings = {"authentication": "api_key", "super_users": "User:admin"}
            open_docs = launcher.server(**settings)
            key = json.loads(launcher.cli("principals", "create", "admin"))["api_key"]
            protected = launcher.server(**settings, protect_docs=True)
            yield open_docs, protected, key
        finally:
            launcher.close()


def _execute_list_topics(page: Any, *, opened: bool = False) -> str:
    """Try it out on GET /v1/topics (unless `opened` already), Execute, and the status
    Swagger UI shows."""
    block = page.locator("#operations-topics-list_topics")
    if not opened:
        block.locator(".opblock-summary").click()
        block.locator(".try-out__btn").click()
    with page.expect_response(lambda r: urlsplit(r.url).path == "/v1/topics") as answer:
        block.locator(".execute").click()
    status = block.locator(".live-responses-table td.response-col_status:not(.col_header)")
    # The table of an earlier Execute stays until this one's answer is shown.
    page.wait_for_function(
        "s => [...document.querySelectorAll('#operations-topics-list_topics .live-responses-table "
        "td.response-col_status:not(.col_header)')].some(el => el.textContent.trim() === s)",
        arg=str(answer.value.status), timeout=RENDER_TIMEOUT_MS)
    return status.inner_text().strip()


def test_swagger_uis_authorize_button_takes_an_api_key_for_try_it_out(browser, secured, capsys) -> None:  # type: ignore[no-untyped-def]
    server, _, key = secured
    v = PageVisit(browser, server.url + "/docs")
    try:
        v.rendered("#swagger-ui .opblock", "blocks => blocks.map(b => [b.id])", "swagger-ui-authorize-before.png", capsys)
        assert _execute_list_topics(v.page) == "401"
        v.page.locator(".btn.authorize").first.click()
        bearer = v.page.locator(".auth-container").filter(has_text="bearerAuth")
        bearer.locator("input").fill(key)
        bearer.locator("button.authorize").click()
        v.page.locator(".btn-done").first.click()
        assert _execute_list_topics(v.page, opened=True) == "200"
        path = screenshot_dir() / "swagger-ui-authorized.png"
        v.page.screenshot(path=str(path), full_page=False)
        with capsys.disabled():
            print(f"\nscreenshot: {path}")
        sent = [r for r in v.requests if urlsplit(r.url).path == "/v1/topics"]
        assert [r.headers.get("authorization") for r in sent] == [None, f"Bearer {key}"]
        assert v.errors == []
    finally:
        v.close()


def test_protected_docs_ask_the_browser_for_credentials_and_open_with_an_api_key(browser, secured, capsys) -> None:  # type: ignore[no-untyped-def]
    _, server, key = secured
    from playwright.sync_api import Error as PlaywrightError

    anonymous = browser.new_page()
    try:
        # Asked for a name and a password it does not have, headless Chromium gives up.
        with pytest.raises(PlaywrightError, match="ERR_INVALID_AUTH_CREDENTIALS"):
            anonymous.goto(server.url + "/docs")
    finally:
        anonymous.close()
    context = browser.new_context(http_credentials={"username": "admin", "password": key})
    try:
        page = context.new_page()
        page.goto(server.url + "/docs", wait_until="networkidle", timeout=RENDER_TIMEOUT_MS)
        page.wait_for_selector("#swagger-ui .opblock", timeout=RENDER_TIMEOUT_MS)
        path = screenshot_dir() / "swagger-ui-protected.png"
        page.screenshot(path=str(path))
        with capsys.disabled():
            print(f"\nscreenshot: {path}")
        # The browser sends the pair it was given with the page's own requests too.
        assert _execute_list_topics(page) == "200"
    finally:
        context.close()
