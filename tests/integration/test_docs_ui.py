"""/docs and /redoc load everything from this service, in process (no browser, no database).

tests/e2e/test_docs_browser.py renders the same pages in Chromium; this suite catches a page
that points at another host, or an asset that is missing from the package, where no browser
is installed.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from fastapi.testclient import TestClient
from prometheus_client import REGISTRY

from app.api import docs_ui
from app.api.app import create_app
from app.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
PAGES = ["/docs", "/redoc"]
CONTENT_TYPES = {".js": "text/javascript", ".css": "text/css", ".png": "image/png",
                 ".json": "application/json"}


class _References(HTMLParser):
    """Every URL a page makes the browser load: src and href attributes, ReDoc's spec-url,
    and the `url:` Swagger UI is started with in the inline script."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._in_script = tag == "script"
        self.urls += [v for k, v in attrs if k in ("src", "href", "spec-url") and v is not None]

    def handle_endtag(self, tag: str) -> None:
        self._in_script = False

    def handle_data(self, data: str) -> None:
        if self._in_script:
            self.urls += re.findall(r"""\burl:\s*['"]([^'"]+)['"]""", data)


def references(html: str) -> list[str]:
    parser = _References()
    parser.feed(html)
    return parser.urls


@pytest.fixture(scope="module")
def client() -> TestClient:
    # No `with`: the lifespan (database, coordinator) never starts; these pages need neither.
    return TestClient(create_app(Settings()))


def test_swagger_ui_loads_its_script_style_favicon_and_the_spec_from_this_service(client) -> None:  # type: ignore[no-untyped-def]
    r = client.get("/docs")
    assert r.status_code == 200
    assert sorted(references(r.text)) == [
        "/docs/static/swagger-ui/favicon-32x32.png",
        "/docs/static/swagger-ui/swagger-ui-bundle.js",
        "/docs/static/swagger-ui/swagger-ui.css",
        "/openapi.json",
    ]


def test_redoc_loads_its_script_favicon_and_the_spec_from_this_service(client) -> None:  # type: ignore[no-untyped-def]
    r = client.get("/redoc")
    assert r.status_code == 200
    assert sorted(references(r.text)) == [
        "/docs/static/redoc/redoc.standalone.js",
        "/docs/static/swagger-ui/favicon-32x32.png",
        "/openapi.json",
    ]


@pytest.mark.parametrize("page", PAGES)
def test_docs_page_names_no_other_host(client, page: str) -> None:  # type: ignore[no-untyped-def]
    html = client.get(page).text
    assert "http://" not in html and "https://" not in html and "//" not in references(html)
    assert [u for u in references(html) if urlsplit(u).scheme or urlsplit(u).netloc] == []


@pytest.mark.parametrize("page", PAGES)
def test_every_asset_a_docs_page_references_answers_200_with_its_content_type(client, page: str) -> None:  # type: ignore[no-untyped-def]
    for url in references(client.get(page).text):
        r = client.get(url)
        assert r.status_code == 200, url
        assert r.headers["content-type"].split(";")[0] == CONTENT_TYPES[Path(url).suffix], url
        assert len(r.content) > 0, url


@pytest.mark.parametrize("page", PAGES)
def test_docs_page_forbids_the_browser_to_load_from_any_other_origin(client, page: str) -> None:  # type: ignore[no-untyped-def]
    policy = client.get(page).headers["content-security-policy"]
    directives = {d.split()[0]: d.split()[1:] for d in policy.split(";") if d.strip()}
    assert directives["default-src"] == ["'self'"]
    allowed = {"'self'", "'unsafe-inline'", "data:", "blob:", "'none'"}
    assert {d: [s for s in sources if s not in allowed] for d, sources in directives.items()} == {
        d: [] for d in directives
    }


