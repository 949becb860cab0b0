"""(review rev2; run: PYTHONPATH=. GAP=0.05 python tests/log_changes_stress.py 15) Stress LogChanges for lost wake-ups: writers bump a fake log then tell changed(); readers
take now(), read the log in a worker thread, wait; a wait that times out while the log is past
what the reader read is a lost wake-up."""
import asyncio, random, threading, time, sys
from app.storage.changes import LogChanges

KEYS = [(1, p) for p in range(4)]
log = {k: 0 for k in KEYS}
lost = []

def writer(ch, stop):
    while not stop.is_set():
        ks = random.sample(KEYS, random.randint(1, 2))
        for k in ks:
            log[k] += 1
        ch.changed(ks)
        if random.random() < 0.01:
            ch.changed_everywhere()
        time.sleep(random.random() * float(__import__("os").environ.get("GAP","0.002")))

async def reader(ch, k, stop):
    waits = 0
    while not stop.is_set():
        since = ch.now()
        seen = await asyncio.to_thread(lambda: log[k])
        if random.random() < 0.5:
            await asyncio.sleep(0)
        t0 = time.monotonic()
        woke = await ch.wait([k], since, 1.0)
        waits += 1
        if not woke and log[k] > seen:
            lost.append((k, seen, log[k], time.monotonic() - t0))
    return waits

async def main():
    ch = LogChanges("sqlite:///:memory:")
    ch.start(asyncio.get_running_loop())
    stop = threading.Event()
    ws = [threading.Thread(target=writer, args=(ch, stop)) for _ in range(4)]
    for w in ws: w.start()
    rs = [asyncio.create_task(reader(ch, KEYS[i % 4], stop)) for i in range(40)]
    await asyncio.sleep(float(sys.argv[1]) if len(sys.argv) > 1 else 10)
    stop.set()
    n = sum(await asyncio.gather(*rs))
    for w in ws: w.join()
    ch.stop()
    print("waits", n, "lost", len(lost), lost[:5])

asyncio.run(main())
