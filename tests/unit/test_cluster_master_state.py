"""spark_jobs.cluster.master_state: the master's JSON view, or None for anything else that
answers on its web UI's port, so that `cluster start` waits (or fails naming the master's log)
instead of ending with a traceback."""

from __future__ import annotations

from contextlib import AbstractContextManager

import pytest

from spark_jobs import cluster
from tests.helpers import stand_in_http_server


def _serving(status: int, body: bytes) -> AbstractContextManager[str]:
    return stand_in_http_server(lambda _path: (status, "application/json", body))


@pytest.mark.parametrize("status, body", [(200, b""), (200, b"<html>starting</html>"), (200, b"[1]"),
                                          (503, b'{"status": "ALIVE"}')])
def test_an_answer_that_is_not_the_masters_json_view_is_none(status: int, body: bytes) -> None:
    with _serving(status, body) as web_ui:
        assert cluster.master_state(web_ui) is None


def test_the_masters_json_view_is_its_object() -> None:
    with _serving(200, b'{"status": "ALIVE", "workers": []}') as web_ui:
        assert cluster.master_state(web_ui) == {"status": "ALIVE", "workers": []}
