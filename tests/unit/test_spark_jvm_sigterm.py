"""The streaming job's JVM starts with SIGTERM ignored (spark_jobs.pizza_income_stream's
jvm_deaf_to_sigterm), checked without Spark: this PySpark's launch_gateway starts the JVM
through the name the job swaps, pyspark.java_gateway.Popen; a process started through that
name inside the block ignores SIGTERM, and the block puts the name back; and the job warns
where the JVM it launched hears SIGTERM all the same. (pyspark is imported, not skipped when
absent: a PySpark that moved its launch is what these tests are here to catch.)"""

from __future__ import annotations

import dis
import logging
import signal
import subprocess
from types import SimpleNamespace

import pyspark.java_gateway as gateway
import pytest

from spark_jobs.pizza_income_stream import ignored_signals, jvm_deaf_to_sigterm, warn_if_jvm_hears_sigterm


def _pyspark_preexec() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # what PySpark's own preexec_fn does for its JVM


def _ignored_by_a_child_of(popen) -> set[int]:  # type: ignore[no-untyped-def]
    """The signals ignored by a process started through `popen` as launch_gateway starts the JVM
    (with its own preexec_fn), read by the process itself."""
    child = popen(["grep", "SigIgn", "/proc/self/status"], stdout=subprocess.PIPE, text=True,
                  preexec_fn=_pyspark_preexec)
    return ignored_signals(child.communicate()[0])


def test_pysparks_launch_gateway_starts_the_jvm_through_java_gateway_popen() -> None:
    # Were the launch moved elsewhere, or made a call of subprocess.Popen, the job's swap would
    # change nothing. co_names alone would not tell the second: `subprocess.Popen` names Popen
    # too, as an attribute; the module's global is what launch_gateway's own body must load.
    assert "Popen" in gateway.launch_gateway.__code__.co_names
    assert any(i.opname == "LOAD_GLOBAL" and i.argval == "Popen" for i in dis.get_instructions(gateway.launch_gateway))


def test_a_process_launched_inside_jvm_deaf_to_sigterm_ignores_sigterm_and_popen_is_put_back() -> None:
    original = gateway.Popen
    assert signal.SIGTERM not in _ignored_by_a_child_of(gateway.Popen)  # what the test's own process passes on
    with jvm_deaf_to_sigterm():
        assert gateway.Popen is not original
        ignored = _ignored_by_a_child_of(gateway.Popen)
    # SIGTERM ignored, and PySpark's own preexec_fn still run (its SIGINT ignored too).
    assert {signal.SIGTERM, signal.SIGINT} <= ignored
    assert gateway.Popen is original
    assert signal.SIGTERM not in _ignored_by_a_child_of(gateway.Popen)


def _spark_whose_gateway_launched(proc):  # type: ignore[no-untyped-def]
    return SimpleNamespace(sparkContext=SimpleNamespace(_gateway=SimpleNamespace(proc=proc)))


@pytest.mark.parametrize("deaf", [True, False], ids=["deaf", "hearing"])
def test_the_job_warns_once_where_the_jvm_it_launched_hears_sigterm(deaf: bool,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    def launch() -> subprocess.Popen:
        return gateway.Popen(["sleep", "30"], stdin=subprocess.DEVNULL, preexec_fn=_pyspark_preexec)

    if deaf:
        with jvm_deaf_to_sigterm():
            jvm = launch()
    else:  # as in a PySpark whose launch_gateway no longer reads the swapped name
        jvm = launch()
    try:
        with caplog.at_level(logging.WARNING, logger="spark_jobs.pizza_income_stream"):
            warn_if_jvm_hears_sigterm(_spark_whose_gateway_launched(jvm))
    finally:
        jvm.kill()
        jvm.wait()
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    if deaf:
        assert warnings == []
    else:
        assert len(warnings) == 1 and "does not ignore SIGTERM" in warnings[0].getMessage()


def test_no_warning_under_spark_submit_whose_jvm_the_job_did_not_launch(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="spark_jobs.pizza_income_stream"):
        warn_if_jvm_hears_sigterm(_spark_whose_gateway_launched(None))
    assert caplog.records == []
