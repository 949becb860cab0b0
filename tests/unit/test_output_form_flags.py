"""An admin command's output form: --json or --table, one of them; both given is a mistake of the
command line (exit status 2), not the last one kept."""

from __future__ import annotations

import pytest

from app.cli import build_parser
from app.cli.common import EXIT_USAGE, CommandError


@pytest.mark.parametrize("flags", [["--json", "--table"], ["--table", "--json"]])
def test_both_output_forms_are_refused(flags: list[str]) -> None:
    with pytest.raises(CommandError) as refused:
        build_parser().parse_args(["topics", "list", *flags])
    assert (str(refused.value), refused.value.exit_status) == (
        "--json and --table: give one of them (see `outbox topics list --help`)", EXIT_USAGE)


@pytest.mark.parametrize(("flags", "form"), [([], "auto"), (["--json"], "json"), (["--table"], "table"),
                                             (["--table", "--table"], "table")])
def test_one_output_form_is_the_one_given(flags: list[str], form: str) -> None:
    parsed = vars(build_parser().parse_args(["topics", "list", *flags]))
    assert (parsed["output"], [name for name in parsed if name.startswith("_given")]) == (form, [])
