"""docker/prometheus/alerts.yml and docker/grafana/outbox-dashboard.json (README.md, "Alerting")
name only metrics a scrape of the service exports: a renamed metric breaks this test, not an
operator's alert at 3 a.m. And the rules are valid Prometheus rules that fire on the series they
are written for: Prometheus' own promtool checks them and runs their unit tests
(docker/prometheus/alerts_test.yml)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import yaml

from tests.conftest import unavailable
from tests.helpers import batch, create_topic, send

ROOT = Path(__file__).resolve().parents[2]
ALERTS = ROOT / "docker" / "prometheus" / "alerts.yml"
ALERTS_TEST = ROOT / "docker" / "prometheus" / "alerts_test.yml"
DASHBOARD = ROOT / "docker" / "grafana" / "outbox-dashboard.json"
PROMTOOL_TIMEOUT_S = 60

# What the exposition format adds to a family's name in its samples (a counter's TYPE line
# names it with its _total already).
_SUFFIXES = {"histogram": ("_bucket", "_sum", "_count")}


def exported_names(client) -> set[str]:  # type: ignore[no-untyped-def]
    """Every series name a scrape exposes, or would for a family whose labels have no sample yet
    (a counter of errors none of which happened)."""
    text = client.get("/metrics").text
    names = set()
    for name, kind in re.findall(r"^# TYPE (\S+) (\S+)$", text, re.MULTILINE):
        names.update(name + suffix for suffix in _SUFFIXES.get(kind, ("",)))
    return names


def metric_names(expr: str) -> set[str]:
    return set(re.findall(r"\boutbox_[a-z0-9_]+", expr))


def alert_expressions() -> dict[str, str]:
    rules = [r for g in yaml.safe_load(ALERTS.read_text())["groups"] for r in g["rules"]]
    return {r["alert"]: r["expr"] for r in rules}


def dashboard_expressions() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    exprs += [v["definition"] for v in dashboard["templating"]["list"] if v["type"] == "query"]
    return exprs


def test_every_alert_names_only_metrics_a_scrape_exports(client) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "orders", 1)
    exported = exported_names(client)
    exprs = alert_expressions()
    assert sorted(exprs) == [
        "OutboxCleanerStalled", "OutboxCoordinatorStalled", "OutboxDatabaseDown", "OutboxGroupLagGrowing",
        "OutboxGroupLagHigh", "OutboxGroupLagUnknown", "OutboxLagSeriesLeftOut", "OutboxOldTransactionOpen",
        "OutboxPartitionSeriesLeftOut", "OutboxTransactionsHanging"]
    for alert, expr in exprs.items():
        assert metric_names(expr), alert
        assert metric_names(expr) <= exported, (alert, metric_names(expr) - exported)


def test_every_dashboard_expression_names_only_metrics_a_scrape_exports(client) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "orders", 1)
    assert send(client, [batch("orders", 0, ["x"])]).status_code == 200
    exported = exported_names(client)
    named = set().union(*(metric_names(e) for e in dashboard_expressions()))
    assert named - exported == set()
    # It charts every gauge the service reads from the database for operators.
    assert {"outbox_group_lag", "outbox_group_lag_unknown", "outbox_partition_log_end_offset",
            "outbox_partition_last_stable_offset", "outbox_partition_log_start_offset", "outbox_partition_records",
            "outbox_partition_bytes", "outbox_oldest_open_transaction_age_seconds", "outbox_transactions",
            "outbox_transactions_hanging", "outbox_cleaner_last_success_timestamp_seconds",
            "outbox_coordinator_last_success_timestamp_seconds"} <= named


def test_a_name_the_service_does_not_export_is_caught(client) -> None:  # type: ignore[no-untyped-def]
    assert metric_names("rate(outbox_group_lags[5m]) > 0") - exported_names(client) == {"outbox_group_lags"}


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    path = shutil.which("promtool")
    if path is None:
        unavailable("promtool is not installed: Debian's `prometheus` package has it "
                    "(apt-get install --no-install-recommends prometheus); `bash .ci/run` installs it")
    return subprocess.run([path, *args], capture_output=True, text=True, timeout=PROMTOOL_TIMEOUT_S)


def test_promtool_finds_every_alert_rule_valid() -> None:
    done = promtool("check", "rules", str(ALERTS))

    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(alert_expressions())} rules found" in done.stdout


def test_each_alert_fires_on_its_unit_tests_series_and_not_before_its_for_has_passed() -> None:
    done = promtool("test", "rules", str(ALERTS_TEST))

    assert done.returncode == 0, done.stdout + done.stderr
    # Each alert has its unit test: one where it fires, and the evaluation before, where it does not.
    tests = yaml.safe_load(ALERTS_TEST.read_text())["tests"]
    checked = [(c["alertname"], bool(c["exp_alerts"])) for t in tests for c in t["alert_rule_test"]]
    assert sorted(set(checked)) == sorted((alert, fires) for alert in alert_expressions() for fires in (False, True))
