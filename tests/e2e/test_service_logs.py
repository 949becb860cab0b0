"""What `outbox serve` and `outbox coordinator` write to their log: the line that says serve is
ready, the access line in text and in JSON (OUTBOX_LOG_FORMAT), uvicorn's own lines in the same
format, and no alembic lines."""

from __future__ import annotations

import json
import re
import signal
from pathlib import Path

import httpx
import pytest

from tests.e2e import readme
from tests.e2e.conftest import ServiceProcess, free_port

README = Path(__file__).resolve().parents[2] / "README.md"

pytestmark = pytest.mark.e2e


def stopped(process: ServiceProcess) -> list[str]:
    """The process's log lines once SIGTERM has ended it (its shutdown lines included)."""
    process.proc.send_signal(signal.SIGTERM)
    process.proc.wait(15)
    return process.log_text().splitlines()


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_serve_says_once_that_it_is_ready_with_the_url_of_swagger_ui(launcher) -> None:  # type: ignore[no-untyped-def]
    server = launcher.server()
    server.wait_for_log("outbox is ready at ")
    (ready,) = [line.split(" ", 2)[2] for line in stopped(server) if " is ready at " in line]
    assert ready == f"INFO app.cli: outbox is ready at {server.url} (Swagger UI: {server.url}/docs)"


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_the_quick_start_shows_the_ready_line_as_serve_writes_it(launcher) -> None:  # type: ignore[no-untyped-def]
    server = launcher.server()
    server.wait_for_log("outbox is ready at ")
    (ready,) = [line.split(" ", 2)[2] for line in server.log_text().splitlines() if " is ready at " in line]
    quick_start = " ".join(readme.section(README.read_text(), readme.QUICK_START).split())
    assert f"`{ready.replace(str(server.port), '8000')}`" in quick_start


def test_serve_start_up_and_readyz_write_no_alembic_line(launcher) -> None:  # type: ignore[no-untyped-def]
    server = launcher.server(access_log_probes=True)
    with server.client() as c:
        for _ in range(3):
            assert c.get("/readyz").status_code == 200
    lines = stopped(server)
    assert [line for line in lines if "alembic" in line] == []
    assert sum("outbox.access: GET /readyz 200" in line for line in lines) >= 3


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
@pytest.mark.parametrize(("probes", "routes"), [(True, ["/metrics", "<unmatched>"]), (False, ["<unmatched>"])],
                         ids=["access-log-probes", "default"])
def test_the_coordinators_metrics_port_logs_a_scrape_only_with_access_log_probes(launcher, probes, routes) -> None:  # type: ignore[no-untyped-def]
    # A path of no route after the scrape: logged under either setting, it shows that the port
    # writes access lines at all, and that the scrape before it would have been written by then.
    port = free_port()
    coordinator = launcher.coordinator(coordinator_metrics_port=port, access_log_probes=probes)
    coordinator.wait_for_log("coordinator metrics at ")
    assert httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).status_code == 200
    assert httpx.get(f"http://127.0.0.1:{port}/nowhere", timeout=5).status_code == 404
    logged = [re.search(r"outbox\.access: GET (\S+) ", line) for line in stopped(coordinator)]
    assert [m.group(1) for m in logged if m] == routes


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_the_text_access_line(launcher) -> None:  # type: ignore[no-untyped-def]
    server = launcher.server()
    with server.client() as c:
        c.get("/v1/topics/pizza-orders", headers={"X-Request-ID": "req-42"})
    (line,) = [line for line in stopped(server) if "outbox.access" in line]
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} INFO outbox\.access: "
                        r"GET /v1/topics/\{topic\} 404 \d+\.\dms request_id=req-42", line), line


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_json_format_makes_every_serve_line_a_json_object_with_the_access_fields_as_keys(launcher) -> None:  # type: ignore[no-untyped-def]
    server = launcher.server(log_format="json")
    with server.client() as c:
        c.get("/v1/topics/pizza-orders", headers={"X-Request-ID": "req-42"})
    objects = [json.loads(line) for line in stopped(server)]  # every line, or this raises
    assert all({"time", "level", "logger", "message"} <= o.keys() for o in objects), objects
    assert all("color_message" not in o for o in objects)
    (access,) = [o for o in objects if o["logger"] == "outbox.access"]
    assert {k: access[k] for k in ("level", "method", "route", "status", "request_id")} == {
        "level": "INFO", "method": "GET", "route": "/v1/topics/{topic}", "status": 404, "request_id": "req-42"}
    assert isinstance(access["duration_ms"], float)
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}\+00:00", access["time"]), access["time"]
    uvicorn = {o["message"] for o in objects if o["logger"] == "uvicorn.error"}
    assert {"Application startup complete.", "Application shutdown complete."} <= uvicorn


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_json_format_applies_to_the_coordinator_process(launcher) -> None:  # type: ignore[no-untyped-def]
    worker = launcher.coordinator(log_format="json")
    worker.wait_for_log("coordinator and log cleaner running")
    objects = [json.loads(line) for line in stopped(worker)]
    assert {"logger": "app.cli", "message": "coordinator and log cleaner running against sqlite"}.items() <= objects[-1].items()
    assert all({"time", "level", "logger", "message"} <= o.keys() for o in objects), objects
