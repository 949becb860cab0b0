"""The address `outbox serve`'s ready line shows: one a browser on the machine can open."""

from __future__ import annotations

from app.cli.server import ready_url


def test_a_listening_address_is_shown_as_it_is() -> None:
    assert ready_url("http", "127.0.0.1", 8000) == ("http://127.0.0.1:8000", "")
    assert ready_url("https", "10.1.2.3", 8443) == ("https://10.1.2.3:8443", "")


def test_an_ipv6_address_is_bracketed() -> None:
    assert ready_url("http", "::1", 8000) == ("http://[::1]:8000", "")


def test_every_ipv4_address_is_shown_as_the_loopback_and_said() -> None:
    assert ready_url("http", "0.0.0.0", 8002) == ("http://127.0.0.1:8002", ", listening on every address (0.0.0.0)")


def test_every_ipv6_address_is_shown_as_the_ipv6_loopback_and_said() -> None:
    assert ready_url("http", "::", 8002) == ("http://[::1]:8002", ", listening on every address (::)")
