"""compat/librdkafka/run's command line, refused before anything is built or run."""

from __future__ import annotations

import pytest

from tests.librdkafka_run import load

run = load()


@pytest.mark.parametrize("jobs", ["0", "-2"])
def test_jobs_below_one_are_refused(jobs: str, monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    def not_reached() -> None:
        raise AssertionError("the arguments were taken: librdkafka would be built and its tests run")

    monkeypatch.setattr(run, "built_source", not_reached)
    monkeypatch.setattr("sys.argv", ["run", "--jobs", jobs])
    with pytest.raises(SystemExit) as exited:
        run.main()

    assert exited.value.code == 2  # argparse's refusal of an argument
    assert f"--jobs: must be 1 or more, not {jobs}" in capsys.readouterr().err
