"""Request bodies (app.api.json_body, app.api.send_body), through HTTP on both databases.

Each kind of bad body has one status and a message that names the problem, on every endpoint
that takes a body, and a refused body stores nothing. A record's value is stored and returned
as the JSON text sent.
"""

from __future__ import annotations

from typing import Any

import pytest

from app.api.json_body import UTF8_CHUNK_BYTES
from tests.helpers import create_topic

# Each test's own database, as new, and one app for the module's tests: an app per test was
# most of a test's time here.
pytestmark = pytest.mark.shared_app

JSON = {"content-type": "application/json"}
# One body per operation that takes one, each valid once the topic "t" exists.
OPERATIONS = [
    ("/v1/topics", b'{"name": "u"}'),
    ("/v1/records", b'{"batches": [{"topic": "t", "partition": 0, "records": [{"value": 1}]}]}'),
    ("/v1/producers", b'{"transactional_id": "tx"}'),
    ("/v1/transactions/tx/begin", b'{"producer_id": 0, "producer_epoch": 0}'),
    ("/v1/transactions/tx/offsets",
     b'{"producer_id": 0, "producer_epoch": 0, "group_id": "g", "offsets": [{"topic": "t", "partition": 0, "offset": 0}]}'),
    ("/v1/transactions/tx/commit", b'{"producer_id": 0, "producer_epoch": 0}'),
    ("/v1/transactions/tx/abort", b'{"producer_id": 0, "producer_epoch": 0}'),
    ("/v1/groups/g/offsets", b'{"offsets": [{"topic": "t", "partition": 0, "offset": 0}]}'),
    ("/v1/groups/g/members", b'{"topics": ["t"]}'),
    ("/v1/groups/g/offsets/reset", b'{"topic": "t", "to": "earliest"}'),
]
PATHS = [path for path, _ in OPERATIONS]


def post(client: Any, path: str, body: bytes, headers: dict[str, str] | None = JSON) -> Any:
    return client.post(path, content=body, headers=headers or {})


def stored(client: Any, topic: str = "t") -> list[tuple[int, Any]]:
    page = client.get(f"/v1/topics/{topic}/partitions/0/records", params={"isolation": "read_uncommitted"})
    return [(r["offset"], r["value"]) for r in page.json()["records"]]


def refusal(r: Any, status: int, code: str = "INVALID_REQUEST") -> str:
    assert r.status_code == status, r.text
    body = r.json()
    assert body["error_code"] == code and body["retriable"] is False, body
    return body["message"]


def send_body(value: bytes, key: bytes = b'"k"') -> bytes:
    return b'{"batches":[{"topic":"t","partition":0,"records":[{"key":' + key + b',"value":' + value + b"}]}]}"


# --- content type --------------------------------------------------------------------------


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("content_type", [None, "application/x-www-form-urlencoded", "text/plain",
                                          "application/json; charset=latin-1"])
def test_a_body_not_sent_as_json_is_refused_with_415_naming_the_content_type(
    client: Any, path: str, content_type: str | None
) -> None:
    create_topic(client, "t")
    body = dict(OPERATIONS)[path]
    r = post(client, path, body, {"content-type": content_type} if content_type else None)
    message = refusal(r, 415, "UNSUPPORTED_MEDIA_TYPE")
    assert "content-type: application/json" in message
    assert client.get("/v1/topics").json()["topics"][0]["name"] == "t"
    assert len(client.get("/v1/topics").json()["topics"]) == 1
    assert stored(client) == []


def test_curl_s_default_form_type_is_told_the_flag_that_sends_json(client: Any) -> None:
    # curl -d without -H "content-type: application/json", the likeliest slip from the README.
    create_topic(client, "t")
    r = post(client, "/v1/records", send_body(b"1"), {"content-type": "application/x-www-form-urlencoded"})
    assert refusal(r, 415, "UNSUPPORTED_MEDIA_TYPE") == (
        "the body must be JSON, sent with content-type: application/json (got "
        "'application/x-www-form-urlencoded', curl's default for -d; with curl add "
        "-H 'content-type: application/json')")


@pytest.mark.parametrize("content_type", ["application/json", "application/json; charset=utf-8",
                                          "Application/JSON;charset=UTF-8", "application/vnd.api+json"])
