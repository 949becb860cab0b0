"""The client's JsonText: a record's value given as its JSON text goes into the Send's body as
that text, never parsed and encoded again; headers go as given, {} included. The service is an
httpx.MockTransport that records the bodies it is sent."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from app.client import JsonText, Producer
from app.client.json_text import json_content

URL = "http://outbox.test"


def test_json_text_is_kept_as_given_without_the_white_space_around_it() -> None:
    for text, kept in [("123456789012345678901234567890", "123456789012345678901234567890"), ("1.10", "1.10"),
                       ('"\\u00e9"', '"\\u00e9"'), ('{"a":1,"a":2}', '{"a":1,"a":2}'),
                       (" \t[1, 2,\n 3]\r\n", "[1, 2,\n 3]"), (b' {"b": "\xc3\xa9"} ', '{"b": "é"}'),
                       ("1e400", "1e400")]:  # a number past a float is the service's to refuse
        assert JsonText(text).text == kept


@pytest.mark.parametrize("text", ["plain text", "", "   ", '1},{"value":2', '"a" "b"', "[1,", "NaN", '"\\ud800"',
                                  b'"\xff"', "'single'"])
def test_json_text_that_is_not_one_json_value_is_a_value_error(text: str | bytes) -> None:
    """Spliced into the body, such text could end the value early and add a record of its own
    (`1},{"value":2`): it is refused before it is buffered."""
    with pytest.raises(ValueError, match="^not one JSON value: "):
        JsonText(text)


def test_a_body_without_json_text_is_encoded_as_httpx_encodes_it() -> None:
    body: dict[str, Any] = {"producer_id": 1, "batches": [{"topic": "t", "partition": 0, "records": [
        {"value": {"n": 10**30, "f": 1.5, "s": "é\n", "l": [None, True], 1: "int key"}, "key": "k",
         "headers": {}}]}]}
    assert json_content(body) == httpx.Request("POST", URL, json=body).content
    with pytest.raises(ValueError, match="Out of range float values are not JSON compliant"):
        json_content({"value": float("nan")})
    with pytest.raises(TypeError, match="Object of type set is not JSON serializable"):
        json_content({"value": JsonText("1"), "other": {1, 2}})


def test_a_send_carries_json_text_as_it_is_and_empty_headers_as_an_empty_object() -> None:
    bodies: list[bytes] = []

    def service(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/topics/t":
            return httpx.Response(200, json={"partition_count": 1})
        if request.url.path == "/v1/producers":
            return httpx.Response(200, json={"producer_id": 7, "producer_epoch": 0})
        bodies.append(request.content)
        assert request.headers["content-type"] == "application/json"
        return httpx.Response(200, json={"results": [{"topic": "t", "partition": 0, "base_offset": 0,
                                                      "record_count": 4}]})

    producer = Producer(URL, client=httpx.Client(base_url=URL, transport=httpx.MockTransport(service)))
    producer.send("t", JsonText(" 123456789012345678901234567890 "), partition=0, headers={})
    producer.send("t", JsonText('{"a":1,"a":2, "e": "\\u00e9"}'), partition=0, headers=None)
    producer.send("t", {"n": 1.10}, partition=0, headers={"h": "1"})
    producer.send("t", None, key="k", partition=0)
    producer.flush()
    assert bodies == [
        b'{"producer_id":7,"producer_epoch":0,"batches":[{"topic":"t","partition":0,"base_sequence":0,"records":['
        b'{"value":123456789012345678901234567890,"headers":{}},'
        b'{"value":{"a":1,"a":2, "e": "\\u00e9"}},'
        b'{"value":{"n":1.1},"headers":{"h":"1"}},'
        b'{"value":null,"key":"k"}]}]}'
    ]
