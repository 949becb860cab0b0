"""The README's pizza shop, exactly once: orders from `orders` to income in `income`.

Reads `orders` as consumer group `pizza-income`. Every order is a pizza: an order
{"pizza": "margherita", "price": 9.5} keyed "order-1" earns {"amount": 9.5} keyed "order-1" in
`income`, in the partition with the order's partition number (modulo income's partition
count), as in the README's walkthrough. Each poll is one transaction carrying the income
records and the group's offsets past the orders, so, killed at any point and restarted, the
example leaves each order's income in `income` once.

An order it cannot turn into income (a value that is not a JSON object, or whose `price` is
missing or not a number) does not stop it: with --dead-letter-topic it goes there, with its
key, value and headers and `dlq.*` headers saying why and where it came from, in the same
transaction as the income and the offsets (exactly once too); without it, it is skipped with
a WARNING naming its topic, partition, offset and the reason.

A topic that does not exist ends it at once, with one line saying which and how to create it.

Where the group has no committed offset, or its committed offset fell below the log start
(retention or DeleteRecords deleted orders it had not read), it starts at the oldest order
still there (the consumer's auto_offset_reset="earliest", logged as a WARNING for the latter).

    .venv/bin/python -m examples.pizza_income --url http://127.0.0.1:8000 --idle-exit-s 5
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from app.client import (
    AbortableError,
    AuthenticationError,
    ClientError,
    Consumer,
    ConsumerRecord,
    ExponentialBackoff,
    FatalError,
    Producer,
    RetriableError,
    UnknownTopicOrPartitionError,
)
from examples.api_key import add_api_key_argument, refused_line

INPUT, OUTPUT, GROUP = "orders", "income", "pizza-income"
TOPIC_PARTITIONS = 2  # what the walkthrough creates, and what the missing-topic hint suggests
# Headers a dead-lettered order carries besides its own.
DLQ_REASON, DLQ_TOPIC, DLQ_PARTITION, DLQ_OFFSET = (
    "dlq.reason", "dlq.original.topic", "dlq.original.partition", "dlq.original.offset",
)
EXIT_OK, EXIT_FAILED, EXIT_INTERRUPTED = 0, 1, 130  # 130: as a shell reports SIGINT

logger = logging.getLogger("pizza_income")


class NotAnOrder(ValueError):
    """The record's value is not an order this example can earn income from."""


def income_of(order: Any) -> dict[str, Any]:
    """The income record's value for one order: {"amount": its price}."""
    if not isinstance(order, dict):
        raise NotAnOrder(f"value is not a JSON object but {_json_type(order)}")
    if "price" not in order:
        raise NotAnOrder("order has no price")
    price = order["price"]
    if isinstance(price, bool) or not isinstance(price, int | float):
        raise NotAnOrder(f"price is not a number but {_json_type(price)}")
    return {"amount": price}


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


@dataclass(frozen=True)
class Totals:
    orders: int = 0
    income: int = 0
    dead_lettered: int = 0
    skipped: int = 0

    def __add__(self, other: Totals) -> Totals:
        return Totals(self.orders + other.orders, self.income + other.income,
                      self.dead_lettered + other.dead_lettered, self.skipped + other.skipped)


@dataclass
class Rejected:
    record: ConsumerRecord
    reason: str


@dataclass(frozen=True)
class Committing:
    """A transaction whose Commit was sent: what it adds to the totals once it is known to have
    committed, and the orders it dead-lettered or skipped, logged then."""

    totals: Totals
    rejected: list[Rejected]


@dataclass(frozen=True)
class Progress:
    """What has been done: the totals of the transactions known to have committed, and the
    transaction whose Commit is under way, if any. One object, replaced whole: Ctrl-C lands
    between two statements, so it finds either a Commit under way or its totals counted,
    never both and never neither."""

    counted: Totals = Totals()
    committing: Committing | None = None


# The states of GET /v1/transactions/{id} in which a transaction's Commit has been decided: the
# service completes it (PrepareCommit) or has (CompleteCommit).
COMMITTED_STATES = ("PrepareCommit", "CompleteCommit")


