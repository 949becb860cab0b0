"""examples/node_outbox: a Node.js application (node-postgres from the npm registry) places
orders with outbox.append inside its own transaction; a non-Python caller of the SQL function."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.conftest import npm_installed_copy
from tests.helpers import create_topic, fetch
from tests.integration.test_in_database_append import ORDERS, psycopg_url

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "node_outbox"

pytestmark = pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)


@pytest.fixture
def example(tmp_path: Path) -> Path:
    return npm_installed_copy(EXAMPLE, tmp_path, "node-postgres (pg)")


def place_order(example: Path, url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["node", "place_order.js", *args], cwd=example, capture_output=True, text=True,
                          timeout=60, env={**os.environ, "DATABASE_URL": url})


def test_orders_and_their_records_commit_together_from_node(example: Path, db_url: str, client: Any) -> None:
    url = psycopg_url(db_url)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS orders")
        conn.execute(ORDERS)
    create_topic(client, "orders")

    placed = place_order(example, url, "42", "1250")
    retried = place_order(example, url, "42", "1250")
    failed = place_order(example, url, "43", "99", "--fail")

    assert (placed.returncode, placed.stdout.strip()) == (0, "order 42 placed"), placed.stderr
    assert (retried.returncode, retried.stdout.strip()) == (0, "order 42 was published before"), retried.stderr
    assert failed.returncode == 1 and "failing on purpose" in failed.stderr
    with psycopg.connect(url) as conn:
        assert conn.execute("SELECT id, total FROM orders").fetchall() == [(42, 1250)]
    assert [(r["offset"], r["key"], r["value"]) for r in fetch(client, "orders", 0)["records"]] == [
        (0, "42", {"order": 42, "total": 1250})]


def test_without_database_url_it_says_how_to_give_the_credentials(example: Path, db_url: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    done = subprocess.run(["node", "place_order.js", "42", "1250"], cwd=example, capture_output=True, text=True,
                          timeout=60, env=env)

    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == ("DATABASE_URL is not set: DATABASE_URL=postgresql://USER:PASSWORD@HOST:5432/DATABASE "
                           "names the outbox's database and the user and password to connect as\n")


def test_credentials_the_database_refuses_are_named_as_the_problem(example: Path, db_url: str) -> None:
    from sqlalchemy.engine import make_url

    url = make_url(psycopg_url(db_url)).set(username="no_such_shop_role").render_as_string(hide_password=False)
    done = place_order(example, url, "42", "1250")

    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr.endswith("(check the user and password: DATABASE_URL=postgresql://USER:PASSWORD@HOST:5432/"
                                "DATABASE names the outbox's database and the user and password to connect as)\n")


@pytest.fixture(autouse=True)
def _drop_orders(db_url: str) -> Iterator[None]:
    yield
    with psycopg.connect(psycopg_url(db_url), autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS orders")  # the session's database: log tables only
