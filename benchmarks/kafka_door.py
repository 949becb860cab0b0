"""The Kafka door against the HTTP door, on one service and one database, in the same run.

    .venv/bin/python benchmarks/kafka_door.py                      # PostgreSQL
    .venv/bin/python benchmarks/kafka_door.py --db sqlite --rounds 8
    .venv/bin/python benchmarks/kafka_door.py --before /tmp/outbox-before   # a worktree of another commit

Starts one `outbox serve` with its Kafka listener (OUTBOX_KAFKA_LISTENER) on a scratch
database and drives both doors from this process, in turns of `--turn-seconds` taken in an
order shuffled afresh each round (from a printed seed), so that every path meets the same
drift of the machine:

- produce: the HTTP Send of 1,000-record batches (benchmarks/run.py's Producer, the same
  records) against librdkafka (confluent-kafka) producing the same values and keys through the
  listener, plain, idempotent, and transactional with a commit every 100 ms. librdkafka batches
  as it likes (linger.ms 5 unless --linger-ms says otherwise, up to 10,000 records a batch); each turn ends with a flush, counted
  in its time, and counts only records whose delivery was reported without error;
- fetch: a read_committed HTTP Fetch (pages of 5,000) against a read_committed librdkafka
  consumer (assigned, no group) reading the same committed records, both starting over at the
  log start when they reach the end;
- latency: a librdkafka transactional producer's commit_transaction() of one record to the
  record in a waiting read_committed consumer's hands (fetch.wait.max.ms 500).

CPU per record is read per process (benchmarks/run.py's CpuMeter): the service's, this
process's (the load generator: http.client, or librdkafka's threads), and the PostgreSQL
backends serving the scratch database. The ratios are the figures; the absolute rates are of
2 shared cores. Nothing is hard-coded: every figure is measured in the run that prints it.

With --before DIR (another source tree, e.g. a `git worktree` of an earlier commit), one
`outbox serve` per tree runs on the one database (migrated by the older tree, then the newer),
every path runs against each, all in one shuffled rotation, and the ratios are printed for
each side and as after ÷ before, as benchmarks/ab.py does for the HTTP door.

With --pin CLIENT:SERVICE (two CPU numbers), this process and its librdkafka threads run on
CPU CLIENT only, and every service and the PostgreSQL backends of the scratch database on CPU
SERVICE only (set again before each turn: the pools open connections as they need them). The
client's CPU then cannot come off the service's (other programs on the machine are not
pinned: the scheduler still moves them to the less busy CPU). With --client-nice N, this
process's threads run at nice N once the services are started (they stay at their own): on
a CPU both want, the client then yields to the service and the database.

Every run also prints, for librdkafka's producers, the Produce requests the door answered
during their turns, their records and the door's time on each (its
outbox_kafka_request_duration_seconds, frame read to answer; Produce only, so a transactional
producer's AddPartitionsToTxn and EndTxn count as not busy): with one request out, the share of
a plain or idempotent producer's turn the door is not busy is the client's. And per path,
the time its processes spent runnable but waiting for a CPU (the run queue,
/proc/<pid>/task/*/schedstat), per record: the path's service's threads with the database's
backends, and this process's. With --in-flight, each librdkafka producer reports
its statistics every 50 ms (statistics.interval.ms), and the run prints how many Produce
requests were awaiting an answer on its connection (waitresp_cnt) across those samples; off by
default, as parsing the statistics costs the client CPU of its own. With --kafka-partitions N,
librdkafka's producers write N partitions of their topic, one record to each in turn (an
idempotent producer keeps one request out per partition: its cap of requests out counts the
partition's records in flight); the HTTP paths and the readers keep to one. With several
counts (--kafka-partitions 1 4), each of librdkafka's producers runs once per count, all in the
one rotation: the first count's paths keep their names, the others' say their count, and each
count's idempotent and transactional producers are divided by its own plain one and by the
first count's. With --one-out, one more path: librdkafka's plain producer limited to one request
awaiting an answer (`max.in.flight.requests.per.connection` 1), as its idempotent producer
keeps itself (docs/benchmarks.md, 2026-11-30), with the ratios of both other Kafka producers to
it: what the door loses to one request at a time, apart from what idempotence costs.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import orjson
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer as KafkaProducer, TopicPartition

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scratch import scratch_database  # noqa: E402
from run import (  # noqa: E402 - the benchmark's own modules, not a package
    BATCH,
    ROOT,
    VALUE,
    Cpu,
    CpuMeter,
    Producer,
    Reader,
    Service,
    Turn,
    _free_port,
    create_topic,
    pct,
    ratio_line,
)

TXN_EVERY_S = 0.1


def _pin_process(pid: int, cpu: int) -> None:
    """Every thread of process `pid` onto CPU `cpu` (sched_setaffinity acts on one thread)."""
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            os.sched_setaffinity(int(task.name), {cpu})
        except (ProcessLookupError, FileNotFoundError):
            pass  # ended since


def _run_queue_seconds(pids: list[int]) -> float:
    """Seconds the threads of processes `pids` have spent runnable, waiting for a CPU: the
    second field of each thread's schedstat (nanoseconds), threads that ended since not counted."""
    total = 0
    for pid in pids:
        try:
            tasks = list(Path(f"/proc/{pid}/task").iterdir())
        except FileNotFoundError:
            continue
        for task in tasks:
            try:
                total += int((task / "schedstat").read_text().split()[1])
            except (FileNotFoundError, ProcessLookupError, IndexError):
                pass
    return total / 1e9


