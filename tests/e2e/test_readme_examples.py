"""README commands beyond the walkthrough (tests/e2e/test_readme.py), run as a newcomer runs them,
in the README's order where the order matters: "Command-line errors" after the walkthrough and
the pizza example, "Consumer groups (KIP-447)" after the walkthrough, "Topic administration" from
a fresh database, "Pointing it at PostgreSQL" as written, and the MariaDB example's lines.

What is changed from the README, and only that: `.venv/bin/python` and `.venv/bin/outbox` are the
interpreter running the tests (the repository's venv in `bash .ci/run`), the service's URL and
port are the test's, and a database the README names is one of the test's own.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
import tomllib
import uuid
from pathlib import Path

import httpx
import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool

from tests.conftest import require_postgres, unavailable
from tests.e2e import readme
from tests.e2e.conftest import ADMIN_URL, ROOT, START_TIMEOUT_S, Launcher, free_port
from tests.e2e.test_mariadb_orders_example import shop_db  # noqa: F401 - a fixture

pytestmark = pytest.mark.e2e

README = (ROOT / "README.md").read_text()
PYTHON = shlex.quote(sys.executable)
STEP_TIMEOUT_S = 120.0


def _as_here(command: str) -> str:
    venv = {".venv/bin/outbox": f"{PYTHON} -m app.cli", ".venv/bin/python": PYTHON}
    return re.sub(r"\.venv/bin/(?:outbox|python)\b", lambda m: venv[m.group(0)], command)


def _env(**variables: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OUTBOX_")}
    return {**env, **variables}


def _bash(script: str, **variables: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "-c", _as_here(script)], cwd=ROOT, env=_env(**variables), capture_output=True,
                          text=True, timeout=STEP_TIMEOUT_S)


def _walkthrough_shell(url: str) -> str:
    """The walkthrough's variables as written, OUTBOX pointed at the test's service."""
    variables = readme.shell_variables(readme.section(README, readme.WALKTHROUGH))
    return f"{variables['J']}\nOUTBOX={url}\n"


def _answer_differences(step: readme.Step, stdout: str) -> list[str]:
    """Where a command answers other than the README shows it: a table (`--table`) compared
    whole as text, so its rows' order too; JSON with the walkthrough's matcher, and as text
    where the README shows the answer whole; [] for a command that prints neither."""
    if "--table" in shlex.split(step.command, comments=True):
        return [] if stdout == step.shown + "\n" else ["the table is not the README's, line for line"]
    try:
        actual = json.loads(stdout)
    except json.JSONDecodeError:
        return []
    if not step.shown:
        return ["the README shows no answer"]
    text = readme.text_mismatch(step.shown, stdout)
    return readme.mismatches(readme.parse_shown(step.shown), actual) + ([text] if text is not None else [])


def _run_console_section(title: str, shell: str, *, answers_as_shown: bool = False, until: str | None = None,
                         **variables: str) -> None:
    """Run the section's commands in order (up to and including the last that contains `until`)."""
    steps = readme.console_steps(readme.section(README, title))
    if until is not None:
        last = max(i for i, step in enumerate(steps) if until in step.command)
        steps = steps[:last + 1]
    _run_steps(steps, shell, answers_as_shown=answers_as_shown, **variables)


# A step that only sets a shell variable for the steps after it (`P=$(curl …)`), as one shell
# would; not a command run with a variable set before it (`OUTBOX_URL=… outbox topics list`).
_ASSIGNMENT = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)=(\$\(.*\)|\S*)", re.DOTALL)


def _run_steps(steps: list[readme.Step], shell: str, *, answers_as_shown: bool = False, **variables: str) -> list[str]:
    """Run the steps in order, each in a bash of its own that is given `shell` and the variables
    the steps before it set; the output of each."""
    outputs = []
    for step in steps:
        assigned = _ASSIGNMENT.fullmatch(step.command)
        script = shell + step.command + (f'\nprintf %s "${assigned.group(1)}"' if assigned else "")
        done = _bash(script, **variables)
        assert done.returncode == 0, f"$ {step.command}\n{done.stdout}{done.stderr}"
        if assigned:  # it prints nothing itself: what came out is the variable's value
            shell += f"{assigned.group(1)}={shlex.quote(done.stdout)}\n"
        elif answers_as_shown:
            differences = _answer_differences(step, done.stdout)
            assert not differences, f"$ {step.command}\n--- README shows:\n{step.shown}\n--- actual:\n{done.stdout}" \
                f"\n--- differences:\n" + "\n".join(differences)
        outputs.append(done.stdout)
    return outputs


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_the_command_line_errors_fail_as_shown_after_the_walkthrough_and_the_pizza_example(launcher: Launcher) -> None:
    server = launcher.server()
    shell = _walkthrough_shell(server.url)
    _run_console_section(readme.WALKTHROUGH, shell)
    # the example's run, as the README shows it, each JSON answer as shown
    _run_console_section("The Python client", shell, answers_as_shown=True)

    steps = readme.console_steps(readme.section(README, "Command-line errors"))
    assert len(steps) == readme.count_prompts(readme.section(README, "Command-line errors"), ".venv/bin/outbox") \
        + readme.count_prompts(readme.section(README, "Command-line errors"), "OUTBOX_PORT=abc")
    for step in steps:
        # The operator tools read the service's database, as they would from the repository root.
        done = _bash(step.command, OUTBOX_DATABASE_URL=launcher.backend.url)
        assert (done.returncode != 0, done.stdout + done.stderr) == (True, step.shown + "\n"), step.command


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_the_consumer_groups_lag_example_answers_as_shown_after_the_walkthrough(launcher: Launcher) -> None:
    server = launcher.server()
    shell = _walkthrough_shell(server.url)
    _run_console_section(readme.WALKTHROUGH, shell)
    # Its own topic and member, made by its own commands; `outbox groups lag` reads the database.
    _run_console_section("Consumer groups (KIP-447)", shell, answers_as_shown=True,
                         OUTBOX_DATABASE_URL=launcher.backend.url)


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_topic_administration_answers_as_shown_from_a_fresh_database_through_consumed_by(launcher: Launcher) -> None:
    server = launcher.server()
    _run_console_section("Topic administration", _walkthrough_shell(server.url), answers_as_shown=True,
                         until='"consumed_by"')


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_the_topic_deletion_example_is_refused_then_done_as_shown_in_the_walkthroughs_shell(launcher: Launcher) -> None:
    """In the shell of the walkthrough, whose producer took the first producer id, as the
    section says it runs: the example's producer has another."""
    if shutil.which("jq") is None:
        unavailable("jq keeps the example's producer id and epoch (Debian: apt-get install jq)")
    server = launcher.server()
    shell = _walkthrough_shell(server.url)
    _run_console_section(readme.WALKTHROUGH, shell)
    with httpx.Client(base_url=server.url) as c:
        assert c.post("/v1/topics", json={"name": "clicks", "partitions": 3}).status_code == 201
    steps = readme.console_steps(readme.section(README, "Topic administration"))
    first = next(i for i, step in enumerate(steps) if "clicks-copier" in step.command)
    last = max(i for i, step in enumerate(steps) if "-X DELETE $OUTBOX/v1/topics/clicks" in step.command)

    outputs = _run_steps(steps[first:last + 1], shell, answers_as_shown=True)

    refused = next(i for i, step in enumerate(steps[first:last + 1]) if "TOPIC_HAS_OPEN_TRANSACTIONS" in step.shown)
    assert json.loads(outputs[refused])["error_code"] == "TOPIC_HAS_OPEN_TRANSACTIONS"
    assert (steps[last].shown, outputs[-1]) == ("204", "204\n")


