"""The order the suite's tests start in (tests/conftest.py, `start_order`): the longest tests
first, by the table of seconds per test that `.ci/times.py --write-table` writes from a run's
JUnit report. The paths are made up (a tree `suite/<tier>/`): the order reads only their
text."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

import tests.conftest
from tests.conftest import TIMES_TABLE, _StartOrder, seconds_per_test, start_order

ROOT = Path(__file__).resolve().parents[2]

TABLE = """# seconds	tests	path
100.0	100	suite/integration
60.0	10	suite/e2e
30.0	1	suite/kafka/test_slow.py
20.0	10	suite/spark
90.0	1	suite/spark/test_stream.py
"""


def test_the_table_reads_as_seconds_per_test_of_each_file_and_tier() -> None:
    assert seconds_per_test(TABLE) == {"suite/integration": 1.0, "suite/e2e": 6.0, "suite/kafka/test_slow.py": 30.0,
                                       "suite/spark": 2.0, "suite/spark/test_stream.py": 90.0}


def test_the_longest_seconds_per_test_start_first() -> None:
    paths = ["suite/e2e/test_a.py", "suite/integration/test_b.py", "suite/kafka/test_slow.py"]

    assert start_order(paths, seconds_per_test(TABLE)) == [2, 0, 1]


def test_a_file_not_in_the_table_starts_at_its_tiers_place_and_one_of_no_known_tier_last() -> None:
    paths = ["suite/unit/test_new.py", "suite/integration/test_new.py", "suite/e2e/test_new.py"]

    assert start_order(paths, seconds_per_test(TABLE)) == [2, 1, 0]


def test_a_files_tests_stay_together_in_their_order_where_files_of_one_speed_were_interleaved() -> None:
    paths = ["suite/e2e/test_a.py", "suite/e2e/test_b.py", "suite/e2e/test_a.py", "suite/e2e/test_b.py"]

    assert start_order(paths, seconds_per_test(TABLE)) == [0, 2, 1, 3]



def test_sparks_files_start_in_their_order_at_their_tiers_place_however_long_one_is() -> None:
    paths = ["suite/integration/test_b.py", "suite/spark/test_cheap.py", "suite/spark/test_stream.py",
             "suite/e2e/test_a.py"]

    assert start_order(paths, seconds_per_test(TABLE)) == [3, 1, 2, 0]


@pytest.mark.parametrize("table", [None, "12.0\tsuite/e2e\n", "12.0\t0\tsuite/e2e\n"],
                         ids=["missing", "malformed", "no-tests"])
def test_a_table_that_cannot_be_read_leaves_pytests_order_with_one_warning(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, table: str | None) -> None:
    path = tmp_path / "test_times.tsv"
    if table is not None:
        path.write_text(table)
    monkeypatch.setattr(tests.conftest, "TIMES_TABLE", path)
    unit = SimpleNamespace(nodeid="suite/unit/test_a.py::test_x")
    e2e = SimpleNamespace(nodeid="suite/e2e/test_b.py::test_y")
    items = [unit, e2e]  # a table that could be read would start e2e first

    with pytest.warns(pytest.PytestWarning, match="the tests start in pytest's order") as warned:
        _StartOrder().pytest_collection_modifyitems(items)

    assert len(warned) == 1
    assert items == [unit, e2e]

def test_every_row_of_the_checked_in_table_names_a_test_file_or_tier_of_the_repository() -> None:
    missing = [path for path in seconds_per_test(TIMES_TABLE.read_text()) if not (ROOT / path).exists()]

    assert missing == []


def test_times_writes_the_table_from_a_junit_report(tmp_path: Path) -> None:
    report = tmp_path / "junit.xml"
    report.write_text(
        '<testsuites><testsuite name="pytest">'
        '<testcase classname="suite.e2e.test_a" name="test_x" time="4.0"/>'
        '<testcase classname="suite.e2e.test_a" name="test_y" time="2.0"/>'
        '<testcase classname="suite.unit.test_b" name="test_z" time="0.5"/>'
        "</testsuite></testsuites>")
    table = tmp_path / "times.tsv"

    subprocess.run([sys.executable, ROOT / ".ci/times.py", report, "--write-table", table],
                   check=True, capture_output=True)

    assert seconds_per_test(table.read_text()) == {
        "suite/e2e": 3.0, "suite/e2e/test_a.py": 3.0, "suite/unit": 0.5, "suite/unit/test_b.py": 0.5}
