"""docker/prometheus/alerts.yml and docker/grafana/outbox-dashboard.json (README.md, "Alerting")
name only metrics a scrape of the service exports: a renamed metric breaks this test, not an
operator's alert at 3 a.m. And the rules are valid Prometheus rules that fire on the series they
are written for: Prometheus' own promtool checks them and runs their unit tests
(docker/prometheus/alerts_test.yml). The dashboard's queries on the gauges read from the
database answer the same however many processes are scraped."""

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


# The gauges every `serve` reads from the same database, so that each scraped process exports
# the same values (README.md, Metrics: "take max()"), and the series each has in the test below.
_DATABASE_GAUGES = {
    "outbox_database_up": ['{}'],
    "outbox_transactions_hanging": ['{}'],
    "outbox_oldest_open_transaction_age_seconds": ['{}'],
    "outbox_group_lag_series_left_out": ['{}'],
    "outbox_partition_series_left_out": ['{}'],
    "outbox_coordinator_last_success_timestamp_seconds": ['{}'],
    "outbox_group_expiry_last_success_timestamp_seconds": ['{}'],
    "outbox_producer_expiry_last_success_timestamp_seconds": ['{}'],
    "outbox_cleaner_last_success_timestamp_seconds": ['{}'],
    "outbox_transactions": ['{state="Ongoing"}', '{state="CompleteCommit"}'],
    "outbox_group_lag": ['{group="g",topic="t",partition="0"}', '{group="g",topic="t",partition="1"}'],
    "outbox_group_lag_unknown": ['{group="h",topic="t",partition="0"}'],
    **{f"outbox_partition_{name}": ['{topic="t",partition="0"}', '{topic="t",partition="1"}']
       for name in ("log_start_offset", "log_end_offset", "last_stable_offset", "records", "bytes")},
}


def _of_instance(expr: str, instance: str) -> str:
    """`expr` with each of its database gauges' selectors narrowed to one scraped process."""
    def narrow(m: re.Match[str]) -> str:
        name, labels = m.group(1), m.group(2)
        inner = f'instance="{instance}"' + (f",{labels[1:-1]}" if labels and labels != "{}" else "")
        return f"{name}{{{inner}}}"

    names = "|".join(sorted(_DATABASE_GAUGES, key=len, reverse=True))
    return re.sub(rf"\b({names})\b(\{{[^}}]*\}})?", narrow, expr)


def _same_over_one_process(queries: list[str], unit: Path) -> subprocess.CompletedProcess[str]:
    """promtool's unit test that each query answers over two processes scraped (instances a and
    b, exporting the same values) what it answers over process a alone, and not nothing."""
    # Both processes export the same values, each gauge its own, rising (for the queries' rate()).
    series = [{"series": _of_instance(name + labels, instance), "values": f"{1000 + i * 7}+{i + 1}x20"}
              for i, (name, all_labels) in enumerate(sorted(_DATABASE_GAUGES.items()))
              for labels in all_labels for instance in ("a", "b")]
    checks = []
    for q in queries:
        one = _of_instance(q, "a")
        checks += [{"expr": expr, "eval_time": "10m", "exp_samples": [{"labels": "{}", "value": value}]}
                   for expr, value in (
                       # As many series: a query that answered one copy of each series per process
                       # would have copies with no partner in the comparison below, unseen by it.
                       (f"count({q}) - count({one})", 0),
                       # None of them with another value (a sum across processes).
                       (f"count(({q}) != ({one})) or vector(0)", 0),
                       (f"count({one}) > bool 0", 1))]
    unit.write_text(yaml.safe_dump({"tests": [{"interval": "1m", "input_series": series,
                                               "promql_expr_test": checks}]}))
    return promtool("test", "rules", str(unit))


def test_no_dashboard_query_counts_a_database_gauge_once_per_scraped_process(tmp_path: Path) -> None:
    """Two `serve` processes scraped answer every dashboard query on the database gauges as one
    does: a query that summed them across processes would double with each process added, and
    one that kept each process's series would list each twice."""
    # Grafana's variables, set to their "All" value.
    queries = [e.replace("$group", ".*").replace("$topic", ".*") for e in dashboard_expressions()
               if metric_names(e) & set(_DATABASE_GAUGES) and not e.startswith("label_values(")]
    assert len(queries) >= 15

    done = _same_over_one_process(queries, tmp_path / "dashboard_test.yml")

    assert done.returncode == 0, done.stdout + done.stderr


def test_the_one_process_check_catches_a_query_answering_a_copy_per_process(tmp_path: Path) -> None:
    done = _same_over_one_process(['outbox_group_lag{group=~".*"}'], tmp_path / "copies_test.yml")

    # Two series more over both processes, caught by the count alone.
    assert done.returncode == 1
    assert done.stderr.count("FAILED") == 1
    assert (r'expr: "count(outbox_group_lag{group=~\".*\"}) - count(outbox_group_lag{instance=\"a\",group=~\".*\"})", '
            'time: 10m,\n        exp: {} 0E+00\n        got: {} 2E+00') in done.stderr


def test_the_one_process_check_catches_a_query_summing_the_processes(tmp_path: Path) -> None:
    done = _same_over_one_process(['sum(outbox_group_lag{group=~".*"})'], tmp_path / "sum_test.yml")

    # One series either way, with twice the value: caught by the comparison.
    assert done.returncode == 1
    assert done.stderr.count("FAILED") == 1
    assert (r'expr: "count((sum(outbox_group_lag{group=~\".*\"})) != (sum(outbox_group_lag{instance=\"a\",'
            r'group=~\".*\"}))) or vector(0)", time: 10m,' '\n        exp: {} 0E+00\n        got: {} 1E+00') in done.stderr


def test_the_one_process_check_passes_a_query_taken_once_across_processes(tmp_path: Path) -> None:
    done = _same_over_one_process(['max without (instance) (outbox_group_lag{group=~".*"})'],
                                  tmp_path / "once_test.yml")

    assert done.returncode == 0, done.stdout + done.stderr


def _readme_alerting() -> str:
    text = (ROOT / "README.md").read_text()
    return text.split("\n### Alerting\n", 1)[1].split("\n## ", 1)[0]


def test_the_readmes_prometheus_yml_saved_at_the_repository_root_loads_the_rules(tmp_path: Path) -> None:
    """README, "Alerting": its prometheus.yml, beside the repository's docker/, is a valid
    configuration whose rule files load, and the command it gives Prometheus names a storage path
    of its own (Debian's default is its service's directory, which a user cannot write)."""
    section = _readme_alerting()
    # The file, then the lines its job takes with OUTBOX_PROTECT_METRICS (a key file beside it).
    [config, credentials] = re.findall(r"```yaml\n(.*?)```", section, re.DOTALL)
    (tmp_path / "docker").symlink_to(ROOT / "docker")
    (tmp_path / "outbox.key").write_text("k\n")

    for written in (config, config + credentials):
        (tmp_path / "prometheus.yml").write_text(written)
        done = promtool("check", "config", str(tmp_path / "prometheus.yml"))
        assert done.returncode == 0, done.stdout + done.stderr
        assert "SUCCESS: 1 rule files found" in done.stdout + done.stderr
    [command] = re.findall(r"`(prometheus --config\.file=prometheus\.yml[^`]*)`", section)
    assert "--storage.tsdb.path=" in command
