"""The Spark jobs' flags that cannot act together, or with a value that means nothing, are
refused as the command line is read, with one line naming them, before Spark or the service
is asked anything."""

from __future__ import annotations

import pytest

from spark_jobs import pizza_income_stream


@pytest.mark.parametrize(("argv", "said"), [
    # AvailableNow has no interval: the one given would be dropped without a word.
    (["--available-now", "--trigger-seconds", "5"], "--trigger-seconds: not with --available-now"),
    # Under a millisecond, Spark's processing-time trigger becomes 0 ms: no interval at all.
    (["--trigger-seconds", "0.0004"], "--trigger-seconds must be at least 0.001"),
    (["--max-offsets-per-trigger", "0"], "--max-offsets-per-trigger must be at least 1"),
    (["--max-offsets-per-trigger", "-5"], "--max-offsets-per-trigger must be at least 1"),
])
def test_the_stream_job_refuses_flags_that_would_not_act(argv: list[str], said: str,
                                                          capsys: pytest.CaptureFixture[str],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    def no_run(*_: object) -> int:
        raise AssertionError("the job ran")

    monkeypatch.setattr(pizza_income_stream, "run", no_run)

    with pytest.raises(SystemExit) as exited:
        pizza_income_stream.main(["--checkpoint", "/nonexistent/checkpoint", *argv])

    assert exited.value.code == 2
    assert said in capsys.readouterr().err
