"""openapi.yaml at the repository root is exactly what the app serves."""

from pathlib import Path

import yaml

from app.api.app import create_app
from app.settings import Settings

ROOT = Path(__file__).resolve().parents[2]


def test_committed_openapi_yaml_matches_the_served_spec() -> None:
    committed = yaml.safe_load((ROOT / "openapi.yaml").read_text())
    served = create_app(Settings()).openapi()
    assert committed == served, "openapi.yaml is stale: run `outbox openapi` and commit it"


def test_every_contract_path_is_served() -> None:
    paths = create_app(Settings()).openapi()["paths"]
    expected = {
        ("post", "/v1/topics"), ("get", "/v1/topics"), ("get", "/v1/topics/{topic}"),
        ("post", "/v1/producers"),
        ("post", "/v1/transactions/{transactional_id}/begin"),
        ("post", "/v1/records"),
        ("post", "/v1/transactions/{transactional_id}/offsets"),
        ("post", "/v1/transactions/{transactional_id}/commit"),
        ("post", "/v1/transactions/{transactional_id}/abort"),
        ("get", "/v1/transactions/{transactional_id}"), ("get", "/v1/transactions"),
        ("get", "/v1/topics/{topic}/partitions/{partition}/records"),
        ("post", "/v1/groups/{group_id}/offsets"), ("get", "/v1/groups/{group_id}/offsets"),
        ("get", "/healthz"), ("get", "/readyz"),
    }
    served = {(m, p) for p, ops in paths.items() for m in ops}
    assert expected <= served
