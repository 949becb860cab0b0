"""/console, in process: the page and its files come from this service, under a strict
Content-Security-Policy, and nothing else is served from the package's folders.
tests/e2e/test_console_browser.py uses the console in Chromium."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from app.api import console
from app.api.app import create_app
from app.domain import acl
from app.settings import Settings
from tests.integration.test_docs_ui import CONTENT_TYPES, references

CONTENT_TYPES = {**CONTENT_TYPES, ".png": "image/png"}


@pytest.fixture(scope="module")
def client() -> TestClient:
    return TestClient(create_app(Settings()))


def test_the_console_loads_its_script_styles_and_icon_from_this_service(client) -> None:  # type: ignore[no-untyped-def]
    r = client.get("/console")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    urls = [u for u in references(r.text) if not u.startswith("#")]  # in-page links aside
    assert sorted(urls) == [
        "console/static/console/console.css", "console/static/console/console.js",
        "console/static/console/favicon-32x32.png", "console/static/console/pager.js",
        "console/static/uplot/uPlot.iife.min.js", "console/static/uplot/uPlot.min.css",
    ]
    for url in urls:
        asset = client.get(f"/{url}")
        assert asset.status_code == 200, url
        assert asset.headers["content-type"].split(";")[0] == CONTENT_TYPES[Path(url).suffix], url


def test_the_console_may_load_and_call_nothing_but_this_service(client) -> None:  # type: ignore[no-untyped-def]
    policy = client.get("/console").headers["content-security-policy"]
    directives = {d.split()[0]: d.split()[1:] for d in policy.split(";") if d.strip()}
    assert directives["default-src"] == ["'self'"] and directives["connect-src"] == ["'self'"]
    assert directives["script-src"] == ["'self'"]  # no inline script, no eval
    script = client.get("/console/static/console/console.js").text
    assert re.findall(r"https?://", script) == []


def test_behind_a_proxy_prefix_the_console_loads_from_under_it() -> None:
    client = TestClient(create_app(Settings()), root_path="/outbox")
    urls = [u for u in references(client.get("/outbox/console").text) if not u.startswith("#")]
    # Relative to /outbox/console: the browser resolves them under /outbox/.
    assert {u: client.get(f"/outbox/{u}").status_code for u in urls} == {u: 200 for u in urls}


@pytest.mark.parametrize("path", ["swagger-ui/swagger-ui.css", "README.md", "%2E%2E/console.py",
                                  "console/%2E%2E/%2E%2E/console.py", "uplot",
                                  "console/%2E%2E/swagger-ui/swagger-ui.css", "uplot/%2E%2E/README.md"])
def test_the_consoles_files_are_only_its_own_and_uplot(client, path: str) -> None:  # type: ignore[no-untyped-def]
    assert client.get(f"/console/static/{path}").status_code == 404


def test_uplot_is_the_version_named_in_code_and_readme_with_its_licence() -> None:
    bundle = (console.STATIC_DIR / "uplot" / "uPlot.iife.min.js").read_text()
    readme = (console.STATIC_DIR / "README.md").read_text()
    assert f"| `uplot` | {console.UPLOT_VERSION} |" in readme
    assert "LICENSE" in {p.name for p in (console.STATIC_DIR / "uplot").iterdir()}
    assert "uPlot" in bundle[:200]


def test_the_console_is_not_in_the_openapi_document(client) -> None:  # type: ignore[no-untyped-def]
    assert [p for p in client.get("/openapi.json").json()["paths"] if p.startswith("/console")] == []


def _console_constant(name: str) -> object:
    script = (console.STATIC_DIR / "console" / "console.js").read_text()
    found = re.search(rf"^  const {name} = (.*?);$", script, re.MULTILINE | re.DOTALL)
    assert found, name
    return json.loads(found.group(1))


def test_the_acl_form_offers_the_apis_choices_only() -> None:
    assert _console_constant("ACL_PATTERN_TYPES") == [p.value for p in acl.PatternType]
    assert _console_constant("ACL_PERMISSIONS") == [p.value for p in acl.Permission]
    assert _console_constant("CLUSTER_NAME") == acl.CLUSTER_NAME
    assert _console_constant("ACL_FIELDS") == [f.name for f in dataclasses.fields(acl.AclBinding)]


def test_the_topic_pages_high_watermark_column_shows_the_high_watermark() -> None:
    # The column was filled from log_end_offset, equal to the high watermark on SQLite only: on
    # PostgreSQL an Ongoing transaction of a "commit" producer puts the two apart (glossary,
    # docs/ARCHITECTURE.md), and the page then named the log end a high watermark.
    script = (console.STATIC_DIR / "console" / "console.js").read_text()
    header = 'table(["partition", "log start", "last stable offset", "high watermark", "records", "bytes", ""],'
    assert script.count(header) == 1
    row = script.split(header, 1)[1].split("\n", 2)[1]
    assert "n(p.log_start_offset), n(p.last_stable_offset), n(p.high_watermark)," in row, row


def test_the_group_list_says_more_may_follow_when_its_page_was_cut() -> None:
    # GET /v1/groups is a page: one cut by its limit, or by the ids a request reads past the
    # principal's ACLs, answers next_after, and a list drawn without it looked whole.
    script = (console.STATIC_DIR / "console" / "console.js").read_text()
    body = script.split("  async function groups() {\n", 1)[1].split("\n  }\n", 1)[0]
    assert 'const answer = await api("/v1/groups");' in body
    assert "answer.next_after != null ? " in body and "more may follow" in body
