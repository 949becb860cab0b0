"""The SQL statements each request of a Kafka producer's transaction costs, through the Kafka
door over the wire, transaction version 2 against version 1.

    .venv/bin/python benchmarks/kafka_txn_statements.py --rounds 20
    .venv/bin/python benchmarks/kafka_txn_statements.py --db sqlite

Starts a KafkaListener on a scratch database in this process and sends it hand-built requests
(kio), as a Kafka 4 client does with `transaction.version` finalized at 2 (InitProducerId 4,
Produce 12, EndTxn 5: no AddPartitionsToTxn), and as a version 1 client does (InitProducerId 4,
AddPartitionsToTxn 3 for each partition new to the transaction, Produce 11, EndTxn 4). Each
round is one transaction of three Produces of `--records` records: two to partition 0, one to
partition 1; the rounds end by Commit and by Abort in turns. Prints per request the statements
SQLAlchemy's events see on the listener's engine and, apart, the COPYs of records and markers
(app.storage.dialect's, on the driver), the smallest and largest count over the rounds, after
a transaction of another producer has had the listener read the topic. psycopg's BEGIN and
COMMIT are not counted. Counts, not times: the machine's load does not change them.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import datetime
import io
import socket
import struct
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from aiokafka.record.default_records import DefaultRecordBatchBuilder  # noqa: E402
from kio.schema.errors import ErrorCode  # noqa: E402
from kio.serial import entity_reader, entity_writer  # noqa: E402
from sqlalchemy import event  # noqa: E402

from scratch import scratch_database  # noqa: E402

from app.composition import Services  # noqa: E402
from app.kafka.protocol import request_class, response_class  # noqa: E402
from app.kafka.server import KafkaListener  # noqa: E402
from app.settings import Settings  # noqa: E402
from app.storage import dialect  # noqa: E402
from app.storage.engine import Database, build_engine  # noqa: E402

TOPIC = "statements"
# The request versions each transaction version's client sends (KIP-890).
VERSIONS = {2: {"init": 4, "produce": 12, "end": 5}, 1: {"init": 4, "produce": 11, "end": 4, "add": 3}}


class Wire:
    """One connection to the listener; each request answered before the next is sent."""

    def __init__(self, port: int) -> None:
        self.s = socket.create_connection(("127.0.0.1", port), timeout=30)

    def ask(self, api_key: int, version: int, body: Any) -> Any:
        cls = request_class(api_key, version)
        assert cls is not None
        buffer = io.BytesIO()
        header = cls.__header_schema__  # type: ignore[attr-defined]
        entity_writer(header)(buffer, header(request_api_key=api_key, request_api_version=version,
                                             correlation_id=1, client_id="statements"))
        entity_writer(cls)(buffer, body)
        self.s.sendall(struct.pack(">i", len(buffer.getvalue())) + buffer.getvalue())
        size = struct.unpack(">i", self._exactly(4))[0]
        data = self._exactly(size)
        answer = response_class(api_key, version)
        assert answer is not None
        _, used = entity_reader(answer.__header_schema__)(data, 0)  # type: ignore[attr-defined]
        return entity_reader(answer)(data, used)[0]

    def _exactly(self, n: int) -> bytes:
        out = b""
        while len(out) < n:
            chunk = self.s.recv(n - len(out))
            assert chunk, "the listener closed the connection"
            out += chunk
        return out


class Producer:
    """A transactional producer of one transaction version, by hand."""

    def __init__(self, wire: Wire, transactional_id: str, tv: int, records: int) -> None:
        self.wire, self.tid, self.v, self.records = wire, transactional_id, VERSIONS[tv], records
        self.sequences: dict[int, int] = collections.defaultdict(int)
        self.added: set[int] = set()

    def init(self) -> None:
        answer = self.wire.ask(22, self.v["init"], request_class(22, self.v["init"])(
            transactional_id=self.tid, transaction_timeout=datetime.timedelta(seconds=60), producer_id=-1,
            producer_epoch=-1))
        assert answer.error_code == ErrorCode.none, answer
        self.pid, self.epoch = answer.producer_id, answer.producer_epoch

    def add_partitions(self, partition: int) -> None:
        m = request_class(24, self.v["add"])
        mod = sys.modules[m.__module__]
        answer = self.wire.ask(24, self.v["add"], m(
            v3_and_below_transactional_id=self.tid, v3_and_below_producer_id=self.pid,
            v3_and_below_producer_epoch=self.epoch, v3_and_below_topics=(
                mod.AddPartitionsToTxnTopic(name=TOPIC, partitions=(partition,)),)))
        codes = [p.partition_error_code for t in answer.results_by_topic_v3_and_below for p in t.results_by_partition]
        assert codes == [ErrorCode.none], answer
        self.added.add(partition)

    def produce(self, partition: int) -> None:
        b = DefaultRecordBatchBuilder(2, 0, 1, self.pid, self.epoch, self.sequences[partition], 1 << 22)
        for i in range(self.records):
            b.append(i, 1_700_000_000_000 + i, None, b'"v"', [])
        self.sequences[partition] += self.records
        m = request_class(0, self.v["produce"])
        mod = sys.modules[m.__module__]
        answer = self.wire.ask(0, self.v["produce"], m(
            transactional_id=self.tid, acks=-1, timeout=datetime.timedelta(seconds=5), topic_data=(
                mod.TopicProduceData(name=TOPIC, partition_data=(
                    mod.PartitionProduceData(index=partition, records=bytes(b.build())),)),)))
        ((p,),) = [t.partition_responses for t in answer.responses]
        assert p.error_code == ErrorCode.none, p

    def end(self, commit: bool) -> None:
        answer = self.wire.ask(26, self.v["end"], request_class(26, self.v["end"])(
            transactional_id=self.tid, producer_id=self.pid, producer_epoch=self.epoch, committed=commit))
        assert answer.error_code == ErrorCode.none, answer
        if self.v["end"] >= 5:  # version 2: the epoch it bumped to, sequences from 0
            self.pid, self.epoch = answer.producer_id, answer.producer_epoch
            self.sequences.clear()
        self.added.clear()


@contextmanager
def listening(services: Services) -> Iterator[int]:
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    listener = KafkaListener(services, sock)
    asyncio.run_coroutine_threadsafe(listener.start(), loop).result()
    try:
        yield listener.port
    finally:
        asyncio.run_coroutine_threadsafe(listener.stop(), loop).result()
        loop.call_soon_threadsafe(loop.stop)
        thread.join()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", choices=["sqlite", "postgresql"], default="postgresql")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--records", type=int, default=10, help="records a Produce")
    parser.add_argument("--show", action="store_true", help="print the statements of each request's last time")
    args = parser.parse_args(argv)
    counted = {"statements": 0, "copies": 0}
    texts: list[str] = []
    original_copy = dialect._copy_from_stdin

    @contextmanager
    def copy_counted(*a: Any, **k: Any) -> Iterator[Any]:
        counted["copies"] += 1
        with original_copy(*a, **k) as copy:
            yield copy

    dialect._copy_from_stdin = copy_counted  # type: ignore[assignment]
    with scratch_database(args.db, "kafkatxnstmts") as url:
        db = Database(build_engine(url, pool_size=4))

        def note(_conn: object, _cursor: object, statement: str, *_: object) -> None:
            counted["statements"] += 1
            texts.append(" ".join(statement.split())[:100])

        event.listen(db.engine, "before_cursor_execute", note)
        services = Services.build(Settings(database_url=url, run_coordinator=False, auto_migrate=False), db,
                                  lambda: int(time.time() * 1000))
        services.topics.create(TOPIC, 2)
        # (transaction version, request) -> counts (statements, COPYs) per round
        seen: dict[tuple[int, str], list[tuple[int, int]]] = collections.defaultdict(list)
        last_texts: dict[tuple[int, str], list[str]] = {}
        with listening(services) as port:
            # Not counted: has the listener read the topic (its value format, the Send's copy of
            # the topic), which every later Produce of the process finds in its copies.
            warm = Producer(Wire(port), "warm", 2, args.records)
            warm.init()
            warm.produce(0)
            warm.produce(1)
            warm.end(True)
            for tv in (2, 1):
                p = Producer(Wire(port), f"tv{tv}", tv, args.records)

                def step(name: str, call: Callable[[], None], tv: int = tv) -> None:
                    counted["statements"] = counted["copies"] = 0
                    texts.clear()
                    call()
                    seen[(tv, name)].append((counted["statements"], counted["copies"]))
                    last_texts[(tv, name)] = list(texts)

                step("InitProducerId", p.init)
                for r in range(args.rounds):
                    after = "after Commit" if r % 2 == 1 else "after Abort"  # round r ends by Commit if r is even
                    first = "first transaction" if r == 0 else after
                    for i, partition in enumerate((0, 0, 1)):
                        if tv == 1 and partition not in p.added:
                            which = "begins" if not p.added else "Ongoing"
                            step(f"AddPartitionsToTxn, {which}", lambda part=partition: p.add_partitions(part))
                        kind = ("first Produce, " + (first if tv == 2 else "the transaction Ongoing")
                                if i == 0 else "later Produce" + (", a new partition" if partition == 1 else ""))
                        step(kind, lambda part=partition: p.produce(part))
                    commit = r % 2 == 0
                    step("EndTxn (Commit)" if commit else "EndTxn (Abort)", lambda c=commit: p.end(c))
        db.dispose()
    dialect._copy_from_stdin = original_copy  # type: ignore[assignment]

    def spread(values: list[int]) -> str:
        return str(values[0]) if min(values) == max(values) else f"{min(values)}-{max(values)}"

    print(f"# {args.db}, {args.rounds} transactions each, {args.records} records a Produce\n")
    print("| transaction version | request | times | statements | COPYs |\n| ---: | --- | ---: | ---: | ---: |")
    for (tv, name), counts in seen.items():
        print(f"| {tv} | {name} | {len(counts)} | {spread([c[0] for c in counts])} | "
              f"{spread([c[1] for c in counts])} |")
    if args.show:
        for (tv, name), statements in last_texts.items():
            print(f"\n{tv}, {name}:")
            for statement in statements:
                print(f"  {statement}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