def _nice_process(nice: int) -> None:
    """Every thread of this process (librdkafka's among them) at `nice`: setpriority acts on one
    thread, and the services started before keep their own."""
    for task in Path("/proc/self/task").iterdir():
        try:
            os.setpriority(os.PRIO_PROCESS, int(task.name), nice)
        except (ProcessLookupError, FileNotFoundError):
            pass  # ended since


def _door_requests(url: str, apis: tuple[str, ...] = ("Produce",)) -> tuple[float, float]:
    """(Requests of `apis` answered, seconds spent on them) by the service's Kafka door so far:
    its outbox_kafka_request_duration_seconds, from a request's frame read to its answer."""
    text = httpx.get(f"{url}/metrics", timeout=10).text
    found = {"_count": 0.0, "_sum": 0.0}
    for line in text.splitlines():
        for part in found:
            if any(line.startswith(f'outbox_kafka_request_duration_seconds{part}{{api="{api}"}}') for api in apis):
                found[part] += float(line.rsplit(" ", 1)[1])
    return found["_count"], found["_sum"]


def _pin_services(services: dict[str, Service], meters: dict[str, CpuMeter], cpu: int) -> None:
    for service in services.values():
        _pin_process(service.proc.pid, cpu)
    for meter in {id(m): m for m in meters.values()}.values():
        for pid in meter._backends() or {}:
            _pin_process(pid, cpu)


# The records every path writes: run.py's, as Kafka records (key and value as UTF-8 bytes).
KEYS = [f"k{i}".encode() for i in range(BATCH)]
VALUE_BYTES = orjson.dumps(VALUE)


