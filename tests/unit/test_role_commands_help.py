"""`outbox grant-reader --help` and its three siblings say what their one positional argument is."""

from __future__ import annotations

import pytest

from app.cli import build_parser


@pytest.mark.parametrize(("command", "said"), [
    ("grant-reader", "the PostgreSQL role to grant, created if it does not exist"),
    ("revoke-reader", "the PostgreSQL role grant-reader was given"),
    ("grant-appender", "the PostgreSQL role to grant, created if it does not exist"),
    ("revoke-appender", "the PostgreSQL role grant-appender was given"),
])
def test_the_role_commands_help_says_what_their_role_argument_is(command: str, said: str,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args([command, "--help"])
    assert f"role {said}" in " ".join(capsys.readouterr().out.split())
