"""DeleteRecords with `consumed_by`: drop what every one of some consumer groups has consumed,
the outbox's way to keep its log short (both databases)."""

from __future__ import annotations

from typing import Any

from tests.helpers import begin, create_topic, fetch, ident, init_producer, send


def produce(client: Any, *values: Any) -> None:
    r = client.post("/v1/records", json={"batches": [{"topic": "t", "partition": 0,
                                                      "records": [{"value": v} for v in values]}]})
    assert r.status_code == 200, r.text


def commit_offset(client: Any, group: str, offset: int) -> None:
    r = client.post(f"/v1/groups/{group}/offsets", json={"offsets": [{"topic": "t", "partition": 0, "offset": offset}]})
    assert r.status_code == 200, r.text


def delete_consumed(client: Any, *groups: str) -> Any:
    return client.post("/v1/topics/t/partitions/0/delete-records", json={"consumed_by": list(groups)})


def values_from(client: Any, position: int) -> list[Any]:
    return [r["value"] for r in fetch(client, "t", 0, position)["records"]]


def test_the_log_start_moves_to_the_lowest_committed_offset_of_the_groups(client: Any) -> None:
    create_topic(client, "t")
    produce(client, *range(10))
    commit_offset(client, "fast", 8)
    commit_offset(client, "slow", 5)

    r = delete_consumed(client, "fast", "slow")

    assert r.json() == {"topic": "t", "partition": 0, "log_start_offset": 5}
    assert client.get("/v1/topics/t/partitions/0/records", params={"offset": 4}).status_code == 416
    assert values_from(client, 5) == [5, 6, 7, 8, 9]


def test_a_group_that_has_committed_nothing_here_keeps_everything(client: Any) -> None:
    create_topic(client, "t")
    produce(client, *range(4))
    commit_offset(client, "fast", 3)

    assert delete_consumed(client, "fast", "new").json()["log_start_offset"] == 0


def test_a_transaction_committed_past_the_groups_position_keeps_its_records_below_it(client: Any) -> None:
    create_topic(client, "t")
    produce(client, "p0")  # offset 0
    p = init_producer(client, "x")
    begin(client, "x", p)
    assert send(client, [{"topic": "t", "partition": 0, "base_sequence": 0, "records": [{"value": "x1"}]}],
                p, "x").status_code == 200  # offset 1
    produce(client, "p2")  # offset 2
    assert client.post("/v1/transactions/x/commit", json=ident(p)).status_code == 200  # marker 3
    # read_committed: p0 at 0, p2 at 2, then x1 at 3. A group that read p0 and p2 is at 3.
    commit_offset(client, "g", 3)

    assert delete_consumed(client, "g").json()["log_start_offset"] == 1
    assert values_from(client, 3) == ["x1"]  # what the group reads next is all there


def test_the_log_start_never_passes_the_last_stable_offset(client: Any) -> None:
    create_topic(client, "t")
    produce(client, "p0")  # 0
    p = init_producer(client, "x")
    begin(client, "x", p)
    assert send(client, [{"topic": "t", "partition": 0, "base_sequence": 0, "records": [{"value": "x1"}]}],
                p, "x").status_code == 200  # 1, open
    produce(client, "p2")  # 2
    commit_offset(client, "g", 3)

    assert delete_consumed(client, "g").json()["log_start_offset"] == 1


def test_offset_and_consumed_by_go_one_at_a_time(client: Any) -> None:
    create_topic(client, "t")
    for body in ({}, {"offset": 0, "consumed_by": ["g"]}):
        r = client.post("/v1/topics/t/partitions/0/delete-records", json=body)
        assert (r.status_code, r.json()["error_code"]) == (400, "INVALID_REQUEST")