class KafkaPath:
    """A librdkafka producer through the listener: plain, idempotent or transactional (a
    commit every TXN_EVERY_S), kept from turn to turn as a long-lived producer is."""

    def __init__(self, bootstrap: str, mode: str, in_flight: bool = False, partitions: int = 1,
                 one_out: bool = False, linger_ms: float = 5) -> None:
        config = {"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": linger_ms,
                  "batch.num.messages": 10_000, "queue.buffering.max.messages": 200_000,
                  "enable.idempotence": mode != "plain"}
        if one_out:
            config["max.in.flight.requests.per.connection"] = 1
        # With in_flight: how many requests await an answer on the broker's connection, sampled
        # by librdkafka's statistics during the turns (not between them).
        self.awaiting: collections.Counter[int] = collections.Counter()
        self._counting, self._since = False, 0.0
        if in_flight:
            config |= {"statistics.interval.ms": 50, "stats_cb": self._stats}
        if mode == "transactional":
            config["transactional.id"] = f"bench-kafka-{random.getrandbits(32)}"
        self.mode = mode
        self.partitions = partitions
        self.producer = KafkaProducer(config)
        self.delivered = 0
        self.failed = 0
        if mode == "transactional":
            self.producer.init_transactions(30)

    def _stats(self, text: str) -> None:
        stats = json.loads(text)
        # Statistics made while the producer sat between turns are handed over at the next
        # turn's first poll: only those made during a turn count ("ts": librdkafka's monotonic
        # clock in µs, which is CLOCK_MONOTONIC, time.monotonic()'s clock on Linux).
        if self._counting and stats["ts"] / 1e6 >= self._since:
            for broker in stats["brokers"].values():
                if broker["nodeid"] >= 0:  # the listener, not the bootstrap entry
                    self.awaiting[broker["waitresp_cnt"]] += 1

    def _report(self, err: object, _msg: object) -> None:
        if err is None:
            self.delivered += 1
        else:
            self.failed += 1

    def _produce_until(self, topic: str, deadline: float) -> None:
        p, i, partitions = self.producer, 0, self.partitions
        while time.perf_counter() < deadline:
            try:
                p.produce(topic, VALUE_BYTES, KEYS[i % BATCH], partition=i % partitions, on_delivery=self._report)
                i += 1
            except BufferError:
                p.poll(0.005)
            if i % 1000 == 0:
                p.poll(0)

    def turn(self, topic: str, seconds: float) -> Turn:
        self.delivered = self.failed = 0
        self._counting, self._since = True, time.monotonic()
        t0 = time.perf_counter()
        deadline = t0 + seconds
        if self.mode == "transactional":
            while time.perf_counter() < deadline:
                self.producer.begin_transaction()
                self._produce_until(topic, min(deadline, time.perf_counter() + TXN_EVERY_S))
                self.producer.commit_transaction(30)
        else:
            self._produce_until(topic, deadline)
            self.producer.flush(30)
        took = time.perf_counter() - t0
        self._counting = False
        if self.failed:
            raise RuntimeError(f"{self.failed} records of a {self.mode} turn were not delivered")
        return self.delivered, took

    def close(self) -> None:
        self.producer.flush(10)
        del self.producer  # librdkafka's handle closes its connections when collected


class KafkaReader:
    """A read_committed librdkafka consumer of one partition, taking turns like run.py's
    Reader: it reads for `seconds`, starting over at the log start at the end of the log.

    librdkafka fetches ahead into a local queue, so each turn has a consumer of its own,
    assigned at the next offset to read and closed at the turn's end (its connection and
    metadata requests are in the turn's time): a turn reads what the service serves during
    it, never what was fetched ahead in another path's turn."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.bootstrap, self.topic = bootstrap, topic
        self.next_offset = 0

    def turn(self, seconds: float) -> Turn:
        n = 0
        t0 = time.perf_counter()
        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "bench-reader",
                             "isolation.level": "read_committed", "enable.auto.commit": False,
                             "fetch.wait.max.ms": 100, "enable.partition.eof": True})
        try:
            consumer.assign([TopicPartition(self.topic, 0, self.next_offset)])
            deadline = t0 + seconds
            while time.perf_counter() < deadline:
                for m in consumer.consume(5000, 0.05):
                    if m.error() is not None:
                        if m.error().code() == KafkaError._PARTITION_EOF:
                            self.next_offset = 0
                            consumer.seek(TopicPartition(self.topic, 0, 0))
                            break
                        raise RuntimeError(f"consumer error: {m.error()}")
                    n += 1
                    self.next_offset = m.offset() + 1
        finally:
            consumer.close()
        return n, time.perf_counter() - t0

    def close(self) -> None:
        pass


def commit_to_consumer(bootstrap: str, topic: str, samples: int) -> list[float]:
    """Milliseconds from a transactional producer's commit_transaction() call to its one record
    in the hands of a read_committed consumer already waiting at the log end."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-latency",
                         "isolation.level": "read_committed", "enable.auto.commit": False,
                         "fetch.wait.max.ms": 500})
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    producer = KafkaProducer({"bootstrap.servers": bootstrap, "transactional.id": "bench-latency",
                              "linger.ms": 0})
    producer.init_transactions(30)
    out = []
    try:
        consumer.poll(1.0)  # connected and waiting
        for i in range(samples):
            producer.begin_transaction()
            producer.produce(topic, VALUE_BYTES, f"l{i}".encode(), partition=0)
            producer.flush(30)
            t0 = time.perf_counter()
            producer.commit_transaction(30)
            while True:
                m = consumer.poll(5.0)
                if m is not None and m.error() is None:
                    break
            out.append((time.perf_counter() - t0) * 1000)
    finally:
        consumer.close()
    return out


