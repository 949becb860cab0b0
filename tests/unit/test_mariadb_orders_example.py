"""examples/mariadb_orders.py's own answer when the shop's database cannot be reached: one line,
without the password the --mariadb URL may hold. (Its runs against MariaDB and the service are
tests/e2e/test_mariadb_orders_example.py.)"""

from __future__ import annotations

import socket

import pytest

pymysql = pytest.importorskip("pymysql", reason="the example's driver (the `examples` extra)")

from examples import mariadb_orders  # noqa: E402


def _closed_port() -> int:
    """A local port nothing listens on: a connection there is refused at once."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_unreachable_mariadb_is_one_line_without_the_url_s_password(capsys: pytest.CaptureFixture[str]) -> None:
    port = _closed_port()
    status = mariadb_orders.main(["--url", "http://127.0.0.1:1", "--mariadb",
                                  f"mysql://shop:s3cret-pw@127.0.0.1:{port}/test", "--orders", "1"])
    err = capsys.readouterr().err
    assert status == 1
    assert "s3cret-pw" not in err
    assert err.startswith(f"cannot reach MariaDB at mysql://shop:***@127.0.0.1:{port}/test: "), err
    assert len(err.splitlines()) == 1, err
