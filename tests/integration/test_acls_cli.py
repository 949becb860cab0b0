"""`outbox acls add|remove` grants what it says: the README's own commands, run as written,
store exactly the bindings they name, and a `--resource-pattern-type prefixed` that would turn
a topic name into a prefix along with a transactional id is refused before anything is stored.
On SQLite and PostgreSQL; each command is run by `app.cli.main` in the test's process (the
conftest's `cli`, which answers as `python -m app.cli` does: tests/e2e/test_cli_errors.py
compares the two), each process's start-up having been most of this file's time."""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from app.api.app import create_app
from app.settings import Settings
from tests.e2e import readme
from tests.outbox_command import Run

ROOT = Path(__file__).resolve().parents[2]
SECTION = "Authentication and ACLs"
PROGRAM = ".venv/bin/outbox"


def _readme_acl_commands() -> list[list[str]]:
    """The `outbox acls add` commands of the README's getting-started block, as written."""
    text = readme.section((ROOT / "README.md").read_text(), SECTION)
    # A backslash at the end of a line continues the command, as in the shell.
    commands = [shlex.split(step.command.replace("\\\n", " ")) for step in readme.console_steps(text)]
    found = [c[1:] for c in commands if c[:3] == [PROGRAM, "acls", "add"]]
    assert found, f"README, {SECTION}: no `{PROGRAM} acls add` command"
    return found


def _stored(cli: Run, db_url: str) -> list[tuple[str, str, str, str, str, str]]:
    done = cli(db_url, "acls", "list")
    assert done.returncode == 0, done.stderr
    return sorted((b["principal"], b["resource_type"], b["resource_name"], b["pattern_type"], b["operation"],
                   b["permission"]) for b in json.loads(done.stdout)["acls"])


@pytest.fixture
def readme_acls(db_url: str, cli: Run) -> str:
    for args in _readme_acl_commands():
        done = cli(db_url, *args)
        assert done.returncode == 0, (args, done.stderr)
    return db_url


def test_the_readmes_acl_commands_store_exactly_the_bindings_they_name(readme_acls: str, cli: Run) -> None:
    assert _stored(cli, readme_acls) == [
        ("User:pizza-shop", "group", "pizza-income", "literal", "read", "allow"),
        ("User:pizza-shop", "topic", "income", "literal", "write", "allow"),
        ("User:pizza-shop", "topic", "orders", "literal", "read", "allow"),
        ("User:pizza-shop", "transactional_id", "pizza-income-", "prefixed", "write", "allow"),
        # The read-only operator's.
        ("User:viewer", "cluster", "outbox-cluster", "literal", "describe", "allow"),
        ("User:viewer", "group", "*", "literal", "describe", "allow"),
        ("User:viewer", "topic", "*", "literal", "describe_configs", "allow"),
        ("User:viewer", "topic", "*", "literal", "read", "allow"),
        ("User:viewer", "transactional_id", "*", "literal", "describe", "allow"),
    ]


@pytest.fixture
def shop_client(readme_acls: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[TestClient, dict, dict]]:
    """A service with the README's ACLs, its topics income and income-secret, and the keys of
    the super-user admin and of pizza-shop."""
    monkeypatch.setattr("app.services.security._SCRYPT_N", 2)  # keys hashed cheaply: still scrypt
    settings = Settings(database_url=readme_acls, run_coordinator=False, auto_migrate=False,
                        authentication="api_key", super_users="User:admin")
    app = create_app(settings)
    with TestClient(app) as client:
        security = app.state.services.security
        admin = {"Authorization": f"Bearer {security.create_api_key('admin', by='test').api_key}"}
        shop = {"Authorization": f"Bearer {security.create_api_key('pizza-shop', by='test').api_key}"}
        for name in ("income", "income-secret"):
            r = client.post("/v1/topics", headers=admin, json={"name": name, "partitions": 1})
            assert r.status_code == 201, r.text
        yield client, admin, shop


def _write(client: TestClient, headers: dict, topic: str):  # type: ignore[no-untyped-def]
    return client.post("/v1/records", headers=headers, json={"batches": [
        {"topic": topic, "partition": 0, "records": [{"key": "k", "value": 1}]}]})


def test_the_readmes_acls_let_the_shop_write_to_income(shop_client) -> None:  # type: ignore[no-untyped-def]
    client, _, shop = shop_client
    r = _write(client, shop, "income")
    assert r.status_code == 200, r.text
    assert [(b["topic"], b["base_offset"], b["last_offset"]) for b in r.json()["results"]] == [("income", 0, 0)]