@dataclass
class PizzaIncome:
    producer: Producer
    consumer: Consumer
    dead_letter_topic: str | None
    backoff: ExponentialBackoff
    progress: Progress = field(default_factory=Progress)
    sleep: Callable[[float], None] = time.sleep

    @property
    def totals(self) -> Totals:
        return self.progress.counted

    def __post_init__(self) -> None:
        # Looked up before InitProducerId: a run that cannot work must not fence one that does.
        self._output_partitions = len(self.producer.partitions_for(OUTPUT))
        self.producer.partitions_for(INPUT)
        self._dlq_partitions = (
            len(self.producer.partitions_for(self.dead_letter_topic)) if self.dead_letter_topic else 0
        )

    def run(self, idle_exit_s: float | None) -> Totals:
        self.producer.init_transactions()
        self.consumer.subscribe([INPUT])
        idle_since, failed_attempts = time.monotonic(), 0
        while True:
            records = self.consumer.poll(timeout_s=0.5)
            if not records:
                if idle_exit_s is not None and time.monotonic() - idle_since > idle_exit_s:
                    return self.totals
                continue
            idle_since = time.monotonic()
            try:
                self._process(records)
            except AbortableError as e:
                # Redone from the committed offsets, after a pause that grows while the
                # failures go on: a lasting failure must not become a loop of requests.
                pause_s = self.backoff.backoff_s(failed_attempts)
                failed_attempts += 1
                logger.warning("transaction aborted (%s); redoing it in %.2f s", e, pause_s)
                self.producer.abort_transaction()
                self.consumer.seek_to_committed()
                self.sleep(pause_s)
            else:
                failed_attempts = 0

    def _process(self, records: list[ConsumerRecord]) -> None:
        self.producer.begin_transaction()
        try:
            income, rejected = 0, []
            for record in records:
                try:
                    value = income_of(record.value)
                except NotAnOrder as e:
                    rejected.append(Rejected(record, str(e)))
                    self._dead_letter(record, str(e))
                    continue
                self.producer.send(OUTPUT, value, key=record.key,
                                   partition=record.partition % self._output_partitions)
                income += 1
            self.producer.send_offsets_to_transaction(
                self.consumer.position_offsets(), self.consumer.group_metadata()
            )
            dropped = len(rejected)
            done = Totals(len(records), income, *((dropped, 0) if self.dead_letter_topic else (0, dropped)))
            self.progress = Progress(self.totals, Committing(done, rejected))
            self.producer.commit_transaction()
        except UnknownTopicOrPartitionError:
            self.progress = Progress(self.totals)
            _abort_quietly(self.producer)  # not to leave it open until its timeout
            raise
        except AbortableError:
            self.progress = Progress(self.totals)  # aborted: redone from the committed offsets
            raise
        self._count_committed()

    def _count_committed(self) -> None:
        """The transaction whose Commit was under way committed: count it."""
        committing = self.progress.committing
        assert committing is not None
        self.progress = Progress(self.totals + committing.totals)
        # Logged once committed: a redone transaction would otherwise log its orders twice.
        for r in committing.rejected:
            where = f"{r.record.topic}/{r.record.partition} offset {r.record.offset} (key {r.record.key!r})"
            if self.dead_letter_topic:
                logger.warning("dead-lettered %s to %s: %s", where, self.dead_letter_topic, r.reason)
            else:
                logger.warning("skipped %s: %s", where, r.reason)

    def interrupted(self) -> Totals:
        """Ctrl-C: end the transaction under way, and return what was done.

        An open transaction is aborted now rather than left to its timeout (which would hold
        the group's offsets unstable). A transaction whose Commit was sent but whose answer was
        not read may have committed: its abort then finds it ended (and is refused, or finds
        nothing to do), and the service's state of the transaction, read once the abort is
        answered, says which it was. The Commit was sent after the transaction's offsets, which
        made the service's transaction Ongoing, so a committed state is this Commit's."""
        committing = self.progress.committing
        try:
            self.producer.abort_transaction()
        except ClientError as e:
            if committing is None:
                logger.warning("could not abort the open transaction: %s", e)
        if committing is None:
            return self.totals
        try:
            state = self.producer.describe_transaction()["state"]
        except ClientError as e:
            logger.warning("a Commit went unanswered and its outcome could not be read (%s): its orders are "
                           "not counted here; the group's committed offsets say whether they were done", e)
            return self.totals
        if state in COMMITTED_STATES:
            self._count_committed()
        elif state == "Ongoing":  # the abort did not reach the service: its timeout aborts it
            logger.warning("could not abort the open transaction; its timeout will")
        return self.totals

    def _dead_letter(self, record: ConsumerRecord, reason: str) -> None:
        if not self.dead_letter_topic:
            return
        headers = {
            **(record.headers or {}),
            DLQ_REASON: reason,
            DLQ_TOPIC: record.topic,
            DLQ_PARTITION: str(record.partition),
            DLQ_OFFSET: str(record.offset),
        }
        self.producer.send(self.dead_letter_topic, record.value, key=record.key,
                           partition=record.partition % self._dlq_partitions, headers=headers)


