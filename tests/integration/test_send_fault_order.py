"""The order in which a Send's faults are named (app.services.log_service.check_send), on both
databases: a Send with an empty batch and two batches of one partition is refused for the empty
batch, whether it comes before or after the two. Over HTTP the schema refuses the empty batch
first; the service (LogService.send, behind every door) names it first as well."""

from __future__ import annotations

from typing import Any

import pytest

from app.domain.errors import InvalidRequest
from app.domain.records import RecordToAppend, SendBatch
from tests.helpers import batch, create_topic, send

TWICE = [batch("orders", 0, ["x"]), batch("orders", 0, ["y"])]  # two batches of orders/0
EMPTY = batch("orders", 1, [])


@pytest.mark.parametrize(("batches", "field"), [
    (TWICE + [EMPTY], "body.batches.2.records"),
    ([EMPTY] + TWICE, "body.batches.0.records"),
], ids=["empty-batch-last", "empty-batch-first"])
def test_an_http_send_with_an_empty_batch_and_a_partition_twice_is_refused_for_the_empty_batch(
        client: Any, batches: list[dict], field: str) -> None:
    create_topic(client, "orders", 2)

    r = send(client, batches)

    assert (r.status_code, r.json()["error_code"], r.json()["message"]) == (
        422, "INVALID_REQUEST", f"invalid request: {field}: Expected `array` of length >= 1")


def _batch(partition: int, values: list[str]) -> SendBatch:
    return SendBatch("orders", partition, [RecordToAppend(None, v, None, 5) for v in values])


@pytest.mark.parametrize("batches", [
    [_batch(0, ['"x"']), _batch(0, ['"y"']), _batch(1, [])],
    [_batch(1, []), _batch(0, ['"x"']), _batch(0, ['"y"'])],
], ids=["empty-batch-last", "empty-batch-first"])
def test_the_services_send_with_an_empty_batch_and_a_partition_twice_is_refused_for_the_empty_batch(
        client: Any, batches: list[SendBatch]) -> None:
    create_topic(client, "orders", 2)

    with pytest.raises(InvalidRequest) as refused:
        client.app.state.services.log.send(batches, producer_id=None, producer_epoch=None, transactional_id=None)

    assert (refused.value.error_code, refused.value.message) == ("INVALID_REQUEST",
                                                                 "batch for orders/1 has no records")
