"""tests/e2e/readme.py: how README.md is read (commands, responses, `…`), without a service.

The matcher is held to refusals as much as to matches, so that a matcher that accepts
everything fails here and the end-to-end walkthrough test cannot pass by matching nothing.
"""

from __future__ import annotations

import ast
import builtins
import re
import shlex
from pathlib import Path

import pytest

from tests.e2e.readme import (
    WALKTHROUGH,
    Step,
    console_steps,
    count_prompts,
    mismatches,
    parse_shown,
    quick_start_command,
    section,
    shell_variables,
    text_mismatch,
)

README = (Path(__file__).resolve().parents[2] / "README.md").read_text()


def matches(shown: str, actual: object) -> bool:
    return mismatches(parse_shown(shown), actual) == []


# --- the matcher -----------------------------------------------------------------------------------


def test_a_response_without_ellipsis_must_be_equal() -> None:
    assert matches('{"a":1,"b":[true,null,"x"]}', {"a": 1, "b": [True, None, "x"]})
    assert not matches('{"a":1}', {"a": 2})
    assert not matches('{"a":"x"}', {"a": "y"})
    assert not matches('[1,2]', [2, 1])


def test_a_member_missing_from_the_response_is_a_mismatch() -> None:
    assert not matches('{"a":1,"b":2}', {"a": 1})


def test_a_member_the_readme_does_not_show_is_a_mismatch_without_ellipsis() -> None:
    assert not matches('{"a":1}', {"a": 1, "b": 2})


def test_types_must_be_equal_too() -> None:
    assert not matches('{"amount":11}', {"amount": 11.0})
    assert not matches('{"n":1}', {"n": True})
    assert not matches('{"n":null}', {"n": 0})
    assert not matches('{"n":"1"}', {"n": 1})


def test_ellipsis_object_matches_any_object_and_only_an_object() -> None:
    assert matches('{"config":{…}}', {"config": {"cleanup_policy": "delete", "retention_ms": 1}})
    assert matches('{"config":{…}}', {"config": {}})
    assert not matches('{"config":{…}}', {"config": []})
    assert not matches('{"config":{…}}', {"config": None})
    assert not matches('{"config":{…}}', {})


def test_ellipsis_array_matches_any_array_and_only_an_array() -> None:
    assert matches('{"partitions":[…]}', {"partitions": [{"partition": 0}, {"partition": 1}]})
    assert matches('{"partitions":[…]}', {"partitions": []})
    assert not matches('{"partitions":[…]}', {"partitions": {}})
    assert not matches('{"partitions":[…]}', {"partitions": "[…]"})


def test_ellipsis_among_members_stands_for_any_further_members() -> None:
    shown = '{"state":"Ongoing",…,"pending_offsets":[]}'
    assert matches(shown, {"state": "Ongoing", "producer_id": 1, "age_ms": 3, "pending_offsets": []})
    assert matches(shown, {"state": "Ongoing", "pending_offsets": []})
    assert not matches(shown, {"state": "CompleteCommit", "producer_id": 1, "pending_offsets": []})
    assert not matches(shown, {"state": "Ongoing", "producer_id": 1})


def test_the_members_beside_an_ellipsis_are_still_compared_in_depth() -> None:
    shown = '{"a":1,…,"p":[{"offset":2,"metadata":null}]}'
    assert matches(shown, {"a": 1, "z": 0, "p": [{"offset": 2, "metadata": None}]})
    assert not matches(shown, {"a": 1, "z": 0, "p": [{"offset": 3, "metadata": None}]})
    assert not matches(shown, {"a": 1, "z": 0, "p": [{"offset": 2, "metadata": None, "x": 1}]})


def test_ellipsis_as_a_value_matches_any_value() -> None:
    assert matches('{"a":…,"b":1}', {"a": [1, {"c": 2}], "b": 1})
    assert not matches('{"a":…,"b":1}', {"a": 0, "b": 2})
    assert not matches('{"a":…,"b":1}', {"b": 1})


def test_ellipsis_among_elements_stands_for_any_run_of_elements() -> None:
    assert matches("[1,…]", [1])
    assert matches("[1,…]", [1, 2, 3])
    assert not matches("[1,…]", [2, 1])
    assert not matches("[1,…]", [])
    assert matches("[…,3]", [1, 2, 3])
    assert not matches("[…,3]", [3, 2])
    assert matches("[1,…,4]", [1, 4])
    assert not matches("[1,…,4]", [1, 2, 3])