@pytest.mark.parametrize("page", PAGES)
def test_docs_page_behind_a_proxy_prefix_loads_everything_from_under_it(page: str) -> None:
    # uvicorn --root-path /outbox: the proxy strips the prefix, the browser still needs it.
    client = TestClient(create_app(Settings()), root_path="/outbox")
    urls = references(client.get(f"/outbox{page}").text)
    assert [u for u in urls if not u.startswith("/outbox/")] == []
    assert {u: client.get(u).status_code for u in urls} == {u: 200 for u in urls}


def test_docs_pages_are_not_in_the_openapi_document(client) -> None:  # type: ignore[no-untyped-def]
    paths = client.get("/openapi.json").json()["paths"]
    assert [p for p in paths if p.startswith(("/docs", "/redoc"))] == []


def test_docs_assets_are_counted_under_one_route_template_not_one_series_per_file(client) -> None:  # type: ignore[no-untyped-def]
    labels = {"method": "GET", "route": "/docs/static/{path:path}", "status": "200"}
    before = REGISTRY.get_sample_value("outbox_http_requests_total", labels) or 0.0
    assert client.get("/docs/static/swagger-ui/swagger-ui.css").status_code == 200
    assert client.get("/docs/static/redoc/redoc.standalone.js").status_code == 200
    assert REGISTRY.get_sample_value("outbox_http_requests_total", labels) == before + 2


@pytest.mark.parametrize("path", ["%2E%2E/docs_ui.py", "swagger-ui/%2E%2E/%2E%2E/docs_ui.py",
                                  "%2E%2E%5Cdocs_ui.py", "/etc/passwd", "swagger-ui"])
def test_docs_static_files_serve_nothing_but_the_files_in_their_folder(client, path: str) -> None:  # type: ignore[no-untyped-def]
    r = client.get(f"/docs/static/{path}")
    assert (r.status_code, r.json()["error_code"]) == (404, "NOT_FOUND")


def test_vendored_bundles_are_the_versions_named_in_code_and_in_their_readme() -> None:
    static = docs_ui.STATIC_DIR
    swagger = (static / "swagger-ui" / "swagger-ui-bundle.js").read_text()
    redoc = (static / "redoc" / "redoc.standalone.js").read_text()
    readme = (static / "README.md").read_text()
    assert re.findall(r'PACKAGE_VERSION:"([^"]+)"', swagger) == [docs_ui.SWAGGER_UI_VERSION]
    assert re.findall(r'" ReDoc Version: ","([^"]+)"', redoc) == [docs_ui.REDOC_VERSION]
    assert f"| `swagger-ui-dist` | {docs_ui.SWAGGER_UI_VERSION} |" in readme
    assert f"| `redoc` | {docs_ui.REDOC_VERSION} |" in readme


@pytest.mark.parametrize("folder", ["swagger-ui", "redoc"])
def test_vendored_bundles_ship_with_their_licences(folder: str) -> None:
    names = {p.name for p in (docs_ui.STATIC_DIR / folder).iterdir()}
    bundle = {"swagger-ui": "swagger-ui-bundle.js", "redoc": "redoc.standalone.js"}[folder]
    assert {"LICENSE", f"{bundle}.LICENSE.txt"} <= names


@pytest.mark.parametrize("authentication, authorize_shown", [(None, False), ("api_key", True)])
def test_swagger_uis_authorize_button_is_shown_only_where_the_service_takes_credentials(
        tmp_path: Path, authentication: str | None, authorize_shown: bool) -> None:
    settings = Settings(database_url=f"sqlite:///{tmp_path}/outbox.db", authentication=authentication)
    client = TestClient(create_app(settings))  # no lifespan: the pages need no database
    assert (docs_ui.NO_AUTHORIZE_STYLE not in client.get("/docs").text) == authorize_shown
    # The document names the schemes either way: a client may send credentials to any service.
    assert set(client.get("/openapi.json").json()["components"]["securitySchemes"]) == {"bearerAuth", "basicAuth"}
