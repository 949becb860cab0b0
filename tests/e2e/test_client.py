"""The Python client against a live service: producer, consumer, KIP-360 and KIP-447, on both databases."""

from __future__ import annotations

import pytest

from app.client import AbortableError, Consumer, Producer, ProducerFencedError, UnknownTopicOrPartitionError

pytestmark = pytest.mark.e2e


@pytest.fixture
def url(launcher):  # type: ignore[no-untyped-def]
    return launcher.server().url


def _create(url: str, name: str, partitions: int) -> None:
    import httpx

    r = httpx.post(f"{url}/v1/topics", json={"name": name, "partitions": partitions})
    assert r.status_code == 201, r.text


def _read_committed(url: str, topic: str, partitions: int) -> list:
    c = Consumer(url)
    c.assign([(topic, p) for p in range(partitions)])
    out = []
    while True:
        got = c.poll(timeout_s=0.2)
        if not got:
            break
        out += got
    c.close()
    return out


def test_transactional_producer_and_consumer_round_trip(url):  # type: ignore[no-untyped-def]
    _create(url, "in", 2)
    _create(url, "out", 2)
    p = Producer(url)
    for i in range(10):
        p.send("in", {"n": i}, key=f"k{i}")
    p.flush()
    consumer = Consumer(url, "g", session_timeout_ms=3000)
    consumer.subscribe(["in"])
    tp = Producer(url, "copier")
    tp.init_transactions()
    seen = []
    while len(seen) < 10:
        records = consumer.poll(timeout_s=1)
        assert records or len(seen) == 10
        tp.begin_transaction()
        for r in records:
            tp.send("out", {"n": r.value["n"] * 10}, key=r.key)
        tp.send_offsets_to_transaction(consumer.position_offsets(), consumer.group_metadata())
        tp.commit_transaction()
        seen += records
    consumer.close()
    out = sorted(r.value["n"] for r in _read_committed(url, "out", 2))
    assert out == [i * 10 for i in range(10)]
    check = Consumer(url, "g")
    check.subscribe(["in"])
    assert check.position_offsets() == {("in", 0): consumer.position(("in", 0)), ("in", 1): consumer.position(("in", 1))}
    check.close()


def test_aborted_transaction_output_is_never_read(url):  # type: ignore[no-untyped-def]
    _create(url, "out", 1)
    tp = Producer(url, "x")
    tp.init_transactions()
    tp.begin_transaction()
    tp.send("out", "aborted")
    tp.flush()
    tp.abort_transaction()
    tp.begin_transaction()
    tp.send("out", "committed")
    tp.commit_transaction()
    assert [r.value for r in _read_committed(url, "out", 1)] == ["committed"]


def test_parallel_writers_prepare_and_one_producer_commits_them_with_its_own(url):  # type: ignore[no-untyped-def]
    _create(url, "out", 2)
    writers = [Producer(url, f"writer-{i}") for i in range(2)]
    prepared = []
    for i, w in enumerate(writers):
        w.init_transactions()
        w.begin_transaction()
        w.send("out", f"from writer {i}", partition=i)
        prepared.append(w.prepare_transaction())
    driver = Producer(url, "driver")
    driver.init_transactions()
    driver.begin_transaction()
    driver.send("out", "from the driver", partition=0)
    assert _read_committed(url, "out", 2) == []

    driver.commit_transaction(prepared=prepared)

    assert sorted(r.value for r in _read_committed(url, "out", 2)) == ["from the driver", "from writer 0", "from writer 1"]


def test_out_of_order_sequence_is_abortable_and_abort_bumps_the_epoch(url):  # type: ignore[no-untyped-def]
    _create(url, "out", 1)
    tp = Producer(url, "x")
    tp.init_transactions()
    pid, epoch = tp.producer_id, tp.producer_epoch
    tp.begin_transaction()
    tp.send("out", "a")
    tp.flush()
    tp._next_sequence[("out", 0)] += 5  # as if a batch had expired unseen
    tp.send("out", "b")
    with pytest.raises(AbortableError) as raised:
        tp.flush()
    assert raised.value.error_code == "OUT_OF_ORDER_SEQUENCE_NUMBER"
    tp.abort_transaction()
    assert (tp.producer_id, tp.producer_epoch) == (pid, epoch + 1)
    tp.begin_transaction()
    tp.send("out", "c")
    tp.commit_transaction()
    assert [r.value for r in _read_committed(url, "out", 1)] == ["c"]


def test_recovery_is_fenced_when_another_instance_initialised_in_between(url):  # type: ignore[no-untyped-def]
    _create(url, "out", 1)
    first = Producer(url, "x")
    first.init_transactions()
    first.begin_transaction()
    first.send("out", "a")
    first.flush()
    first._next_sequence[("out", 0)] += 5
    first.send("out", "b")
    with pytest.raises(AbortableError):
        first.flush()
    second = Producer(url, "x")
    second.init_transactions()
    with pytest.raises(ProducerFencedError):
        first.abort_transaction()
    second.begin_transaction()
    second.send("out", "from-second")
    second.commit_transaction()
    assert [r.value for r in _read_committed(url, "out", 1)] == ["from-second"]


def test_subscribing_to_a_topic_that_does_not_exist_raises_unknown_topic_at_once(url):  # type: ignore[no-untyped-def]
    # The service refuses a JoinGroup naming a topic it does not have (Kafka would accept the
    # subscription and assign nothing until the topic appears).
    _create(url, "in", 1)
    consumer = Consumer(url, "g")
    with pytest.raises(UnknownTopicOrPartitionError) as raised:
        consumer.subscribe(["in", "nope"])
    assert raised.value.message == "unknown topic(s): nope"
    consumer.close()


def test_a_transaction_goes_on_after_a_send_to_a_topic_that_does_not_exist(url):  # type: ignore[no-untyped-def]
    _create(url, "out", 1)
    tp = Producer(url, "x")
    tp.init_transactions()
    tp.begin_transaction()
    tp.send("out", "kept")
    with pytest.raises(UnknownTopicOrPartitionError) as raised:
        tp.send("nope", "refused")
    assert raised.value.topic == "nope"
    tp.commit_transaction()
    assert [r.value for r in _read_committed(url, "out", 1)] == ["kept"]


def test_expected_offset_race_has_exactly_one_winner(url):  # type: ignore[no-untyped-def]
    import threading

    import httpx

    _create(url, "log", 1)
    results: list[int] = []
    barrier = threading.Barrier(2)

    def write(tag: str) -> None:
        body = {"batches": [{"topic": "log", "partition": 0, "expected_offset": 0,
                             "records": [{"value": f"{tag}-{i}"} for i in range(50)]}]}
        barrier.wait()
        results.append(httpx.post(f"{url}/v1/records", json=body).status_code)

    threads = [threading.Thread(target=write, args=(t,)) for t in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == [200, 409]
    values = [r.value for r in _read_committed(url, "log", 1)]
    assert len(values) == 50 and len({v.split("-")[0] for v in values}) == 1
    assert values == sorted(values, key=lambda v: int(v.split("-")[1]))
