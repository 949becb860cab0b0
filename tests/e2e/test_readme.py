"""The README's Quick start and "One transaction, step by step", run as a newcomer runs them.

A fresh copy of the repository's tracked files (as they are in the working tree, so uncommitted
edits are tested too), the Quick start's command taken from README.md and run there with bash
(it builds its own venv), then every `$ curl` of the walkthrough run with bash, in order, each
answer compared with the one the README shows (tests/e2e/readme.py says how `…` and times are
read). The only thing changed is the port: OUTBOX_PORT, which the command reads, and the
walkthrough's OUTBOX variable, so that the test does not need port 8000 free.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from app.settings import Settings
from tests.e2e import readme
from tests.e2e.conftest import free_port, port_was_taken

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[2]
# The command builds a venv and installs the package: a minute or so with pip's cache.
READY_TIMEOUT_S = 480.0
STEP_TIMEOUT_S = 60.0
MIN_STEPS = 10


def _tracked_files(root: Path) -> list[str]:
    """Tracked files, and new ones git does not ignore: what the next commit would hold."""
    try:
        done = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                              cwd=root, capture_output=True, timeout=60)
    except FileNotFoundError:
        pytest.skip("git is not installed: cannot tell which files a fresh copy holds")
    if done.returncode != 0:
        pytest.skip(f"{root} is not a git checkout: cannot tell which files a fresh copy holds "
                    f"({done.stderr.decode(errors='replace').strip()})")
    return [name for name in done.stdout.decode().split("\0") if name]


def _fresh_copy(root: Path, dest: Path) -> Path:
    for name in _tracked_files(root):
        source = root / name
        # A tracked file deleted in the working tree is uncommitted work too: left out. A
        # directory here is a submodule, which a clone would not fill in either.
        if (not source.exists() and not source.is_symlink()) or (source.is_dir() and not source.is_symlink()):
            continue
        target = dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target, follow_symlinks=False)
    return dest


def _env(port: int | None = None) -> dict[str, str]:
    # The developer's own OUTBOX_* settings (a PostgreSQL URL, another port) are not a newcomer's.
    env = {k: v for k, v in os.environ.items() if not k.startswith("OUTBOX_")}
    if port is not None:
        env["OUTBOX_PORT"] = str(port)
    return env


class QuickStart:
    """The Quick start's command running under bash in its own process group."""

    def __init__(self, command: str, cwd: Path, port: int, log_path: Path) -> None:
        self.command = command
        self.port = port
        self.log_path = log_path
        self._log = open(log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            ["bash", "-c", command], cwd=cwd, env=_env(port), stdin=subprocess.DEVNULL,
            stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True,
        )

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_ready(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        with httpx.Client(base_url=f"http://127.0.0.1:{self.port}", timeout=2.0) as c:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    pytest.fail(f"the Quick start command exited with {self.proc.returncode} before "
                                f"/readyz answered 200:\n$ {self.command}\n{self.output()[-6000:]}")
                try:
                    if c.get("/readyz").status_code == 200 and self.proc.poll() is None:
                        return
                except httpx.TransportError:
                    pass
                time.sleep(0.2)
        pytest.fail(f"the Quick start command's service did not answer GET /readyz with 200 within "
                    f"{READY_TIMEOUT_S:.0f}s on port {self.port}:\n$ {self.command}\n{self.output()[-6000:]}")

    def stop(self) -> None:
        try:
            if self.proc.poll() is None:
                os.killpg(self.proc.pid, signal.SIGTERM)
                try:
                    self.proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                    self.proc.wait(timeout=10)
        finally:
            self._log.close()


def _start(command: str, cwd: Path, log_dir: Path) -> QuickStart:
    """The Quick start on a free port; again on another if the one picked was taken meanwhile
    (the venv install leaves time for that)."""
    for attempt in range(3):
        qs = QuickStart(command, cwd, free_port(), log_dir / f"quick-start-{attempt}.log")
        try:
            qs.wait_ready()
            return qs
        except BaseException:
            qs.stop()
            if attempt == 2 or not port_was_taken(qs.output()):
                raise
    raise AssertionError("unreachable")


def _walkthrough_variables(section: str, port: int) -> str:
    """The walkthrough's shell variable lines as written, OUTBOX pointed at the test's port."""
    variables = readme.shell_variables(section)
    assert set(variables) == {"OUTBOX", "J"}, f"the walkthrough's variables changed: {variables}"
    default = f"OUTBOX=http://127.0.0.1:{Settings.model_fields['port'].default}"
    assert variables["OUTBOX"] == default, (
        f"the walkthrough's {variables['OUTBOX']!r} is not the Quick start's service ({default!r})")
    return f"{variables['J']}\nOUTBOX=http://127.0.0.1:{port}\n"


def _run(step: readme.Step, variables: str, cwd: Path) -> str | None:
    """Where the step's answer differs from the README's, or None."""
    done = subprocess.run(["bash", "-c", variables + step.command], cwd=cwd, env=_env(),
                          capture_output=True, text=True, timeout=STEP_TIMEOUT_S)
    report = (f"$ {step.command}\n--- README shows:\n{step.shown}\n--- actual "
              f"(exit {done.returncode}):\n{done.stdout}{done.stderr}")
    if done.returncode != 0:
        return report
    try:
        actual = json.loads(done.stdout)
    except json.JSONDecodeError:
        return report + "\n--- not JSON"
    found = readme.mismatches(readme.parse_shown(step.shown), actual)
    text = readme.text_mismatch(step.shown, done.stdout)
    found += [text] if text is not None else []
    return report + "\n--- differences:\n" + "\n".join(found) if found else None


def test_readme_quick_start_serves_and_the_walkthrough_answers_what_the_readme_shows(tmp_path: Path) -> None:
    copy = _fresh_copy(ROOT, tmp_path / "outbox")
    text = (copy / "README.md").read_text()
    section = readme.section(text, readme.WALKTHROUGH)
    steps = readme.console_steps(section)
    assert len(steps) == readme.count_prompts(section, "curl") >= MIN_STEPS, (
        f"{len(steps)} commands read, {readme.count_prompts(section, 'curl')} `$ curl` lines "
        f"in the walkthrough")
    assert all(s.command.startswith("curl ") and s.shown for s in steps), steps

    qs = _start(readme.quick_start_command(text), copy, tmp_path)
    try:
        variables = _walkthrough_variables(section, qs.port)
        failures = [f for f in (_run(s, variables, copy) for s in steps) if f is not None]
        if failures:
            pytest.fail(f"{len(failures)} of {len(steps)} walkthrough commands answer other than "
                        f"the README shows:\n\n" + "\n\n".join(failures), pytrace=False)
    finally:
        qs.stop()
