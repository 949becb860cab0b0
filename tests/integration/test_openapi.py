"""openapi.yaml at the repository root is exactly what the app serves."""

from pathlib import Path

import pytest

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
        ("patch", "/v1/topics/{topic}"), ("post", "/v1/topics/{topic}/partitions"),
        ("delete", "/v1/topics/{topic}"), ("post", "/v1/topics/{topic}/partitions/{partition}/delete-records"),
    }
    served = {(m, p) for p, ops in paths.items() for m in ops}
    assert expected <= served


def test_limits_that_are_settings_are_stated_from_the_serving_settings() -> None:
    settings = Settings(max_partitions_per_topic=8, max_transaction_timeout_ms=5000,
                        default_transaction_timeout_ms=5000, transactional_id_expiration_ms=10_000,
                        group_min_session_timeout_ms=100, group_max_session_timeout_ms=200,
                        group_initial_rebalance_delay_ms=0)
    schemas = create_app(settings).openapi()["components"]["schemas"]

    def bounds(component: str, field: str) -> tuple[int, int]:
        prop = schemas[component]["properties"][field]
        integer = next(s for s in prop.get("anyOf", [prop]) if s.get("type") == "integer")
        return integer["minimum"], integer["maximum"]

    assert bounds("TopicCreate", "partitions") == (1, 8)
    assert bounds("CreatePartitionsRequest", "partition_count") == (1, 8)
    assert bounds("InitProducerIdRequest", "transaction_timeout_ms") == (1, 5000)
    assert bounds("JoinGroupRequest", "session_timeout_ms") == (100, 200)


def _stated(client, component: str, field: str) -> tuple[int, int]:  # type: ignore[no-untyped-def]
    prop = client.get("/openapi.json").json()["components"]["schemas"][component]["properties"][field]
    integer = next(s for s in prop.get("anyOf", [prop]) if s.get("type") == "integer")
    return integer["minimum"], integer["maximum"]


def _topic(client, n: int):  # type: ignore[no-untyped-def]
    return client.post("/v1/topics", json={"name": f"t{n}", "partitions": n})


def _producer(client, n: int):  # type: ignore[no-untyped-def]
    return client.post("/v1/producers", json={"transactional_id": f"p{n}", "transaction_timeout_ms": n})


def _member(client, n: int):  # type: ignore[no-untyped-def]
    assert client.post("/v1/topics", json={"name": "g"}).status_code in (201, 409)
    return client.post("/v1/groups/g/members", json={"topics": ["g"], "session_timeout_ms": n})


# The partition limit these tests create topics at: the document states the setting's value, so
# the default's 1,024 partitions would only make each test slower (17 s a topic on PostgreSQL).
FEW_PARTITIONS = 16


@pytest.fixture
def few_partitions_client(settings, clock):  # type: ignore[no-untyped-def]
    from fastapi.testclient import TestClient

    with TestClient(create_app(settings.model_copy(update={"max_partitions_per_topic": FEW_PARTITIONS}), clock)) as c:
        yield c


@pytest.mark.parametrize("component, field, call, code", [
    ("TopicCreate", "partitions", _topic, "INVALID_PARTITIONS"),
    ("InitProducerIdRequest", "transaction_timeout_ms", _producer, "INVALID_TRANSACTION_TIMEOUT"),
    ("JoinGroupRequest", "session_timeout_ms", _member, "INVALID_SESSION_TIMEOUT"),
])
def test_the_stated_limit_is_the_one_checked(few_partitions_client, component, field, call, code) -> None:  # type: ignore[no-untyped-def]
    client = few_partitions_client
    low, high = _stated(client, component, field)
    if field == "partitions":
        assert high == FEW_PARTITIONS
    for n in (low, high):
        r = call(client, n)
        assert r.status_code in (200, 201), r.text
    for n in (low - 1, high + 1):
        r = call(client, n)
        assert (r.status_code, r.json()["error_code"]) == (400, code)


def test_the_stated_partition_count_limit_of_create_partitions_is_the_one_checked(few_partitions_client) -> None:  # type: ignore[no-untyped-def]
    client = few_partitions_client
    _, high = _stated(client, "CreatePartitionsRequest", "partition_count")
    assert high == FEW_PARTITIONS
    assert client.post("/v1/topics", json={"name": "grow"}).status_code == 201
    over = client.post("/v1/topics/grow/partitions", json={"partition_count": high + 1})
    assert (over.status_code, over.json()["error_code"]) == (400, "INVALID_PARTITIONS")
    assert client.post("/v1/topics/grow/partitions", json={"partition_count": high}).status_code == 200


def test_the_topic_administration_operations_have_stable_operation_ids() -> None:
    paths = create_app(Settings()).openapi()["paths"]
    assert {
        (method, path): paths[path][method]["operationId"]
        for path, method in (("/v1/topics/{topic}", "patch"), ("/v1/topics/{topic}/partitions", "post"),
                             ("/v1/topics/{topic}", "delete"),
                             ("/v1/topics/{topic}/partitions/{partition}/delete-records", "post"))
    } == {
        ("patch", "/v1/topics/{topic}"): "alter_topic_config",
        ("post", "/v1/topics/{topic}/partitions"): "create_partitions",
        ("delete", "/v1/topics/{topic}"): "delete_topic",
        ("post", "/v1/topics/{topic}/partitions/{partition}/delete-records"): "delete_records",
    }


def test_outbox_openapi_s_help_says_where_it_writes_and_how_to_print_instead(capsys: pytest.CaptureFixture[str]) -> None:
    from app.cli import build_parser

    with pytest.raises(SystemExit):
        build_parser().parse_args(["openapi", "--help"])

    helped = " ".join(capsys.readouterr().out.split())
    assert "--output FILE, -o FILE the file to write, replaced if it exists (default: openapi.yaml in the current " \
           "directory; - writes to standard output)" in helped


def test_outbox_openapi_says_what_file_it_wrote_and_whether_it_replaced_one(tmp_path, cli) -> None:  # type: ignore[no-untyped-def]
    target = tmp_path / "doc.yaml"
    first = cli(None, "openapi", "-o", str(target))
    size = len(target.read_bytes())
    again = cli(None, "openapi", "-o", str(target))
    assert (first.returncode, first.stdout, first.stderr) == (
        0, "", f"wrote {target} ({size} bytes); `outbox openapi -o -` prints it instead\n")
    assert again.stderr == f"replaced {target} ({size} bytes); `outbox openapi -o -` prints it instead\n"
