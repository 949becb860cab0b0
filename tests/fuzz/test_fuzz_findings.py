"""What the API fuzzer (test_api_fuzz.py) found, each pinned by a minimal test.

1. A body over OUTBOX_MAX_REQUEST_BYTES is refused (413) by app.api.body_limit before any route
   runs, on every operation; the spec declared 413 on Send only.
2. Routing works on the decoded path, so a path parameter holding a percent-encoded '/' was
   answered by another route: GET /v1/topics/orders%2Fpartitions%2F0%2Frecords by the fetch
   of orders/0, GET /v1/groups/g%2Foffsets by the offsets of group "g", and
   GET /v1/transactions/t%2Fbegin with an undeclared 405. Ids never contain '/': refused, 422.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from fastapi.testclient import TestClient

from app.api.app import create_app
from app.settings import Settings
from tests.conftest import FakeClock
from tests.helpers import create_topic

ROOT = Path(__file__).resolve().parents[2]


def test_every_operation_but_healthz_documents_413() -> None:
    spec = yaml.safe_load((ROOT / "openapi.yaml").read_text())
    missing = [f"{method.upper()} {path}" for path, ops in spec["paths"].items()
               for method, op in ops.items()
               if path != "/healthz" and "413" not in op["responses"]]
    assert not missing, f"413 not documented on {missing}"


@pytest.fixture
def small_client(db_url: str) -> Iterator[TestClient]:
    settings = Settings(database_url=db_url, run_coordinator=False, auto_migrate=False,
                        max_request_bytes=1024)
    with TestClient(create_app(settings, FakeClock())) as c:
        yield c


def test_a_body_over_the_size_limit_on_offset_commit_is_refused_with_413(small_client: TestClient) -> None:
    r = small_client.post("/v1/groups/g/offsets", json={"offsets": [
        {"topic": "t", "partition": 0, "offset": 0, "metadata": "m" * 2000}]})
    assert r.status_code == 413, r.text
    assert r.json()["error_code"] == "RECORD_LIST_TOO_LARGE"


@pytest.mark.parametrize("path", [
    "/v1/topics/orders%2Fpartitions%2F0%2Frecords",
    "/v1/groups/g%2Foffsets",
    "/v1/transactions/t%2Fbegin",
    "/v1/topics/orders%2fpartitions%2f0%2frecords",
])
def test_an_encoded_slash_in_a_path_parameter_is_refused_not_routed_elsewhere(
    client: TestClient, path: str
) -> None:
    create_topic(client, "orders")
    r = client.get(path)
    assert r.status_code == 422, r.text
    body = r.json()
    assert body["error_code"] == "INVALID_REQUEST" and body["retriable"] is False, body
