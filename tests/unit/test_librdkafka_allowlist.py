"""compat/librdkafka/run's reading of its allowlist and of the runner's output: a line's marks
(`quick`, `sasl=`, `subtests=`), the runs each test is made of, and when a run passed; and the
configuration it gives the runner."""

from __future__ import annotations

import pytest

from tests.librdkafka_run import load

run = load()

# What the runner prints of a test that ran a sub-test and passed (colour codes and all).
PASSED_B = """\x1b[35m[ b_subscribe_with_cb_test:886 ]\x1b[0m
\x1b[32m[ b_subscribe_with_cb_test:886: PASS (12.03s) ]\x1b[0m
|  0113_cooperative_rebalance  |     PASSED     |  13.100s |
"""
# SUBTESTS matching no sub-test: the test passes, having run nothing.
PASSED_NOTHING = "|  0113_cooperative_rebalance  |     PASSED     |   0.010s |\n"


def test_a_line_carries_its_marks_and_its_subtests() -> None:
    listed = run.allowlist("# a comment\n0012 produce_consume quick\n"
                           "0113 cooperative_rebalance subtests=a_assign_tests,b_subscribe  # why\n"
                           "0135 sasl_credentials sasl=PLAIN,SCRAM-SHA-512 quick\n")

    assert listed == [run.Listed("0012", quick=True),
                      run.Listed("0113", subtests=("a_assign_tests", "b_subscribe")),
                      run.Listed("0135", quick=True, sasl=("PLAIN", "SCRAM-SHA-512"))]


@pytest.mark.parametrize("line", ["0012 produce_consume quik", "0113 cooperative_rebalance subtests=",
                                  "0135 sasl_credentials sasl=GSSAPI", "0135 sasl_credentials sasl"])
def test_a_word_the_allowlist_does_not_know_is_refused(line: str) -> None:
    with pytest.raises(ValueError, match="allowlist line 1"):
        run.allowlist(line)


def test_the_allowlist_reads() -> None:
    assert all(len(entry.number) == 4 and entry.number.isdigit() for entry in run.allowlist())


def test_a_sasl_test_runs_once_per_mechanism_it_is_marked_with() -> None:
    listed = run.Listed("0135", sasl=("PLAIN", "SCRAM-SHA-512"))

    assert run.runs_of(listed) == [run.Run("0135", None, "PLAIN"), run.Run("0135", None, "SCRAM-SHA-512")]
    assert run.runs_of(listed, sasl="SCRAM-SHA-256", whole=True) == [run.Run("0135", None, "SCRAM-SHA-256")]


def test_a_test_with_subtests_runs_each_on_its_own_unless_run_whole() -> None:
    listed = run.Listed("0113", subtests=("a_assign_tests", "b_subscribe"))

    assert run.runs_of(listed) == [run.Run("0113", "a_assign_tests"), run.Run("0113", "b_subscribe")]
    assert run.runs_of(listed, whole=True) == [run.Run("0113")]


def test_a_subtest_run_passes_only_if_that_subtest_passed() -> None:
    assert run.passed(PASSED_B, 0, "b_subscribe_with_cb_test")
    assert not run.passed(PASSED_NOTHING, 0, "b_subscribe_with_cb_test")
    assert not run.passed(PASSED_B, 0, "c_subscribe_no_cb_test")


def test_a_whole_run_passes_on_the_summary_row() -> None:
    assert run.passed(PASSED_NOTHING, 0, None)
    assert not run.passed(PASSED_B, 1, None)


def test_a_subtest_given_in_the_environment_must_run_for_the_run_to_pass() -> None:
    whole = run.Run("0113", None, None)
    chosen = run.subtest_of(whole, {"SUBTESTS": "b_subscribe"})

    assert chosen == "b_subscribe"
    assert not run.passed(PASSED_NOTHING, 0, chosen)
    assert run.passed(PASSED_B, 0, chosen)


def test_the_allowlists_subtest_wins_over_the_environments() -> None:
    assert run.subtest_of(run.Run("0113", "a_assign_tests", None), {"SUBTESTS": "b_subscribe"}) == "a_assign_tests"
    assert run.subtest_of(run.Run("0113", None, None), {"SUBTESTS": ""}) is None


def service_on(kafka_port: int, api_key: str | None = None):  # type: ignore[no-untyped-def]
    """A Service as far as its client configuration goes: nothing started."""
    service = object.__new__(run.Service)
    service.kafka_port, service.api_key = kafka_port, api_key
    return service


def test_the_runners_configuration_turns_the_metrics_push_off() -> None:
    assert service_on(9092).client_conf() == "bootstrap.servers=127.0.0.1:9092\nenable.metrics.push=false\n"


def test_a_sasl_configuration_adds_the_suite_principals_credentials() -> None:
    assert service_on(9092, "key-1").client_conf("SCRAM-SHA-512").splitlines()[2:] == [
        "security.protocol=SASL_PLAINTEXT", "sasl.mechanism=SCRAM-SHA-512",
        f"sasl.username={run.SASL_PRINCIPAL}", "sasl.password=key-1"]