def _postgres_block() -> list[str]:
    (block,) = readme.indented_blocks(readme.section(README, "Pointing it at PostgreSQL"))
    return block.splitlines()


def test_pointing_it_at_postgresql_runs_as_written(tmp_path: Path) -> None:
    lines = _postgres_block()
    url = next(line.split("=", 1)[1] for line in lines if line.startswith("export OUTBOX_DATABASE_URL="))
    admin = make_url(ADMIN_URL)
    readme_url = make_url(url)
    require_postgres()
    if "OUTBOX_TEST_POSTGRES_URL" in os.environ and \
            (readme_url.host, readme_url.port, readme_url.username) != (admin.host, admin.port or 5432, admin.username):
        pytest.skip(f"the README's example is a server on {readme_url.host}:{readme_url.port} as "
                    f"{readme_url.username}; the tests' is {admin.render_as_string(hide_password=True)}")
    name = f"outbox_readme_{uuid.uuid4().hex[:10]}"
    script = "\n".join(lines).replace(f" {readme_url.database}\n", f" {name}\n") \
        .replace(f"/{readme_url.database}\n", f"/{name}\n")
    assert script.count(name) == 2, script  # the database created is the one the URL names
    *setup, serve = script.splitlines()
    log = tmp_path / "serve.log"
    port = free_port()
    with open(log, "wb") as out:
        process = subprocess.Popen(["bash", "-c", _as_here("set -e\n" + "\n".join(setup) + "\nexec " + serve)],
                                   cwd=ROOT, env=_env(OUTBOX_PORT=str(port)), stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        status = None
        while status != 200 and time.monotonic() < deadline:
            assert process.poll() is None, f"exited {process.returncode}:\n{log.read_text()}"
            try:
                status = httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2).status_code
            except httpx.TransportError:
                time.sleep(0.2)
        assert status == 200, log.read_text()
    finally:
        process.terminate()
        process.wait(20)
        engine = create_engine(ADMIN_URL, isolation_level="AUTOCOMMIT", poolclass=NullPool)
        with engine.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        engine.dispose()


def _mariadb_block() -> tuple[list[str], str]:
    """The MariaDB example's lines, and the paragraph after them."""
    part = readme.section(README, "Appending in your own transaction (the outbox pattern)")
    (block,) = [b for b in readme.indented_blocks(part) if "examples.mariadb_orders" in b]
    after = part[part.index(block.splitlines()[-1]) + len(block.splitlines()[-1]):].split("\n\n", 2)[1]
    return block.splitlines(), after


def test_the_readme_installs_the_extra_that_brings_what_the_mariadb_example_imports() -> None:
    lines, _ = _mariadb_block()
    (install,) = [line for line in lines if "pip install" in line]
    extra = re.fullmatch(r"\.venv/bin/pip install -e '\.\[(\w+)\]'", install)
    assert extra is not None, install
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert any(requirement.startswith("PyMySQL") for requirement in extras[extra.group(1)])


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_the_mariadb_example_runs_as_the_readme_shows(launcher: Launcher, shop_db: str) -> None:  # noqa: F811
    server = launcher.server()
    lines, after = _mariadb_block()
    run = [line for line in lines if "pip install" not in line]  # installed already: the `test` extra has it
    assert "examples.mariadb_orders" in run[-1]
    # The shop's tables in a database of the test's own, not the server's shared `test`.
    done = _bash(_walkthrough_shell(server.url) + "\n".join(run) + f" --mariadb {shop_db}")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == re.findall(r"`(order \d+ placed)`", after)