def test_the_readmes_acls_refuse_the_shop_a_write_to_income_secret(shop_client) -> None:  # type: ignore[no-untyped-def]
    client, admin, shop = shop_client
    r = _write(client, shop, "income-secret")
    assert (r.status_code, r.json()["error_code"]) == (403, "TOPIC_AUTHORIZATION_FAILED")
    described = client.get("/v1/topics/income-secret", headers=admin).json()
    assert [p["log_end_offset"] for p in described["partitions"]] == [0]


AMBIGUOUS = ["--allow-principal", "User:pizza-shop", "--operation", "write", "--topic", "income",
             "--transactional-id", "pizza-income-", "--resource-pattern-type", "prefixed"]


def test_a_prefixed_add_naming_a_topic_and_a_transactional_id_is_refused_and_stores_nothing(db_url: str,
                                                                                           cli: Run) -> None:
    done = cli(db_url, "acls", "add", *AMBIGUOUS)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == (
        "outbox: error: --resource-pattern-type prefixed would make --topic and --transactional-id all prefixes: "
        "name one kind of resource per command, and give --resource-pattern-type prefixed only to the one whose "
        "names are prefixes\n")
    assert _stored(cli, db_url) == []


def test_a_prefixed_remove_naming_a_topic_and_a_transactional_id_is_refused_and_removes_nothing(
        readme_acls: str, cli: Run) -> None:
    before = _stored(cli, readme_acls)
    done = cli(readme_acls, "acls", "remove", *AMBIGUOUS)
    assert done.returncode == 2
    assert done.stderr.startswith("outbox: error: --resource-pattern-type prefixed would make --topic and "
                                  "--transactional-id all prefixes") and len(done.stderr.splitlines()) == 1
    assert _stored(cli, readme_acls) == before


def test_a_prefixed_add_of_one_kind_of_resource_and_the_cluster_is_kept(db_url: str, cli: Run) -> None:
    done = cli(db_url, "acls", "add", "--allow-principal", "User:ops", "--operation", "describe",
                   "--topic", "orders-", "--topic", "income-", "--cluster", "--resource-pattern-type", "prefixed")
    assert done.returncode == 0, done.stderr
    assert _stored(cli, db_url) == [
        ("User:ops", "cluster", "outbox-cluster", "literal", "describe", "allow"),
        ("User:ops", "topic", "income-", "prefixed", "describe", "allow"),
        ("User:ops", "topic", "orders-", "prefixed", "describe", "allow"),
    ]


def test_create_acls_over_http_takes_each_bindings_own_pattern_type(shop_client) -> None:  # type: ignore[no-untyped-def]
    # The HTTP door has no shared flag: a prefixed transactional id beside a topic leaves the topic literal.
    client, admin, _ = shop_client
    r = client.post("/v1/acls", headers=admin, json={"acls": [
        {"principal": "User:ops", "resource_type": "topic", "resource_name": "refunds", "operation": "write"},
        {"principal": "User:ops", "resource_type": "transactional_id", "resource_name": "ops-",
         "pattern_type": "prefixed", "operation": "write"}]})
    assert r.status_code == 200, r.text
    listed = client.get("/v1/acls", headers=admin, params={"principal": "User:ops"}).json()["acls"]
    assert sorted((b["resource_type"], b["resource_name"], b["pattern_type"]) for b in listed) == [
        ("topic", "refunds", "literal"), ("transactional_id", "ops-", "prefixed")]


def test_a_prefixed_add_naming_the_cluster_alone_is_refused_and_stores_nothing(db_url: str, cli: Run) -> None:
    # The cluster resource is literal: the flag would do nothing.
    done = cli(db_url, "acls", "add", "--allow-principal", "User:ops", "--operation", "describe", "--cluster",
               "--resource-pattern-type", "prefixed")
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == ("outbox: error: --resource-pattern-type prefixed applies to --topic, --group or "
                           "--transactional-id; the cluster resource (--cluster) is literal\n")
    assert _stored(cli, db_url) == []


def test_the_readme_shows_the_line_its_first_acl_command_prints(db_url: str, cli: Run) -> None:
    text = readme.section((ROOT / "README.md").read_text(), SECTION)
    first = next(step for step in readme.console_steps(text)
                 if shlex.split(step.command.replace("\\\n", " "))[:3] == [PROGRAM, "acls", "add"])
    done = cli(db_url, *shlex.split(first.command)[1:])
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == json.loads(first.shown)
