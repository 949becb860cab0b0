"""Applications appending in their own transactions (app.in_database) are killed with
SIGKILL at random moments, beside a producer of Sends to the same partitions and a `serve`
that is killed too: every order row has exactly one record, and no record exists without its
row (both databases)."""

from __future__ import annotations

import random
import subprocess
import threading
import time

from sqlalchemy import text

from tests.e2e.conftest import PYTHON, ROOT, Backend, Launcher

KILLS = 6


def start_app(backend: Backend, first: int, last: int | None = None) -> subprocess.Popen[str]:
    args = [PYTHON, "-m", "tests.e2e.order_app", backend.url, str(first)] + ([] if last is None else [str(last)])
    return subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_every_order_has_exactly_one_record_however_the_application_dies(backend: Backend, launcher: Launcher) -> None:
    rng = random.Random(17)
    server = launcher.server()
    with server.client() as c:
        assert c.post("/v1/topics", json={"name": "orders", "partitions": 2}).status_code == 201
    with backend.engine.begin() as conn:
        conn.execute(text("CREATE TABLE orders (id INTEGER PRIMARY KEY, total INTEGER NOT NULL)"))

    sends: list[int] = []
    stop = threading.Event()

    def producer() -> None:
        n = 0
        while not stop.is_set():
            try:
                with launcher.processes[-1].client(timeout=5) as c:
                    r = c.post("/v1/records", json={"batches": [{"topic": "orders", "partition": n % 2,
                                                                 "records": [{"value": {"send": n}}]}]})
                if r.status_code == 200:
                    sends.append(n)
                    n += 1
            except Exception:  # noqa: BLE001 - the server is being killed
                time.sleep(0.05)

    feeder = threading.Thread(target=producer)
    feeder.start()
    printed = -1
    try:
        for kill in range(KILLS):
            app = start_app(backend, printed + 1)
            # Killed at a random moment once it is appending: its first order printed (an
            # interpreter takes over a second to start on a loaded machine, and a kill before
            # any order would test nothing).
            first = app.stdout.readline()  # type: ignore[union-attr]
            time.sleep(rng.uniform(0.0, 0.7))
            app.kill()  # SIGKILL
            out, err = app.communicate(timeout=10)
            out = first + out
            assert "Traceback" not in err, err
            ids = [int(line) for line in out.split()]
            printed = ids[-1] if ids else printed
            if kill == KILLS // 2:
                server.kill9()
                server = launcher.server()
        final = start_app(backend, printed + 1, printed + 20)
        out, err = final.communicate(timeout=60)
        assert final.returncode == 0, err
        last = int(out.split()[-1])
    finally:
        stop.set()
        feeder.join()

    orders = {row[0] for row in backend.query(text("SELECT id FROM orders"))}
    records = backend.query(text(
        "SELECT r.key, m.message_id, r.value FROM records r JOIN record_message_ids m "
        'ON m.topic_id = r.topic_id AND m."partition" = r."partition" AND m."offset" = r."offset"'))
    assert orders == set(range(last + 1))
    assert sorted(int(key) for key, _, _ in records) == sorted(orders)
    assert all(message_id == f"order-{key}" for key, message_id, _ in records)
    backend.assert_logs_gapless()
    backend.assert_batch_rows_match()
    assert len(sends) > 0 and last >= 20
