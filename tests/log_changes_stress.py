"""(review rev2) LogChanges under stress, for lost wake-ups: writer threads grow a fake log and
tell `changed()`; readers on the loop take `now()`, read the log in a worker thread and wait.
A wake-up lost shows as a reader that slept on while the log had grown past what it read: its
wake came more than LATE_S after the first write it had not read (the next write, or the
timeout, woke it instead). Run: PYTHONPATH=. python tests/log_changes_stress.py [seconds]"""
import asyncio
import random
import sys
import threading
import time

from app.storage.changes import LogChanges

KEYS = [(1, p) for p in range(4)]
LATE_S = 0.15
log = {k: 0 for k in KEYS}
grew_at: dict = {k: {} for k in KEYS}  # key -> {length: when the log reached it}
lost: list = []


def writer(ch: LogChanges, stop: threading.Event) -> None:
    lock = threading.Lock()
    while not stop.is_set():
        ks = random.sample(KEYS, random.randint(1, 2))
        with lock:
            for k in ks:
                log[k] += 1
                grew_at[k][log[k]] = time.monotonic()
        ch.changed(ks)
        if random.random() < 0.01:
            ch.changed_everywhere()
        time.sleep(0.2 + random.random() * 0.4)


async def reader(ch: LogChanges, k, stop: threading.Event) -> int:
    waits = 0
    while not stop.is_set():
        since = ch.now()
        seen = await asyncio.to_thread(lambda: log[k])
        if random.random() < 0.5:
            await asyncio.sleep(0)
        await ch.wait([k], since, 2.0)
        woke = time.monotonic()
        waits += 1
        first_unread = grew_at[k].get(seen + 1)
        if first_unread is not None and woke - first_unread > LATE_S:
            lost.append((k, seen, round(woke - first_unread, 3)))
    return waits


async def main(seconds: float) -> None:
    ch = LogChanges("sqlite:///:memory:")
    ch.start(asyncio.get_running_loop())
    stop = threading.Event()
    writers = [threading.Thread(target=writer, args=(ch, stop)) for _ in range(2)]
    for w in writers:
        w.start()
    readers = [asyncio.create_task(reader(ch, KEYS[i % 4], stop)) for i in range(40)]
    await asyncio.sleep(seconds)
    stop.set()
    n = sum(await asyncio.gather(*readers))
    for w in writers:
        w.join()
    ch.stop()
    print("waits", n, "late wakes", len(lost), lost[:5])


asyncio.run(main(float(sys.argv[1]) if len(sys.argv) > 1 else 10))