PRODUCE_MODES = (("plain", "plain"), ("idempotent", "idempotent"), ("transactional (commit / 100 ms)", "transactional"))
RATIOS = [
    ("Kafka produce plain ÷ HTTP produce plain", "Kafka produce plain", "HTTP produce plain"),
    ("Kafka produce idempotent ÷ Kafka produce plain", "Kafka produce idempotent", "Kafka produce plain"),
    ("Kafka produce transactional (commit / 100 ms) ÷ Kafka produce plain",
     "Kafka produce transactional (commit / 100 ms)", "Kafka produce plain"),
    ("HTTP produce idempotent ÷ HTTP produce plain", "HTTP produce idempotent", "HTTP produce plain"),
    ("HTTP produce transactional (commit / 100 ms) ÷ HTTP produce plain",
     "HTTP produce transactional (commit / 100 ms)", "HTTP produce plain"),
    ("Kafka consume read_committed ÷ HTTP fetch read_committed", "Kafka consume read_committed",
     "HTTP fetch read_committed"),
]


def over(name: str, partitions: int | None) -> str:
    """A librdkafka producer path's name when it writes `partitions` partitions; None: the
    first count's, named as with one count."""
    return name if partitions is None else f"{name}, {partitions} partitions"


ONE_OUT = "Kafka produce plain, one request out"
ONE_OUT_RATIOS = [
    (f"{ONE_OUT} ÷ Kafka produce plain", ONE_OUT, "Kafka produce plain"),
    (f"Kafka produce idempotent ÷ {ONE_OUT}", "Kafka produce idempotent", ONE_OUT),
    (f"Kafka produce transactional (commit / 100 ms) ÷ {ONE_OUT}", "Kafka produce transactional (commit / 100 ms)",
     ONE_OUT),
]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", choices=["sqlite", "postgresql"], default="postgresql")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--turn-seconds", type=float, default=0.5)
    parser.add_argument("--seed", type=int, default=None, help="of the rotation's shuffle (printed)")
    parser.add_argument("--latency-samples", type=int, default=100)
    parser.add_argument("--before", type=Path, default=None,
                        help="source tree of a 'before' service: every path runs against both, in one rotation")
    parser.add_argument("--kafka-partitions", type=int, nargs="+", default=[1], metavar="N",
                        help="librdkafka's producers write this many partitions of their topic, record by record in "
                             "turn; several counts: each producer once per count, in the one rotation")
    parser.add_argument("--in-flight", action="store_true",
                        help="librdkafka's producers report the requests awaiting an answer (statistics every 50 ms)")
    parser.add_argument("--pin", default=None, metavar="CLIENT:SERVICE",
                        help="this process on CPU CLIENT, the services and their database backends on CPU SERVICE")
    parser.add_argument("--after", type=Path, default=ROOT, help="source tree of the 'after' service (with --before)")
    parser.add_argument("--client-nice", type=int, default=None, metavar="N",
                        help="this process's threads (librdkafka's too) at nice N once the services run")
    parser.add_argument("--linger-ms", type=float, default=5, help="librdkafka's producers' linger.ms")
    parser.add_argument("--one-out", action="store_true",
                        help="also librdkafka's plain producer with one request awaiting an answer at most")
    args = parser.parse_args(argv)
    if min(args.kafka_partitions) < 1 or len(set(args.kafka_partitions)) < len(args.kafka_partitions):
        parser.error(f"--kafka-partitions takes distinct counts of at least 1; got {args.kafka_partitions}")
    partitions, *more_partitions = args.kafka_partitions
    pin = None
    if args.pin is not None:
        try:
            client_cpu, pin = (int(c) for c in args.pin.split(":"))
        except ValueError:
            parser.error(f"--pin takes two CPU numbers, CLIENT:SERVICE; got {args.pin!r}")
        # Before any thread starts: librdkafka's threads inherit this thread's CPUs.
        os.sched_setaffinity(0, {client_cpu})
    seed = args.seed if args.seed is not None else random.randrange(2**32)
    rng = random.Random(seed)
    # One service per tree: "" alone, or "before" and "after" on one database.
    trees = {"": args.after} if args.before is None else {"before": args.before, "after": args.after}

    def named(name: str, side: str) -> str:
        return f"{name}, {side}" if side else name

    # Both trees share the schema: migrated with the older one, then the newer one.
    with scratch_database(args.db, "kafka", migrate_with=tuple(dict.fromkeys(
            [t for t in (args.before, args.after) if t is not None]))) as db_url:
        services: dict[str, Service] = {}
        closers: list[Callable[[], object]] = []
        latency: dict[str, list[float]] = {}
        try:
            producing: dict[str, tuple[Callable[[str, float], Turn], Callable[[], str]]] = {}
            reading: dict[str, Callable[[float], Turn]] = {}
            meters: dict[str, CpuMeter] = {}
            kafka_paths: dict[str, KafkaPath] = {}
            bootstraps: dict[str, str] = {}
            made = iter(range(1_000_000))
            for side, tree in trees.items():
                kafka_port = _free_port()
                service = services[side] = Service(db_url, tree, OUTBOX_KAFKA_LISTENER=f"127.0.0.1:{kafka_port}")
                bootstrap = bootstraps[side] = f"127.0.0.1:{kafka_port}"
                meter = CpuMeter(service, db_url)
                closers.append(meter.close)

                # An HTTP path's turn writes a topic of its own, made before the turn's clock
                # starts (run.py's Producer starts its sequences at 0 every turn); librdkafka's
                # go on in one topic, whose metadata it keeps, as a long-lived producer's do.
                def fresh_topic(mode: str, service: Service = service, side: str = side) -> str:
                    topic = f"http-{side or 'one'}-{mode}-{next(made)}"
                    create_topic(service.url, topic, 1)
                    return topic

                for name, mode in PRODUCE_MODES:
                    http = Producer(service.url, mode, f"bench-http-{side}-{mode}",
                                    commit_every_ms=TXN_EVERY_S * 1000, transaction_version=2)
                    closers.append(http.close)
                    producing[named(f"HTTP produce {name}", side)] = (
                        http.turn, lambda mode=mode, fresh_topic=fresh_topic: fresh_topic(mode))
                    meters[named(f"HTTP produce {name}", side)] = meter
                    for count in [None, *more_partitions]:
                        topic = f"kafka-{side or 'one'}-{mode}" + ("" if count is None else f"-{count}")
                        create_topic(service.url, topic, count or partitions)
                        kafka_path = KafkaPath(bootstrap, mode, args.in_flight, count or partitions,
                                               linger_ms=args.linger_ms)
                        path_name = named(over(f"Kafka produce {name}", count), side)
                        kafka_paths[path_name] = kafka_path
                        closers.append(kafka_path.close)
                        producing[path_name] = (kafka_path.turn, lambda topic=topic: topic)
                        meters[path_name] = meter
                if args.one_out:
                    topic = f"kafka-{side or 'one'}-plain-one-out"
                    create_topic(service.url, topic, partitions)
                    kafka_path = KafkaPath(bootstrap, "plain", args.in_flight, partitions, one_out=True,
                                           linger_ms=args.linger_ms)
                    kafka_paths[named(ONE_OUT, side)] = kafka_path
                    closers.append(kafka_path.close)
                    producing[named(ONE_OUT, side)] = (kafka_path.turn, lambda topic=topic: topic)
                    meters[named(ONE_OUT, side)] = meter
                http_reader = Reader(service.url, "read", "read_committed")
                kafka_reader = KafkaReader(bootstrap, "read")
                closers.append(kafka_reader.close)
                reading[named("HTTP fetch read_committed", side)] = http_reader.turn
                reading[named("Kafka consume read_committed", side)] = kafka_reader.turn
                meters[named("HTTP fetch read_committed", side)] = meter
                meters[named("Kafka consume read_committed", side)] = meter

            if pin is not None:
                _pin_services(services, meters, pin)
            if args.client_nice is not None:
                _nice_process(args.client_nice)
            # The records both readers read: at least 200,000 plain records sent over HTTP.
            first = next(iter(services.values()))
            create_topic(first.url, "read", 1)
            filler = Producer(first.url, "plain")
            filled = 0
            while filled < 200 * BATCH:
                filled += filler.turn("read", 0.5)[0]
            filler.close()

            names = [*producing, *reading]
            turns: dict[str, list[Turn]] = {n: [] for n in names}
            cpu: dict[str, Cpu] = {n: Cpu(database=None) for n in names}
            # Seconds runnable but waiting for a CPU: [services and database backends, this process].
            waits: dict[str, list[float]] = {n: [0.0, 0.0] for n in names}
            # A Kafka producer's turns: [Produce requests, the door's seconds on them, the turns' seconds].
            door: dict[str, list[float]] = {n: [0.0, 0.0, 0.0] for n in kafka_paths}
            # A warm-up turn each, not counted: connections, metadata, prepared statements.
            for name in names:
                if name in producing:
                    work, topic_of = producing[name]
                    work(topic_of(), 0.2)
                else:
                    reading[name](0.2)
            for _ in range(args.rounds):
                order = names[:]
                rng.shuffle(order)
                for name in order:
                    if pin is not None:
                        _pin_services(services, meters, pin)
                    # The path's own service and its backends (each side's meter reads its service).
                    server_pids = [meters[name].service.proc.pid, *(meters[name]._backends() or {})]
                    w0 = _run_queue_seconds(server_pids), _run_queue_seconds([os.getpid()])
                    if name in producing:
                        work, topic_of = producing[name]
                        topic = topic_of()
                        d0 = _door_requests(meters[name].service.url) if name in door else (0.0, 0.0)
                        turn, used = meters[name].measure(lambda: work(topic, args.turn_seconds))
                        if name in door:
                            d1 = _door_requests(meters[name].service.url)
                            door[name][0] += d1[0] - d0[0]
                            door[name][1] += d1[1] - d0[1]
                            door[name][2] += turn[1]
                    else:
                        turn, used = meters[name].measure(lambda: reading[name](args.turn_seconds))
                    server_pids += [pid for pid in meters[name]._backends() or {} if pid not in server_pids]
                    w1 = _run_queue_seconds(server_pids), _run_queue_seconds([os.getpid()])
                    turns[name].append(turn)
                    cpu[name].add(used)
                    waits[name][0] += w1[0] - w0[0]
                    waits[name][1] += w1[1] - w0[1]
            for side, service in services.items():
                create_topic(service.url, f"latency-{side or 'one'}", 1)
                latency[side] = commit_to_consumer(bootstraps[side], f"latency-{side or 'one'}", args.latency_samples)
        finally:
            for close in closers:
                close()
            for service in services.values():
                service.stop()

    def rate(name: str) -> float:
        return sum(n for n, _ in turns[name]) / sum(t for _, t in turns[name])

    def service_us(name: str) -> float:
        return cpu[name].service / sum(r for r, _ in turns[name]) * 1e6

    sides_note = "" if args.before is None else f"; before: {args.before}, after: {args.after}"
    if partitions != 1 or more_partitions:
        sides_note += f"; librdkafka's producers over {partitions} partition(s)"
    if more_partitions:
        sides_note += f", and over {', '.join(map(str, more_partitions))} where a path says so"
    if args.client_nice is not None:
        sides_note += f"; this process at nice {args.client_nice}"
    if args.linger_ms != 5:
        sides_note += f"; librdkafka's producers at linger.ms {args.linger_ms:g}"
    if args.pin is not None:
        sides_note += f"; pinned: this process on CPU {client_cpu}, services and backends on CPU {pin}"
    print(f"# {args.db}: {args.rounds} rounds of {args.turn_seconds:g} s turns, order shuffled each round "
          f"(--seed {seed}); librdkafka {__import__('confluent_kafka').libversion()[0]}{sides_note}\n")
    print("| path | records/s | CPU µs / record: service | client | database |\n| --- | ---: | ---: | ---: | ---: |")
    for name in names:
        n = sum(r for r, _ in turns[name])
        c = cpu[name]
        db = "" if c.database is None else f"{c.database / n * 1e6:.1f}"
        print(f"| {name} | {rate(name):,.0f} | {c.service / n * 1e6:.1f} | {c.client / n * 1e6:.1f} | {db} |")
    print("\n| ratio | value | in each quarter of the rounds |\n| --- | ---: | ---: |")
    for side in trees:
        for label, a, b in RATIOS + (ONE_OUT_RATIOS if args.one_out else []):
            a, b = named(a, side), named(b, side)
            print(ratio_line(named(label, side), rate(a) / rate(b), turns[a], turns[b]))
        for count in more_partitions:
            for name in ("idempotent", "transactional (commit / 100 ms)"):
                for plain in (count, None):
                    a, b = (named(over(f"Kafka produce {n}", c), side) for n, c in ((name, count), ("plain", plain)))
                    print(ratio_line(f"{a} ÷ {b}", rate(a) / rate(b), turns[a], turns[b]))
    if args.before is not None:
        for name in [n.removesuffix(", after") for n in names if n.endswith(", after")]:
            a, b = named(name, "after"), named(name, "before")
            print(ratio_line(f"{name}, after ÷ before", rate(a) / rate(b), turns[a], turns[b]))

    print("\n| service CPU per record, ratio | value |\n| --- | ---: |")
    for side in trees:
        print(f"| {named('Kafka produce plain ÷ HTTP produce plain', side)} (target ≤ 1) | "
              f"{service_us(named('Kafka produce plain', side)) / service_us(named('HTTP produce plain', side)):.2f} |")
        print(f"| {named('Kafka consume ÷ HTTP fetch, read_committed', side)} | "
              f"{service_us(named('Kafka consume read_committed', side)) / service_us(named('HTTP fetch read_committed', side)):.2f} |")
    if args.before is not None:
        for name in [n.removesuffix(", after") for n in names if n.endswith(", after")]:
            print(f"| {name}, after ÷ before | {service_us(named(name, 'after')) / service_us(named(name, 'before')):.2f} |")
    print("\n| path | waiting for a CPU, µs / record: services and database | client |\n| --- | ---: | ---: |")
    for name in names:
        n = sum(r for r, _ in turns[name])
        print(f"| {name} | {waits[name][0] / n * 1e6:.1f} | {waits[name][1] / n * 1e6:.1f} |")
    print("\n| librdkafka producer | Produce requests / s | records / request | the door's ms / request "
          "| the door busy, share of the turns |\n| --- | ---: | ---: | ---: | ---: |")
    for name, (requests, busy, seconds) in door.items():
        if requests:
            print(f"| {name} | {requests / seconds:,.1f} | {sum(r for r, _ in turns[name]) / requests:,.0f} | "
                  f"{busy / requests * 1000:.1f} | {busy / seconds:.2f} |")
    if args.in_flight:
        print("\n| librdkafka producer | requests awaiting an answer: mean | most | samples with none | samples |"
              "\n| --- | ---: | ---: | ---: | ---: |")
        for name, path in kafka_paths.items():
            seen = path.awaiting
            samples = sum(seen.values())
            if samples:
                mean = sum(k * v for k, v in seen.items()) / samples
                print(f"| {name} | {mean:.2f} | {max(seen)} | {seen[0] / samples:.0%} | {samples} |")
    print("\n| latency | p50 ms | p99 ms | max ms | samples |\n| --- | ---: | ---: | ---: | ---: |")
    for side, samples in latency.items():
        label = named("commit_transaction() → in a waiting read_committed consumer's hands", side)
        print(f"| {label} | "
              f"{statistics.median(samples):.2f} | {pct(samples, 99):.2f} | {max(samples):.2f} | {len(samples)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