def _abort_quietly(producer: Producer) -> None:
    try:
        producer.abort_transaction()
    except ClientError as e:
        logger.debug("abort after a missing topic failed: %s", e)


def missing_topic_line(url: str, topic: str | None, error: ClientError) -> str:
    if topic is None:
        return f"a topic does not exist ({error.message}); create it with POST {url}/v1/topics"
    body = json.dumps({"name": topic, "partitions": TOPIC_PARTITIONS})
    return (f"topic {topic!r} does not exist; create it with: curl -s -X POST {url}/v1/topics "
            f"-H 'content-type: application/json' -d '{body}'")


def _missing_of(producer: Producer, topics: list[str]) -> str | None:
    """Which of `topics` does not exist (a Send naming several does not say)."""
    for topic in topics:
        try:
            producer.partitions_for(topic)
        except UnknownTopicOrPartitionError:
            return topic
        except ClientError:
            return None
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    add_api_key_argument(parser)
    parser.add_argument("--transactional-id", default="pizza-income-0")
    parser.add_argument("--dead-letter-topic", default=None, metavar="TOPIC",
                        help="write orders that cannot be turned into income here, in the same "
                             "transaction (the topic must exist); without it they are skipped "
                             "with a WARNING")
    parser.add_argument("--idle-exit-s", type=float, default=None,
                        help="exit after this long without input (for batch runs and tests)")
    parser.add_argument("--session-timeout-ms", type=int, default=10_000)
    parser.add_argument("--transaction-timeout-ms", type=int, default=60_000)
    parser.add_argument("--max-records", type=int, default=500, help="records per poll (per transaction)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per request otherwise

    url = args.url.rstrip("/")
    producer = Producer(url, args.transactional_id, transaction_timeout_ms=args.transaction_timeout_ms,
                        api_key=args.api_key)
    # earliest: every order still in the log earns its income; latest would skip those too.
    consumer = Consumer(url, GROUP, session_timeout_ms=args.session_timeout_ms, max_records=args.max_records,
                        auto_offset_reset="earliest", api_key=args.api_key)
    app = None
    try:
        app = PizzaIncome(producer, consumer, args.dead_letter_topic, ExponentialBackoff())
        totals = app.run(args.idle_exit_s)
    except KeyboardInterrupt:
        # Ctrl-C is how a run without --idle-exit-s ends (PizzaIncome.interrupted).
        totals = app.interrupted() if app is not None else Totals()
        print(f"interrupted after {totals.orders} orders: {totals.income} income records, "
              f"{totals.dead_lettered} dead-lettered, {totals.skipped} skipped", file=sys.stderr)
        return EXIT_INTERRUPTED
    except UnknownTopicOrPartitionError as e:
        topic = e.topic or _missing_of(producer, [INPUT, OUTPUT, *filter(None, [args.dead_letter_topic])])
        print(missing_topic_line(url, topic, e), file=sys.stderr)
        return EXIT_FAILED
    except AuthenticationError as e:
        logger.error("stopping: %s", refused_line(e, args.api_key))
        return EXIT_FAILED
    except (FatalError, RetriableError) as e:
        # Fenced (another instance took over) or the service unreachable past the deadline.
        logger.error("stopping: %s", e)
        return EXIT_FAILED
    except ClientError as e:
        # Any other refusal before the loop could begin: a --url that is not the service's
        # address (a path after it, another server), or an ACL missing.
        hint = (" (is --url the outbox service's address, e.g. http://127.0.0.1:8000, with no path?)"
                if e.error_code == "NOT_FOUND" else "")
        logger.error("stopping: %s%s", e, hint)
        return EXIT_FAILED
    finally:
        consumer.close()
        producer.close()
    print(f"processed {totals.orders} orders: {totals.income} income records, "
          f"{totals.dead_lettered} dead-lettered, {totals.skipped} skipped")
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
