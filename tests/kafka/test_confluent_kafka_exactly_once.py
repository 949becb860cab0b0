"""librdkafka's exactly-once loop (examples/kafka_transactions.py, shaped like librdkafka's own
transactional example) as separate processes against `outbox serve --kafka-listener`, killed
with SIGKILL at random moments and started again with the same `transactional.id`: a
read_committed reader of the output finds every input's result exactly once. And a second
instance of a `transactional.id` fences the first, whose open transaction is never seen."""

from __future__ import annotations

import random
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from tests.e2e.conftest import PYTHON, ROOT, START_TIMEOUT_S, Backend, Launcher, ServiceProcess, free_port

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

INPUT, OUTPUT, GROUP, DEAD_LETTER = "numbers", "squares", "squarer", "numbers-dead"
PARTITIONS = 4
TIMEOUT_S = 120
EXIT_FATAL = 3  # examples/kafka_transactions.py's exit status once its producer is fenced


class Loop:
    """One examples/kafka_transactions.py process, its output in a log file."""

    def __init__(self, tmp: Path, bootstrap: str, transactional_id: str, *extra: str) -> None:
        self.log_path = tmp / f"loop-{transactional_id}-{time.monotonic_ns()}.log"
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in wait()
        self.proc = subprocess.Popen(
            [PYTHON, "-m", "examples.kafka_transactions", "--bootstrap", bootstrap, "--input", INPUT,
             "--output", OUTPUT, "--group", GROUP, "--transactional-id", transactional_id,
             "--session-timeout-ms", "3000", *extra],
            cwd=ROOT, stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def kill9(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.wait()

    def freeze(self) -> None:
        """SIGSTOP: it sends nothing more until thawed or killed."""
        self.proc.send_signal(signal.SIGSTOP)

    def thaw(self) -> None:
        self.proc.send_signal(signal.SIGCONT)

    def stop(self) -> int:
        """SIGTERM once it handles it (it says `starting`): it finishes what it was doing."""
        deadline = time.monotonic() + START_TIMEOUT_S
        while self.proc.poll() is None and "starting" not in self.log_text() and time.monotonic() < deadline:
            time.sleep(0.05)
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.wait()

    def wait(self, timeout_s: float = 30) -> int:
        try:
            return self.proc.wait(timeout=timeout_s)
        finally:
            self._log.close()

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")


@pytest.fixture
def start_loop(backend: Backend) -> Iterator[Callable[..., Loop]]:
    """Starts loop processes; whatever a test leaves running is killed at its end."""
    started: list[Loop] = []

    def start(bootstrap: str, transactional_id: str, *extra: str) -> Loop:
        started.append(Loop(backend.tmp, bootstrap, transactional_id, *extra))
        return started[-1]

    yield start
    for loop in started:
        if loop.proc.poll() is None:
            loop.kill9()


def _serve(launcher: Launcher) -> tuple[ServiceProcess, httpx.Client, str]:
    port = free_port()
    p = launcher.server(kafka_listener=f"127.0.0.1:{port}", coordinator_interval_ms=100)
    p.wait_for_log(r"Kafka listener at 127\.0\.0\.1:\d+")
    client = p.client()
    for name in (INPUT, OUTPUT):
        assert client.post("/v1/topics", json={"name": name, "partitions": PARTITIONS}).status_code == 201
    return p, client, f"127.0.0.1:{port}"


def _input(n: int, bad_every: int | None) -> bytes:
    """Input n's value: the number's text, or with `bad_every`, for every bad_every-th input a
    JSON string the loop cannot square (it skips it, to the dead-letter topic if it has one)."""
    return b'"bad%d"' % n if bad_every and n % bad_every == 0 else str(n).encode()


def _fill(bootstrap: str, count: int, bad_every: int | None = None) -> None:
    """Inputs 0..count-1 (key the number's text, value _input's), input n to partition n % PARTITIONS."""
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 20})
    for n in range(count):
        p.produce(INPUT, key=str(n).encode(), value=_input(n, bad_every), partition=n % PARTITIONS)
    assert p.flush(TIMEOUT_S) == 0


def _expected(count: int, bad_every: int | None = None) -> Counter[tuple[bytes, bytes]]:
    return Counter((str(n).encode(), b'{"n":%d,"square":%d}' % (n, n * n)) for n in range(count)
                   if _input(n, bad_every) == str(n).encode())


def _expected_dead(count: int, bad_every: int) -> Counter[tuple[bytes, bytes]]:
    return Counter((str(n).encode(), _input(n, bad_every)) for n in range(count) if n % bad_every == 0)