def test_ellipsis_in_a_string_stands_for_any_characters_there() -> None:
    shown = '{"message":"offsets pending for orders/0, …"}'
    assert matches(shown, {"message": "offsets pending for orders/0, orders/1"})
    assert matches(shown, {"message": "offsets pending for orders/0, "})
    assert not matches(shown, {"message": "offsets pending for orders/1, orders/0"})
    assert not matches(shown, {"message": 1})


def test_a_time_need_only_be_a_number() -> None:
    for name in ("txn_started_ms", "updated_ms", "committed_ms", "age_ms", "timestamp_ms"):
        assert matches(f'{{"{name}":1795323123865}}', {name: 1800000000000})
        assert not matches(f'{{"{name}":1795323123865}}', {name: None})
        assert not matches(f'{{"{name}":1795323123865}}', {name: "1795323123865"})
        assert not matches(f'{{"{name}":1795323123865}}', {name: True})


def test_a_time_shown_null_must_be_null() -> None:
    assert matches('{"age_ms":null}', {"age_ms": None})
    assert not matches('{"age_ms":null}', {"age_ms": 22})


def test_durations_and_other_ms_fields_are_not_times_and_must_be_equal() -> None:
    assert not matches('{"transaction_timeout_ms":60000}', {"transaction_timeout_ms": 60001})
    assert not matches('{"config":{"retention_ms":604800000}}', {"config": {"retention_ms": 1}})


def test_an_ellipsis_inside_a_string_is_not_a_bare_one() -> None:
    assert parse_shown('{"a":"x…","b":[…]}') == {"a": "x…", "b": ["\x00…"]}


# --- reading the README ----------------------------------------------------------------------------


SAMPLE = """\
## One transaction, step by step

    OUTBOX=http://127.0.0.1:8000
    J='content-type: application/json'

```console
$ curl -s $OUTBOX/a
{"a":1}
$ curl -s -X POST $OUTBOX/b -H "$J" \\
  -d '{"x": [
    1, 2]}'
{"b":
 2}
```

```json
{"not": "a command"}
```

## Next
```console
$ curl -s $OUTBOX/elsewhere
{}
```
"""


def test_a_response_shown_whole_must_be_the_actual_text_spaces_included() -> None:
    # Equal as JSON, not as text: a fetched value keeps the spaces its producer sent.
    assert matches('{"value":{"amount":9.5}}', {"value": {"amount": 9.5}})
    assert text_mismatch('{"value":{"amount":9.5}}', '{"value":{"amount": 9.5}}') is not None
    assert text_mismatch('{"value":{"amount": 9.5}}', '{"value":{"amount": 9.5}}\n') is None


def test_the_text_comparison_leaves_times_and_abbreviated_responses_aside() -> None:
    assert text_mismatch('{"timestamp_ms":1795323123920,"age_ms":null}',
                         '{"timestamp_ms":1796095235023,"age_ms":null}') is None
    assert text_mismatch('{"timestamp_ms":1,"age_ms":null}', '{"timestamp_ms":1,"age_ms":5}') is not None
    assert text_mismatch('{"offset":1}', '{"offset":2}') is not None
    assert text_mismatch('{"name":"income",…}', '{"name": "income", "partition_count": 2}') is None


def test_steps_keep_continuation_lines_and_open_quotes_in_the_command() -> None:
    steps = console_steps(section(SAMPLE, WALKTHROUGH))
    assert steps == [
        Step("curl -s $OUTBOX/a", '{"a":1}'),
        Step('curl -s -X POST $OUTBOX/b -H "$J" \\\n  -d \'{"x": [\n    1, 2]}\'', '{"b":\n 2}'),
    ]


def test_shell_variables_are_read_as_written() -> None:
    assert shell_variables(section(SAMPLE, WALKTHROUGH)) == {
        "OUTBOX": "OUTBOX=http://127.0.0.1:8000",
        "J": "J='content-type: application/json'",
    }


def test_a_missing_section_is_an_error_not_an_empty_walkthrough() -> None:
    with pytest.raises(LookupError):
        section(SAMPLE, "Quick start")


def test_readme_walkthrough_has_every_curl_read_with_a_response_that_parses() -> None:
    text = section(README, WALKTHROUGH)
    steps = console_steps(text)
    assert len(steps) == count_prompts(text, "curl") >= 10
    for step in steps:
        assert step.command.startswith("curl "), step
        parse_shown(step.shown)