def test_json_content_types_are_taken(client: Any, content_type: str) -> None:
    create_topic(client, "t")
    r = post(client, "/v1/records", send_body(b"1"), {"content-type": content_type})
    assert r.status_code == 200, r.text
    assert stored(client) == [(0, 1)]


# --- malformed bodies: 400, saying what and where -------------------------------------------


@pytest.mark.parametrize("path", PATHS)
def test_an_empty_body_is_refused_with_400(client: Any, path: str) -> None:
    assert "the request body is empty" in refusal(post(client, path, b""), 400)


@pytest.mark.parametrize("path", PATHS)
def test_json_that_does_not_parse_is_refused_with_400_saying_where(client: Any, path: str) -> None:
    message = refusal(post(client, path, b'{\n  "a": 1,\n  "b" 2\n}'), 400)
    assert message.startswith("the body is not valid JSON: "), message
    assert "line 3 column 7" in message, message


@pytest.mark.parametrize("path", PATHS)
def test_a_body_that_is_not_utf8_is_refused_with_400_saying_where(client: Any, path: str) -> None:
    message = refusal(post(client, path, b'{"name": "\xff"}'), 400)
    assert message.startswith("the body is not UTF-8: line 1 column 11 (byte 10)"), message


# The value's bytes (send_body puts its first at byte 69), and where the refusal places them.
@pytest.mark.parametrize(("value", "where", "reason"), [
    (b'"ab\xe2\x82"', "line 1 column 73 (byte 72)", "invalid continuation byte"),  # a three-byte sequence cut short
    (b'"ab\xc0\xaf"', "line 1 column 73 (byte 72)", "invalid start byte"),  # "/" in an overlong form
    (b'"ab\xed\xa0\x80"', "line 1 column 73 (byte 72)", "invalid continuation byte"),  # the lone surrogate U+D800
    # The body is checked UTF8_CHUNK_BYTES at a time. ED, the surrogate's first byte, the first
    # chunk's last: refused in the next chunk, placed where it begins.
    (b'"' + b"x" * (UTF8_CHUNK_BYTES - 71) + b'\xed\xa0\x80"', "line 1 column 65536 (byte 65535)",
     "invalid continuation byte"),
    (b'"' + b"x" * (2 * UTF8_CHUNK_BYTES) + b'\n\xed\xa0\x80"', "line 2 column 1 (byte 131143)",
     "invalid continuation byte"),
], ids=["cut", "overlong", "surrogate", "across-chunks", "third-chunk"])
def test_a_value_that_is_not_utf8_is_refused_saying_where_and_why(
    client: Any, value: bytes, where: str, reason: str
) -> None:
    create_topic(client, "t")
    message = refusal(post(client, "/v1/records", send_body(value)), 400)
    assert message == f"the body is not UTF-8: {where} ({reason})"
    assert stored(client) == []


def test_a_body_ending_inside_a_character_is_refused_as_not_utf8(client: Any) -> None:
    message = refusal(post(client, "/v1/topics", b'{"name": "ab\xe2\x82'), 400)
    assert message == "the body is not UTF-8: line 1 column 13 (byte 12) (unexpected end of data)"


def test_a_character_cut_by_the_utf8_checks_chunks_is_taken_whole(client: Any) -> None:
    """The body is checked UTF8_CHUNK_BYTES at a time: a character across two chunks is one."""
    create_topic(client, "t")
    head = send_body(b'"')[:-len(b'"}]}]}')]
    filler = "x" * (UTF8_CHUNK_BYTES - len(head) - 1)
    value = filler + "\U0001F600" + "y"  # the emoji's 4 bytes from the chunk's last byte on
    assert post(client, "/v1/records", send_body(f'"{value}"'.encode())).status_code == 200
    assert stored(client) == [(0, value)]


def test_a_truncated_body_is_refused_saying_it_ends_early(client: Any) -> None:
    message = refusal(post(client, "/v1/topics", b'{"name": "u", '), 400)
    assert "unexpected end of data: line 1 column 15" in message, message


def test_a_lone_surrogate_is_refused_as_not_json(client: Any) -> None:
    create_topic(client, "t")
    message = refusal(post(client, "/v1/records", send_body(b'"\\ud800"')), 400)
    assert "surrogate" in message, message
    assert stored(client) == []


