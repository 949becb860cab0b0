"""examples/mariadb_orders: two-phase commit between MariaDB and the outbox with a prepared
transaction (KIP-939), killed with SIGKILL at every step of an order and started again: every
order in MariaDB has its event exactly once, and no event exists without its order."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import unavailable
from tests.e2e.conftest import PYTHON, ROOT, Launcher

ORDERS = 8
STEPS = ("before-prepare", "after-prepare", "after-own-commit", "after-outbox-commit")
MARIADB = "mysql://root@127.0.0.1:3306"


@pytest.fixture
def shop_db() -> Iterator[str]:
    """A MariaDB database of its own (MariaDB on 127.0.0.1:3306, root without a password)."""
    pymysql = pytest.importorskip("pymysql")
    name = f"outbox_shop_{uuid.uuid4().hex[:8]}"
    try:
        admin = pymysql.connect(host="127.0.0.1", port=3306, user="root", password="", autocommit=True)
    except pymysql.err.OperationalError as e:
        unavailable(f"MariaDB is not reachable on 127.0.0.1:3306 as root ({e.args[-1]}): "
                    "install and start it (Debian: apt-get install mariadb-server)")
    with admin.cursor() as c:
        c.execute(f"CREATE DATABASE {name}")
    try:
        yield f"{MARIADB}/{name}"
    finally:
        with admin.cursor() as c:
            c.execute(f"DROP DATABASE IF EXISTS {name}")
        admin.close()


def run_shop(url: str, shop_db: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PYTHON, "-m", "examples.mariadb_orders", "--url", url, "--mariadb", shop_db,
                           "--orders", str(ORDERS), *extra], cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_every_order_has_its_event_exactly_once_whatever_step_the_shop_dies_at(launcher: Launcher, shop_db: str) -> None:
    import pymysql

    server = launcher.server()
    with server.client() as c:
        assert c.post("/v1/topics", json={"name": "orders", "partitions": 2}).status_code == 201
    outcomes, logs = [], []
    for i, step in enumerate(STEPS):
        # Orders 1..4 each die at one step; the next run recovers and goes on.
        crashed = run_shop(server.url, shop_db, "--crash-at", f"{step}:{i + 1}")
        outcomes.append((step, crashed.returncode))
        logs.append(crashed.stderr)
        assert "Traceback" not in crashed.stderr, crashed.stderr
        if i == 1:
            server.kill9()  # the outbox service dies too, between two of the shop's runs
            server = launcher.server()
    finished = run_shop(server.url, shop_db)

    assert outcomes == [(step, -signal.SIGKILL) for step in STEPS]
    assert finished.returncode == 0, finished.stderr
    # Each run's recovery, deciding for the run before it: order 2 died prepared before
    # MariaDB's commit (aborted), order 3 prepared and recorded (committed).
    recoveries = [[line for line in log.splitlines() if "prepared transaction" in line] for log in logs[1:]]
    assert [len(r) for r in recoveries] == [0, 1, 1]
    assert "aborted: MariaDB had no order of it" in recoveries[1][0]
    assert "committed: MariaDB had its order" in recoveries[2][0]
    shop = pymysql.connect(host="127.0.0.1", user="root", database=shop_db.rsplit("/", 1)[1])
    with shop.cursor() as c:
        c.execute("SELECT id, total FROM shop_orders ORDER BY id")
        orders = list(c.fetchall())
    shop.close()
    assert orders == [(n, n * 125) for n in range(1, ORDERS + 1)]
    with server.client() as c:
        events: list[Any] = []
        for partition in (0, 1):
            r = c.get(f"/v1/topics/orders/partitions/{partition}/records", params={"offset": 0, "max_records": 1000})
            events += [(int(rec["key"]), rec["value"]["total"]) for rec in r.json()["records"]]
        state = c.get("/v1/transactions/mariadb-shop").json()["state"]
    assert sorted(events) == orders
    assert state == "CompleteCommit"


def test_a_stalled_instance_cannot_commit_an_order_whose_transaction_a_new_one_aborted(
    launcher: Launcher, shop_db: str,
) -> None:
    """Not killed but stalled: instance A prepares order 1 and pauses before its MariaDB
    transaction; B takes over, finds no decision, claims `abort`, aborts. A's MariaDB insert
    then fails on the claimed txn_id, so the order never exists without its event."""
    import pymysql

    from examples.mariadb_orders import Shop, Superseded

    server = launcher.server()
    with server.client() as c:
        assert c.post("/v1/topics", json={"name": "orders", "partitions": 2}).status_code == 201
    a = Shop(server.url, shop_db, "stalled-shop", None)
    a.recover()
    a.producer.begin_transaction()
    a.producer.send("orders", {"order": 1, "total": 125}, key="1")
    prepared = a.producer.prepare_transaction()

    b = Shop(server.url, shop_db, "stalled-shop", None)
    b.recover()
    with pytest.raises(Superseded):
        a.record(1, 125, prepared)

    shop = pymysql.connect(host="127.0.0.1", user="root", database=shop_db.rsplit("/", 1)[1])
    with shop.cursor() as c:
        c.execute("SELECT count(*) FROM shop_orders")
        assert c.fetchone() == (0,)
        c.execute("SELECT outcome FROM outbox_decisions WHERE txn_id = %s", (prepared.txn_id,))
        assert c.fetchone() == ("abort",)
    shop.close()
    with server.client() as c:
        assert c.get("/v1/transactions/stalled-shop").json()["state"] in ("CompleteAbort", "Empty")
        for partition in (0, 1):
            assert c.get(f"/v1/topics/orders/partitions/{partition}/records", params={"offset": 0}).json()["records"] == []


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_it_writes_no_line_per_http_request(launcher: Launcher, shop_db: str) -> None:
    server = launcher.server()
    with server.client() as c:
        assert c.post("/v1/topics", json={"name": "orders", "partitions": 2}).status_code == 201

    done = run_shop(server.url, shop_db)

    assert done.returncode == 0, done.stderr
    assert [line for line in done.stderr.splitlines() if "httpx" in line or "HTTP Request" in line] == []


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_a_run_again_with_nothing_to_place_says_so_in_one_line(launcher: Launcher, shop_db: str) -> None:
    server = launcher.server()
    with server.client() as c:
        assert c.post("/v1/topics", json={"name": "orders", "partitions": 2}).status_code == 201
    assert run_shop(server.url, shop_db).returncode == 0

    again = run_shop(server.url, shop_db)

    assert (again.returncode, again.stdout) == (0, "")
    assert again.stderr == (f"INFO mariadb_orders: MariaDB holds orders up to {ORDERS} already: nothing to place "
                            f"up to --orders {ORDERS}\n")


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_without_its_topic_it_says_how_to_create_it(launcher: Launcher, shop_db: str) -> None:
    server = launcher.server()

    done = run_shop(server.url, shop_db, "--topic", "shop-orders")

    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == (
        "stopping: UNKNOWN_TOPIC_OR_PARTITION: unknown topic 'shop-orders'; create it with: "
        f"OUTBOX_URL={server.url} outbox topics create shop-orders --partitions 2\n")


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_without_an_api_key_it_says_to_give_one_with_api_key_or_outbox_api_key(launcher: Launcher,
                                                                                shop_db: str) -> None:
    server = launcher.server(authentication="api_key")

    done = run_shop(server.url, shop_db)

    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == (
        "stopping: AUTHENTICATION_FAILED: this operation needs credentials: an API key (Authorization: Bearer "
        "outbox_…); give this example its principal's API key with --api-key KEY or OUTBOX_API_KEY=KEY "
        "(`outbox principals create NAME` makes one)\n")


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_with_its_api_key_in_outbox_api_key_it_places_its_orders(launcher: Launcher, shop_db: str) -> None:
    server = launcher.server(authentication="api_key", super_users="User:shop")
    key = json.loads(launcher.cli("principals", "create", "shop"))["api_key"]
    with server.client(headers={"authorization": f"Bearer {key}"}) as c:
        assert c.post("/v1/topics", json={"name": "orders", "partitions": 2}).status_code == 201

    done = subprocess.run([PYTHON, "-m", "examples.mariadb_orders", "--url", server.url, "--mariadb", shop_db,
                           "--orders", "2"], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "OUTBOX_API_KEY": key})

    assert done.returncode == 0, done.stderr
    with server.client(headers={"authorization": f"Bearer {key}"}) as c:
        assert c.get("/v1/transactions/mariadb-shop").json()["state"] == "CompleteCommit"


def test_without_pymysql_it_names_the_install_command() -> None:
    """As after the Quick start, which installs the package without its `examples` extra."""
    hide_pymysql = ("import runpy, sys; sys.modules['pymysql'] = None; sys.argv[0] = 'mariadb_orders'; "
                    "runpy.run_module('examples.mariadb_orders', run_name='__main__')")
    done = subprocess.run([sys.executable, "-c", hide_pymysql, "--orders", "1"], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)

    assert (done.returncode, done.stdout, done.stderr) == (
        1, "", "this example needs PyMySQL, the MariaDB driver: install it with .venv/bin/pip install -e "
               "'.[examples]'\n")