def _committed(client: httpx.Client) -> int:
    """How many inputs the group's committed offsets have passed."""
    r = client.get(f"/v1/groups/{GROUP}/offsets", params={"require_stable": "false"})
    assert r.status_code == 200, r.text
    return sum(o["offset"] for o in r.json()["offsets"] if o["topic"] == INPUT)


def _until(condition: Any, what: str, timeout_s: float = TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _read_committed_output(bootstrap: str, topic: str = OUTPUT, *,
                           headers: bool = False) -> list[tuple[Any, ...]]:
    """(partition, offset, key, value) of every record of `topic` a read_committed consumer is
    given, up to each partition's last stable offset (no transaction is open at the end:
    everything is decided); with `headers`, each record's headers as well."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "verifier", "enable.auto.commit": False,
                  "isolation.level": "read_committed", "fetch.wait.max.ms": 100})
    try:
        ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in range(PARTITIONS)}
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        got: list[tuple[Any, ...]] = []

        def caught_up() -> bool:
            positions = c.position([TopicPartition(topic, p) for p in range(PARTITIONS)])
            return all(t.offset >= ends[t.partition] for t in positions if ends[t.partition] > 0)

        deadline = time.monotonic() + TIMEOUT_S
        while not caught_up():
            assert time.monotonic() < deadline, f"{topic} was not read up to {ends}"
            m = c.poll(0.2)
            if m is not None and m.error() is None:
                got.append((m.partition(), m.offset(), m.key(), m.value(), *((m.headers(),) if headers else ())))
        return got
    finally:
        c.close()


def _results(read: list[tuple[int, int, bytes, bytes]]) -> Counter[tuple[bytes, bytes]]:
    return Counter((key, value) for _, _, key, value in read)


def _where_they_differ(output: list[tuple[Any, ...]], expected: Counter[tuple[bytes, bytes]],
                       inputs: list[tuple[Any, ...]], logs: Path, backend: Backend) -> str:
    """What a failed comparison needs to be explained: each result read other than once, with
    where each copy is in the output and what wrote it (its batch row's producer, epoch,
    transaction and state, and that transaction's markers: a copy from an aborted or a fenced
    transaction is not a reprocessing), and where its input is (an input written twice would be
    consumed twice); then what every loop process said about those inputs (the transactions
    that consumed them, committed or aborted) and about its partitions (each rebalance, each
    rewind), the killed processes' too. The whole logs stay in `logs`."""
    got = _results(output)
    lines, inputs_at, txn_ids = [], set(), set()
    batches = _batch_rows(backend)
    for result in sorted(set(got) | set(expected)):
        if got[result] != expected[result]:
            key = result[0]
            copies = [(p, o, batches.get((p, o))) for p, o, k, _ in output if k == key]
            txn_ids |= {b[2] for _, _, b in copies if b is not None}
            at = [(p, o) for p, o, k, _ in inputs if k == key]
            inputs_at |= set(at)
            lines.append(f"{result!r}: read {got[result]} times, expected {expected[result]}; output at "
                         f"{[(p, o) for p, o, _ in copies]} (producer id, epoch, txn id, state: "
                         f"{[b for _, _, b in copies]}), input at {at}")
    for m in backend.markers():
        if m[4] in txn_ids:
            lines.append(f"txn {m[4]}: {m[3]} marker at {m[0]}/{m[1]} offset {m[2]}")
    partitions = {p for p, _ in inputs_at}
    for log in sorted(logs.glob("loop-*.log")):
        said = [line for line in log.read_text(errors="replace").splitlines()
                if (line.startswith(("committed", "aborting")) and _consumed_any(line, inputs_at))
                or (line.startswith(("assigned", "revoked", "lost")) and partitions & _named(line.split()[1]))
                or line.startswith("rewound") or "rror" in line]
        lines.append(f"{log.name}: " + " | ".join(said[:60]))
    return "\n".join(lines)


def _batch_rows(backend: Backend) -> dict[tuple[int, int], tuple[Any, ...]]:
    """(producer id, epoch, txn id, state) of the batch row holding each data record of the
    output, by its (partition, offset)."""
    from sqlalchemy import select

    from app.storage.tables import record_batches, records
    from tests.helpers import records_with_batches

    rows = backend.query(
        select(records.c.partition, records.c.offset, record_batches.c.producer_id, record_batches.c.producer_epoch,
               record_batches.c.txn_id, record_batches.c.state)
        .select_from(records_with_batches())
        .where(records.c.topic_id == backend.topic_id(OUTPUT), records.c.control_type.is_(None)))
    return {(p, o): tuple(rest) for p, o, *rest in rows}


def _named(partitions: str) -> set[int]:
    """The partitions a rebalance line of the loop names (`2,3`, or `-` for none)."""
    return {int(p) for p in partitions.split(",") if p != "-"}


def _consumed_any(line: str, inputs_at: set[tuple[int, int]]) -> bool:
    """Whether a loop's line on a transaction's end says it consumed one of these inputs
    (partition, offset): its `consumed 2:6-10,3:0-4`."""
    _, _, consumed = line.rpartition("consumed ")
    for part in consumed.split(","):
        partition, _, span = part.partition(":")
        first, _, last = span.partition("-")
        if first.isdigit() and last.isdigit() and any(
                p == int(partition) and int(first) <= o <= int(last) for p, o in inputs_at):
            return True
    return False


def _output_in_the_log(backend: Backend) -> set[tuple[int, int]]:
    """(partition, offset) of the output's data records in the log, committed, aborted or
    open alike."""
    from sqlalchemy import select

    from app.storage.tables import records

    return set(backend.query(select(records.c.partition, records.c.offset).where(
        records.c.topic_id == backend.topic_id(OUTPUT), records.c.control_type.is_(None))))


def _open_with_records(transaction: dict[str, Any]) -> bool:
    return transaction.get("state") == "Ongoing" and bool(transaction.get("partitions"))


def test_the_loop_killed_at_random_moments_leaves_every_result_once(
        launcher: Launcher, backend: Backend, start_loop: Callable[..., Loop]) -> None:
    rng = random.Random()
    count, kills, bad_every = 2000, 6, 97
    serve, client, bootstrap = _serve(launcher)
    assert client.post("/v1/topics", json={"name": DEAD_LETTER, "partitions": PARTITIONS}).status_code == 201
    _fill(bootstrap, count, bad_every)
    ids = ["squarer-0", "squarer-1"]
    extra = ("--commit-every", "20", "--commit-interval-ms", "200", "--dead-letter", DEAD_LETTER)
    loops = {tid: start_loop(bootstrap, tid, *extra) for tid in ids}

    def aborted() -> list[tuple]:
        return [m for m in backend.markers() if m[0] == OUTPUT and m[3] == "ABORT"]

    def kill_in_a_transaction(delay_s: float) -> None:
        # One of the instances killed while it has a transaction open with records in the log
        # (at a random point of it, its commit included): what it produced there must never be
        # seen, and its input must be processed again. Only an instance that has taken part
        # (committed once since it started) is chosen, so that a kill does not just end a
        # process before it has done anything, nor an instance that holds no input partition.
        # Up to 30 s: after a kill the group waits out the killed member's session before it
        # settles, and no transaction is open meanwhile.
        # The victim is frozen first and killed only if its transaction is still open with
        # records: a transaction of 20 records lasts a few ms on a fast machine, so a kill after
        # the delay alone mostly fell between two transactions, and a run could end with none
        # cut short (seen once in 12 runs). If the frozen victim's transaction has ended it is
        # thawed, and another moment is tried. A commit it sent before it froze may still be
        # decided: the kill then lands in its commit.
        victim = rng.choice(ids)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            candidates = [tid for tid in rng.sample(ids, len(ids)) if "committed" in loops[tid].log_text()]
            found = [tid for tid in candidates if _open_with_records(client.get(f"/v1/transactions/{tid}").json())]
            if found:
                victim = found[0]
                time.sleep(delay_s)
                loops[victim].freeze()
                try:
                    still_open = _open_with_records(client.get(f"/v1/transactions/{victim}").json())
                except BaseException:
                    loops[victim].thaw()  # not left stopped, where stop() would wait on it
                    raise
                if still_open:
                    break
                loops[victim].thaw()
                delay_s = rng.uniform(0, delay_s)
                continue
            time.sleep(0.005)
        loops[victim].kill9()
        loops[victim] = start_loop(bootstrap, victim, *extra)

    try:
        # Random moments of the run, however fast it goes: each kill once the group has
        # committed a random share of the input, at a random point of an open transaction.
        for share in sorted(rng.uniform(0.05, 0.9) for _ in range(kills)):
            _until(lambda: _committed(client) >= share * count, f"the group to commit {share:.0%} of the input")
            kill_in_a_transaction(rng.uniform(0, 0.1))
        # On a fast machine every random point may fall after a commit: then kill at once in
        # an open transaction (a few more tries while input is left), so that the run always
        # has a transaction cut short, which the assertions below are about.
        for _ in range(3):
            # What a kill cut short is aborted once its transactional id starts again.
            deadline = time.monotonic() + 15
            while not aborted() and time.monotonic() < deadline:
                time.sleep(0.05)
            if aborted() or _committed(client) >= 0.95 * count:
                break
            kill_in_a_transaction(0.0)
        _until(lambda: _committed(client) == count, "the group to commit the whole input")
    finally:
        exits = {tid: loop.stop() for tid, loop in loops.items()}
    assert exits == {tid: 0 for tid in ids}, {tid: loops[tid].log_text()[-2000:] for tid in ids}

    output = _read_committed_output(bootstrap)
    assert _results(output) == _expected(count, bad_every), _where_they_differ(
        output, _expected(count, bad_every), _read_committed_output(bootstrap, INPUT), backend.tmp, backend)
    # Each skipped input once in the dead-letter topic, however many times the kills made the
    # loop meet it again: produced in the transaction that passed its offset.
    assert _results(_read_committed_output(bootstrap, DEAD_LETTER)) == _expected_dead(count, bad_every)
    # The kills did cut transactions short: their records are in the log, never read.
    assert aborted(), "no kill interrupted a transaction"
    assert len(_output_in_the_log(backend)) > sum(_expected(count, bad_every).values())
    assert "Traceback" not in serve.log_text()  # clients killed mid-request are let go quietly


def test_a_second_instance_of_the_transactional_id_fences_the_first(
        launcher: Launcher, backend: Backend, start_loop: Callable[..., Loop]) -> None:
    count = 40
    _, client, bootstrap = _serve(launcher)
    _fill(bootstrap, count)
    # The first instance keeps everything it produces in one open transaction.
    first = start_loop(bootstrap, "squarer", "--commit-every", "1000000", "--commit-interval-ms", "3600000")
    _until(lambda: len(_output_in_the_log(backend)) == count, "the first instance to produce every result")
    assert client.get("/v1/transactions/squarer").json()["state"] == "Ongoing"
    zombie = _output_in_the_log(backend)

    second = start_loop(bootstrap, "squarer", "--commit-every", "10", "--commit-interval-ms", "200")
    try:
        assert first.wait() == EXIT_FATAL, first.log_text()
        _until(lambda: _committed(client) == count, "the second instance to consume the whole input")
    finally:
        first.stop()
        assert second.stop() == 0, second.log_text()

    assert "fatal: _FENCED" in first.log_text()
    read = _read_committed_output(bootstrap)
    assert _results(read) == _expected(count)
    # The first instance's results stay in the log, aborted by the second's init_transactions,
    # and none of them is read.
    assert zombie <= _output_in_the_log(backend)
    assert {(p, offset) for p, offset, _, _ in read} & zombie == set()


def test_a_skipped_input_goes_to_the_dead_letter_topic_once_with_its_offset(
        launcher: Launcher, start_loop: Callable[..., Loop]) -> None:
    _, client, bootstrap = _serve(launcher)
    assert client.post("/v1/topics", json={"name": DEAD_LETTER, "partitions": PARTITIONS}).status_code == 201
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for value, partition in ((b"2", 0), (b'"seven"', 1), (b"3", 1)):  # a JSON topic: JSON values
        p.produce(INPUT, key=value, value=value, partition=partition)
    assert p.flush(TIMEOUT_S) == 0
    loop = start_loop(bootstrap, "squarer-dead", "--dead-letter", DEAD_LETTER, "--commit-every", "1")

    _until(lambda: _committed(client) == 3, "the group's offsets to pass every input")
    assert loop.stop() == 0

    dead = _read_committed_output(bootstrap, DEAD_LETTER, headers=True)
    assert [(key, value, headers) for _, _, key, value, headers in dead] == [
        (b'"seven"', b'"seven"', [("source", b"numbers/1/0"), ("reason", b"value is not an integer: b'\"seven\"'")])]
    assert _results(_read_committed_output(bootstrap)) == Counter({
        (b"2", b'{"n":2,"square":4}'): 1, (b"3", b'{"n":3,"square":9}'): 1})


@pytest.mark.parametrize("option", ["--output", "--dead-letter"])
def test_a_topic_to_write_to_that_does_not_exist_is_refused_before_any_transaction(
        launcher: Launcher, start_loop: Callable[..., Loop], option: str) -> None:
    _, client, bootstrap = _serve(launcher)

    loop = start_loop(bootstrap, "squarer-nowhere", option, "nowhere")

    assert loop.wait() == 2
    assert f"error: {option} 'nowhere': no such topic: create it first" in loop.log_text()
    assert client.get("/v1/transactions/squarer-nowhere").json()["state"] == "Empty"
