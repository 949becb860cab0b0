"""`outbox --help` on --api-key-file: OUTBOX_API_KEY holds the key itself, so the help must not
read as if the variable named a file (a path put there is sent as the key, and refused with
AUTHENTICATION_FAILED)."""

from __future__ import annotations

import pytest

from app.cli import build_parser


@pytest.mark.parametrize("argv", [["--help"], ["topics", "list", "--help"]])
def test_the_api_key_file_help_says_the_variable_holds_the_key_not_a_file(
        argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(argv)
    said = " ".join(capsys.readouterr().out.split())
    assert "default $OUTBOX_API_KEY" not in said
    assert ("--api-key-file FILE with --url: a file holding the API key; without it, the key itself is read "
            "from $OUTBOX_API_KEY (the variable holds the key, not a file)") in said
