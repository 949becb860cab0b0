"""spark_jobs.cluster.master_state: the master's JSON view, or None for anything else that
answers on its web UI's port, so that `cluster start` waits (or fails naming the master's log)
instead of ending with a traceback."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from spark_jobs import cluster


@contextmanager
def _serving(status: int, body: bytes) -> Iterator[str]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("status, body", [(200, b""), (200, b"<html>starting</html>"), (200, b"[1]"),
                                          (503, b'{"status": "ALIVE"}')])
def test_an_answer_that_is_not_the_masters_json_view_is_none(status: int, body: bytes) -> None:
    with _serving(status, body) as web_ui:
        assert cluster.master_state(web_ui) is None


def test_the_masters_json_view_is_its_object() -> None:
    with _serving(200, b'{"status": "ALIVE", "workers": []}') as web_ui:
        assert cluster.master_state(web_ui) == {"status": "ALIVE", "workers": []}