def test_a_value_nesting_254_levels_is_stored(client: Any) -> None:
    create_topic(client, "t")
    value = b'{"a":' * 127 + b"[" * 127 + b'"]}"' + b"]" * 127 + b"}" * 127
    assert post(client, "/v1/records", send_body(value)).status_code == 200
    [(_, got)] = stored(client)
    for _ in range(127):
        got = got["a"]
    for _ in range(127):
        got = got[0]
    assert got == "]}"


def test_a_value_nesting_255_levels_is_refused(client: Any) -> None:
    create_topic(client, "t")
    value = b"[" * 128 + b'{"a":' * 127 + b"1" + b"}" * 127 + b"]" * 128
    message = refusal(post(client, "/v1/records", send_body(value)), 400)
    assert message == "record 0 of t/0: the value nests deeper than 254 levels of arrays and objects"
    assert stored(client) == []


def test_a_value_nesting_thousands_of_levels_is_refused(client: Any) -> None:
    create_topic(client, "t")
    message = refusal(post(client, "/v1/records", send_body(b"[" * 5000 + b"]" * 5000)), 400)
    assert "nests deeper than 254 levels" in message
    assert stored(client) == []


@pytest.mark.parametrize("number", [b"1e400", b"-1e+400", b"1" + b"0" * 400, b"[1.5e309]",
                                    # fewer than 309 digits in a row and a 2-digit exponent
                                    b"1" + b"0" * 300 + b"e10", b"-" + b"9" * 250 + b".5e+60"])
def test_a_number_that_overflows_a_float_is_refused(client: Any, number: bytes) -> None:
    create_topic(client, "t")
    message = refusal(post(client, "/v1/records", send_body(number)), 400)
    assert "number is infinity" in message, message
    assert stored(client) == []


# --- values are stored as sent ----------------------------------------------------------------


def test_a_value_is_fetched_as_the_text_sent(client: Any) -> None:
    create_topic(client, "t")
    assert post(client, "/v1/records", send_body(b'[1, 2.50 ,{"a" :1}, "caf\\u00e9"]')).status_code == 200
    page = client.get("/v1/topics/t/partitions/0/records")
    # The fetch splices the stored text into its response unparsed.
    assert b'"value":[1, 2.50 ,{"a" :1}, "caf\\u00e9"]' in page.content


@pytest.mark.parametrize("number", [b"18446744073709551616", b"-9223372036854775809", b"1e308",
                                    b"1e-400", b"1" + b"0" * 300, b"1" + b"0" * 209 + b"e98"])
def test_numbers_a_float_holds_or_any_integer_are_stored_exactly(client: Any, number: bytes) -> None:
    create_topic(client, "t")
    assert post(client, "/v1/records", send_body(number)).status_code == 200
    page = client.get("/v1/topics/t/partitions/0/records")
    assert b'"value":' + number + b"," in page.content


def test_text_that_looks_like_a_long_exponent_is_stored(client: Any) -> None:
    create_topic(client, "t")
    key = b'"3f2e1234-e123-4bcd-9e00-e123456789ab"'
    assert post(client, "/v1/records", send_body(b'"1e400"', key=key)).status_code == 200
    assert stored(client) == [(0, "1e400")]


def test_a_record_without_a_value_stores_null(client: Any) -> None:
    create_topic(client, "t")
    body = b'{"batches":[{"topic":"t","partition":0,"records":[{"key":"k"}]}]}'
    assert post(client, "/v1/records", body).status_code == 200
    assert stored(client) == [(0, None)]


# --- schema: 422 naming the field -------------------------------------------------------------


def test_a_body_of_the_wrong_shape_is_refused_with_422_naming_the_field(client: Any) -> None:
    body = b'{"batches":[{"topic":"t","partition":"zero","records":[{"value":1}]}]}'
    r = post(client, "/v1/records", body)
    assert refusal(r, 422) == "invalid request: body.batches.0.partition: Expected `int`, got `str`"
    assert r.json()["details"] == {
        "errors": [{"field": "body.batches.0.partition", "problem": "Expected `int`, got `str`"}]
    }


@pytest.mark.parametrize("where", [b'{"key": "a\\u0000b"}', b'{"headers": {"h": "a\\u0000b"}}',
                                   b'{"headers": {"a\\u0000b": "h"}}'])
