"""docker/Dockerfile and docker/compose.yaml, checked without a Docker engine.

No image is built here: these tests read the files and hold them to what the service needs:
the start order (postgres healthy → migrate → api and coordinator), commands the real `outbox`
CLI accepts, settings the service really reads, and an image that installs the package and
does not run as root.
"""

from __future__ import annotations

import http.server
import json
import shlex
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import yaml
from sqlalchemy.engine import make_url

from app.cli import build_parser
from app.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
DOCKER = ROOT / "docker"
DOCKERFILE = DOCKER / "Dockerfile"
COMPOSE = DOCKER / "compose.yaml"
OUTBOX_SERVICES = ("migrate", "api", "coordinator")


def _instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) per Dockerfile instruction, continuation lines joined."""
    out: list[tuple[str, str]] = []
    pending = ""
    for raw in DOCKERFILE.read_text().splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line = pending + line
        pending = ""
        keyword, _, args = line.partition(" ")
        out.append((keyword.upper(), args.strip()))
    return out


def _args_of(keyword: str) -> list[str]:
    return [args for kw, args in _instructions() if kw == keyword]


def _exec_form(args: str) -> list[str]:
    """A CMD/HEALTHCHECK command: JSON exec form, or shell form split like a shell would."""
    return json.loads(args) if args.startswith("[") else shlex.split(args)


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load(COMPOSE.read_text())


def _command(service: dict) -> list[str]:
    cmd = service["command"]
    return shlex.split(cmd) if isinstance(cmd, str) else list(cmd)


def _parse_outbox(argv: list[str]):  # type: ignore[no-untyped-def]
    assert argv[0] == "outbox", argv
    return build_parser().parse_args(argv[1:])


def _healthcheck_argv(test: list[str] | str) -> list[str]:
    if isinstance(test, str):
        return shlex.split(test)
    assert test[0] in ("CMD", "CMD-SHELL"), test
    return test[1:] if test[0] == "CMD" else shlex.split(test[1])


def _python_c_snippet(argv: list[str]) -> str:
    assert argv[:2] == ["python", "-c"], argv
    return argv[2]


# --- compose.yaml ------------------------------------------------------------------------


def test_compose_file_parses_as_yaml_with_the_four_services(compose: dict) -> None:
    assert set(compose["services"]) == {"postgres", "migrate", "api", "coordinator"}


def test_postgres_is_version_15_and_has_a_pg_isready_healthcheck(compose: dict) -> None:
    postgres = compose["services"]["postgres"]
    assert postgres["image"].split(":")[0] == "postgres"
    assert int(postgres["image"].split(":")[1].split(".")[0]) >= 15
    assert "pg_isready" in _healthcheck_argv(postgres["healthcheck"]["test"])


def test_migrate_runs_once_after_postgres_is_healthy(compose: dict) -> None:
    migrate = compose["services"]["migrate"]
    assert migrate["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert str(migrate["restart"]) == "no"
    assert _parse_outbox(_command(migrate)).command == "migrate"


@pytest.mark.parametrize("name", ["api", "coordinator"])
def test_api_and_coordinator_start_only_after_the_migration_completed(compose: dict, name: str) -> None:
    depends_on = compose["services"][name]["depends_on"]
    assert depends_on["migrate"]["condition"] == "service_completed_successfully"


@pytest.mark.parametrize("name", OUTBOX_SERVICES)
def test_every_outbox_command_in_compose_is_accepted_by_the_real_cli(compose: dict, name: str) -> None:
    args = _parse_outbox(_command(compose["services"][name]))
    assert callable(args.func)


def test_the_api_serves_on_all_interfaces_on_the_published_port_without_a_coordinator(compose: dict) -> None:
    api = compose["services"]["api"]
    args = _parse_outbox(_command(api))
    assert (args.command, args.host, args.no_coordinator) == ("serve", "0.0.0.0", True)
    published = [str(p) for p in api["ports"]]
    assert f"{args.port}:{args.port}" in published


def test_the_api_on_all_interfaces_asks_for_credentials(compose: dict) -> None:
    env = compose["services"]["api"]["environment"]
    settings = Settings(**{k.removeprefix("OUTBOX_").lower(): v for k, v in env.items()})
    assert settings.authentication_methods == ("api_key",)
    assert settings.super_user_list == {"User:admin"}


def test_the_coordinator_runs_as_its_own_long_lived_process(compose: dict) -> None:
    args = _parse_outbox(_command(compose["services"]["coordinator"]))
    assert args.command == "coordinator" and not args.once


def test_the_api_healthcheck_asks_readyz_with_valid_python(compose: dict) -> None:
    snippet = _python_c_snippet(_healthcheck_argv(compose["services"]["api"]["healthcheck"]["test"]))
    assert "/readyz" in snippet
    compile(snippet, "<healthcheck>", "exec")


def test_the_one_shot_migration_turns_the_image_healthcheck_off(compose: dict) -> None:
    assert compose["services"]["migrate"]["healthcheck"]["disable"] is True


def _coordinator_settings(compose: dict) -> Settings:
    env = compose["services"]["coordinator"]["environment"]
    return Settings(**{k.removeprefix("OUTBOX_").lower(): v for k, v in env.items()})


def test_the_coordinator_serves_metrics_on_all_interfaces_and_its_healthcheck_asks_that_port(compose: dict) -> None:
    settings = _coordinator_settings(compose)
    assert settings.host == "0.0.0.0" and settings.coordinator_metrics_port is not None
    snippet = _python_c_snippet(_healthcheck_argv(compose["services"]["coordinator"]["healthcheck"]["test"]))
    assert f"http://127.0.0.1:{settings.coordinator_metrics_port}/metrics" in snippet
    compile(snippet, "<healthcheck>", "exec")


def test_the_coordinator_s_metrics_on_all_interfaces_need_credentials(compose: dict) -> None:
    assert _coordinator_settings(compose).metrics_protected


@pytest.mark.parametrize(("status", "healthy"), [(200, True), (401, True), (404, False), (500, False)])
def test_the_coordinator_healthcheck_takes_the_ports_answer_without_credentials_as_healthy(
        compose: dict, status: int, healthy: bool) -> None:
    """Run against a stand-in for the port answering `status`: the health check sends no
    credentials, so the protected port's 401 is its sign of life."""
    settings = _coordinator_settings(compose)
    snippet = _python_c_snippet(_healthcheck_argv(compose["services"]["coordinator"]["healthcheck"]["test"]))

    class Answer(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            self.send_response(status if self.path == "/metrics" else 404)
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    with http.server.ThreadingHTTPServer(("127.0.0.1", 0), Answer) as stand_in:
        threading.Thread(target=stand_in.serve_forever, daemon=True).start()
        try:
            snippet = snippet.replace(f"127.0.0.1:{settings.coordinator_metrics_port}",
                                      f"127.0.0.1:{stand_in.server_address[1]}")
            done = subprocess.run([sys.executable, "-c", snippet], capture_output=True, timeout=60)
        finally:
            stand_in.shutdown()
    assert (done.returncode == 0) == healthy, done.stderr


@pytest.mark.parametrize("name", OUTBOX_SERVICES)
def test_outbox_services_point_at_the_postgres_service_and_do_not_migrate_themselves(
    compose: dict, name: str
) -> None:
    service = compose["services"][name]
    env = service["environment"]
    postgres_env = compose["services"]["postgres"]["environment"]
    url = make_url(env["OUTBOX_DATABASE_URL"])
    assert url.drivername == "postgresql+psycopg"
    assert (url.host, url.port) == ("postgres", 5432)
    assert url.database == postgres_env["POSTGRES_DB"]
    assert url.username == postgres_env.get("POSTGRES_USER", "postgres")
    assert url.password == postgres_env.get("POSTGRES_PASSWORD")
    settings = Settings(**{k.removeprefix("OUTBOX_").lower(): v for k, v in env.items()})
    assert settings.should_auto_migrate is False


@pytest.mark.parametrize("name", OUTBOX_SERVICES)
def test_every_outbox_variable_in_compose_is_a_real_setting(compose: dict, name: str) -> None:
    # Settings ignores unknown variables, so a misspelt one would silently mean its default.
    known = {f"OUTBOX_{field.upper()}" for field in Settings.model_fields}
    env = compose["services"][name]["environment"]
    assert {k for k in env if k.startswith("OUTBOX_")} <= known


@pytest.mark.parametrize("name", OUTBOX_SERVICES)
def test_outbox_services_are_built_from_this_repository_never_pulled(compose: dict, name: str) -> None:
    service = compose["services"][name]
    assert service["pull_policy"] == "build"
    build = service["build"]
    context = (COMPOSE.parent / build["context"]).resolve()
    assert context == ROOT
    assert (context / build["dockerfile"]).resolve() == DOCKERFILE


def test_the_postgres_data_lives_in_a_named_volume(compose: dict) -> None:
    volumes = compose["services"]["postgres"]["volumes"]
    named = [v.split(":")[0] for v in volumes if v.endswith(":/var/lib/postgresql/data")]
    assert named and named[0] in compose["volumes"]


# --- Dockerfile --------------------------------------------------------------------------


def test_the_image_is_based_on_python_3_11_or_newer() -> None:
    (base,) = _args_of("FROM")
    image, _, tag = base.split()[0].partition(":")
    assert image == "python"
    major, minor = (int(p) for p in tag.split("-")[0].split(".")[:2])
    assert (major, minor) >= (3, 11)


def _copies() -> list[tuple[list[str], str]]:
    out = []
    for args in _args_of("COPY"):
        *sources, dest = args.split()
        out.append((sources, dest))
    return out


def test_the_image_pip_installs_the_directory_the_package_was_copied_to() -> None:
    # pyproject.toml names README.md as the readme; app/ and migrations/ are the packages.
    copied = {src for sources, _ in _copies() for src in sources}
    assert {"pyproject.toml", "README.md", "app", "migrations"} <= copied
    (project_dir,) = [dest.rstrip("/") for sources, dest in _copies() if "pyproject.toml" in sources]
    runs = " && ".join(_args_of("RUN"))
    assert f"pip install {project_dir}" in runs or (
        f"WORKDIR {project_dir}" in [f"WORKDIR {w}" for w in _args_of("WORKDIR")] and "pip install ." in runs
    )


def test_every_copied_path_exists_and_passes_the_dockerignore_allow_list() -> None:
    ignore = [ln.strip() for ln in (DOCKER / "Dockerfile.dockerignore").read_text().splitlines()
              if ln.strip() and not ln.startswith("#")]
    assert ignore[0] == "*", "the ignore file is an allow-list: everything out, then exceptions"
    allowed = {ln[1:] for ln in ignore if ln.startswith("!")}
    for sources, _dest in _copies():
        for src in sources:
            assert (ROOT / src).exists(), src
            assert src in allowed, f"{src} is copied but docker/Dockerfile.dockerignore leaves it out"


def test_the_image_does_not_run_as_root() -> None:
    users = _args_of("USER")
    assert users and users[-1] not in ("root", "0")


def test_the_image_exposes_8000_and_serves_there_on_all_interfaces_by_default() -> None:
    assert "8000" in " ".join(_args_of("EXPOSE")).split()
    (cmd,) = _args_of("CMD")
    args = _parse_outbox(_exec_form(cmd))
    assert (args.command, args.host, args.port, args.no_coordinator) == ("serve", "0.0.0.0", 8000, False)


def test_the_image_healthcheck_asks_healthz_with_valid_python() -> None:
    (check,) = _args_of("HEALTHCHECK")
    _, _, command = check.partition("CMD ")
    snippet = _python_c_snippet(_exec_form(command.strip()))
    assert "/healthz" in snippet
    compile(snippet, "<healthcheck>", "exec")


def test_the_image_serving_on_all_interfaces_asks_for_credentials_by_default() -> None:
    env = dict(arg.split("=", 1) for args in _args_of("ENV") for arg in shlex.split(args) if "=" in arg)
    assert Settings(**{k.removeprefix("OUTBOX_").lower(): v for k, v in env.items()
                       if k.startswith("OUTBOX_")}).authentication_methods == ("api_key",)