def test_readme_quick_start_command_starts_the_service() -> None:
    assert quick_start_command(README).endswith("outbox serve")


def _level_two_sections(readme: str) -> list[str]:
    titles = [line[3:] for line in readme.splitlines() if line.startswith("## ")]
    return [title for title in titles if title != WALKTHROUGH]


def _prose_and_code_lines(text: str) -> list[tuple[bool, str]]:
    """Each line of `text`, marked True where it is code (fenced, or an indented block)."""
    marked: list[tuple[bool, str]] = []
    fenced = False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
            marked.append((True, line))
        else:
            marked.append((fenced or line.startswith("    "), line))
    return marked


def test_every_section_using_the_walkthroughs_variables_says_where_they_come_from() -> None:
    """A newcomer who jumps to a section in a fresh shell gets an empty `$OUTBOX`, and
    `curl -s` then fails without a word: each section's prose names `$OUTBOX` (the walkthrough's
    shell) before its first command that uses it, or the section sets it itself."""
    missing = []
    for title in _level_two_sections(README):
        prose = []
        for is_code, line in _prose_and_code_lines(section(README, title)):
            if is_code and re.match(r"\s*OUTBOX=", line.lstrip("$ ")):
                break
            if is_code and re.search(r"\$OUTBOX\b", line):
                if not any("$OUTBOX" in p for p in prose):
                    missing.append(title)
                break
            if not is_code:
                prose.append(line)
    assert missing == []


def _python_blocks(text: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", text, re.MULTILINE | re.DOTALL)


def test_the_spark_data_source_snippet_defines_every_name_it_uses() -> None:
    """Copied into a script of one's own (README, "Spark"), the snippet runs: `spark` and every
    other name it reads is imported or assigned in it."""
    [snippet] = [b for b in _python_blocks(section(README, "Spark")) if "register(spark)" in b]
    tree = ast.parse(snippet)
    defined = set(dir(builtins))
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            defined |= {(alias.asname or alias.name).split(".")[0] for alias in node.names}
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            defined.add(node.id)
    used = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)}
    assert used - defined == set()


def _job_options(commands: str, job: str) -> list[dict[str, str]]:
    """Each command of `commands` (its indented shell lines, continuations joined, comments left
    out) that runs `job` (as `-m spark_jobs.<job>` or `spark_jobs/<job>.py`): its `--name value` options."""
    runs = []
    for line in commands.replace("\\\n", " ").splitlines():
        if (not line.startswith("    ") or line.strip().startswith("#")
                or f"spark_jobs.{job}" not in line and f"spark_jobs/{job}.py" not in line):
            continue  # prose, comments, other commands (a curl's JSON runs over several lines)
        words = shlex.split(line)
        at = [i for i, w in enumerate(words) if w in (f"spark_jobs.{job}", f"spark_jobs/{job}.py")]
        if at:
            rest = words[at[0] + 1:]
            runs.append({w: v for w, v in zip(rest, [*rest[1:], ""]) if w.startswith("--")})
    return runs


def test_the_spark_sections_streaming_job_writes_no_topic_the_batch_job_writes() -> None:
    """Run one after the other as README's Spark section shows them, the batch job and the
    streaming job read the same orders under two groups, each from its own position (the
    stream's from the log start): into one topic, each pizza order's income would be written
    twice. So the stream's output must be a topic of its own, created with the others."""
    from spark_jobs import pizza_income, pizza_income_stream

    text = section(README, "Spark")
    [created] = re.findall(r"^\s*for t in ([^;]+); do$", text, re.MULTILINE)
    batches = _job_options(text, "pizza_income")
    [stream] = _job_options(text, "pizza_income_stream")
    assert len(batches) == 3  # local on SQLite, local on PostgreSQL, spark-submit
    written = {t for b in batches for t in (b.get("--output", pizza_income.OUTPUT), b.get("--totals", pizza_income.TOTALS))}
    groups = {b.get("--group", pizza_income.GROUP) for b in batches}
    streamed = stream.get("--output", pizza_income_stream.OUTPUT)
    assert stream.get("--group", pizza_income_stream.GROUP) not in groups  # why the output must differ
    assert streamed not in written
    assert streamed in created.split()
    assert written <= set(created.split())