def test_nul_in_a_key_or_header_is_refused_naming_the_field(client: Any, where: bytes) -> None:
    create_topic(client, "t")
    body = b'{"batches":[{"topic":"t","partition":0,"records":[{"value":1},' + where + b"]}]}"
    message = refusal(post(client, "/v1/records", body), 422)
    assert message.startswith("invalid request: body.batches.0.records.1."), message
    assert message.endswith("must not contain NUL (U+0000)"), message
    assert stored(client) == []


def test_nul_in_a_value_is_stored(client: Any) -> None:
    create_topic(client, "t")
    assert post(client, "/v1/records", send_body(b'"a\\u0000b"')).status_code == 200
    assert stored(client) == [(0, "a\x00b")]


# --- duplicate keys: the last one wins, on every endpoint -------------------------------------


def test_a_repeated_field_takes_its_last_value(client: Any) -> None:
    r = post(client, "/v1/topics", b'{"name": "first", "partitions": 1, "name": "second", "partitions": 3}')
    assert r.status_code == 201, r.text
    assert (r.json()["name"], r.json()["partition_count"]) == ("second", 3)
    body = b'{"batches":[{"topic":"second","partition":2,"records":[{"value":1,"value":2}]}]}'
    assert post(client, "/v1/records", body).status_code == 200
    assert stored(client, "second") == []
    page = client.get("/v1/topics/second/partitions/2/records").json()
    assert [r["value"] for r in page["records"]] == [2]


def test_a_value_with_a_repeated_key_is_stored_as_sent(client: Any) -> None:
    create_topic(client, "t")
    assert post(client, "/v1/records", send_body(b'{"a": 1, "a": 2}')).status_code == 200
    page = client.get("/v1/topics/t/partitions/0/records")
    assert b'"value":{"a": 1, "a": 2}' in page.content


def test_a_number_no_integer_holds_is_a_schema_mismatch_not_a_syntax_error(client: Any) -> None:
    message = refusal(post(client, "/v1/topics", b'{"name": "u", "partitions": 1e400}'), 422)
    assert "body.partitions" in message, message


@pytest.mark.parametrize("path", ["/v1/topics", "/v1/records"])
def test_a_body_nested_past_the_parsers_reach_is_refused_as_too_deep(client: Any, path: str) -> None:
    deep = b'{"config": ' * 1100 + b"1" + b"}" * 1100
    assert refusal(post(client, path, deep), 400) == (
        "the body nests deeper than 254 levels of arrays and objects")


def test_an_oversized_send_is_refused_before_any_record_is_built(client: Any, monkeypatch: Any) -> None:
    from app.api import send_body

    create_topic(client, "t")
    monkeypatch.setattr(send_body, "to_domain", lambda *a: pytest.fail("records were built"))
    limit = client.app.state.services.settings.max_records_per_request
    body = b'{"batches":[{"topic":"t","partition":0,"records":[' + b",".join([b"{}"] * (limit + 1)) + b"]}]}"
    assert "(OUTBOX_MAX_RECORDS_PER_REQUEST)" in refusal(post(client, "/v1/records", body), 413, "RECORD_LIST_TOO_LARGE")


def test_a_new_api_key_takes_no_fields_and_one_named_is_refused_creating_no_key(client: Any) -> None:
    refused = post(client, "/v1/principals/User:x/api-keys", b'{"x": 1}')
    listed = client.get("/v1/principals").json()["principals"]
    taken = [post(client, "/v1/principals/User:x/api-keys", body).status_code for body in (b"", b"{}")]

    assert (refused.status_code, refused.json()["error_code"]) == (422, "INVALID_REQUEST")
    assert refused.json()["details"]["errors"] == [{"field": "body", "problem": "Object contains unknown field `x`"}]
    assert listed == []
    assert taken == [201, 201]


def test_delete_acls_with_its_filter_in_a_body_is_told_the_filter_is_the_query_strings(client: Any) -> None:
    assert post(client, "/v1/acls", b'{"acls": [{"principal": "User:x", "resource_type": "topic", '
                b'"resource_name": "t", "operation": "read", "permission": "allow"}]}').status_code == 200

    r = client.request("DELETE", "/v1/acls", content=b'{"principal": "User:x"}', headers=JSON)

    assert (r.status_code, r.json()["error_code"]) == (400, "INVALID_REQUEST")
    assert r.json()["message"].startswith("DELETE /v1/acls takes no body: give its filter as query parameters")
    assert len(client.get("/v1/acls").json()["acls"]) == 1
