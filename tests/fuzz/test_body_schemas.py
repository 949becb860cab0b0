"""openapi.yaml's request bodies and the decoder agree: every body the document allows is
decoded (never refused as malformed or of the wrong shape).

The document's request schemas are generated from the same msgspec Structs the decoder uses
(app.api.app._add_request_bodies), so this holds by construction unless a check is added to
the decoder that the document does not state, which this test would find (the Send's NUL,
depth and number checks are stated: a pattern, and the value's description).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import schemathesis
from fastapi import routing
from fastapi.routing import APIRoute
from hypothesis import HealthCheck, given, settings

from app.api.app import _json_body, create_app
from app.api.json_body import decode
from app.api.send_body import to_domain
from app.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = schemathesis.openapi.from_path(ROOT / "openapi.yaml")
APP = create_app(Settings())
DOCUMENT = APP.openapi()
# Every route of the app, so that a new router's bodies are held to the document too.
BODIES = {
    route.operation_id: body
    for route in routing.iter_route_contexts(APP.routes)
    if isinstance(route.original_route, APIRoute) and (body := _json_body(route.dependant)) is not None
}


def test_every_operation_with_a_body_in_the_document_has_a_decoder() -> None:
    documented = {
        op["operationId"]
        for path in DOCUMENT["paths"].values()
        for op in path.values()
        if "requestBody" in op
    }
    assert documented == set(BODIES) and len(documented) == 16


def _integral_floats_as_ints(value: object) -> object:
    """JSON Schema's `integer` takes 1.0 too; the service, as Kafka's clients send them, takes
    integers written as integers only (msgspec, and pydantic's strict mode before it). A
    difference no schema keyword can state, so the generated 1.0 is sent as 1."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: _integral_floats_as_ints(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_integral_floats_as_ints(v) for v in value]
    return value


@pytest.mark.parametrize("operation_id", sorted(BODIES))
def test_every_body_the_document_allows_is_decoded(operation_id: str) -> None:
    path, method = next((path, method) for path, ops in DOCUMENT["paths"].items()
                        for method, op in ops.items() if op["operationId"] == operation_id)
    operation = SCHEMA[path][method.upper()]
    body = BODIES[operation_id]

    @settings(max_examples=150, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(case=operation.as_strategy(generation_mode=schemathesis.GenerationMode.POSITIVE))
    def decodes(case: schemathesis.Case) -> None:
        text = json.dumps(_integral_floats_as_ints(case.body)).encode()
        decoded = decode(body._decoder, text)  # raises the refusal it would answer
        if operation_id == "send":
            to_domain(decoded, text, 0)

    decodes()
