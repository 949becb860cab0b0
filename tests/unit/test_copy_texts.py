"""app.storage.dialect.copy_texts: texts as fields of PostgreSQL's COPY text format, all at
once, or None for the caller to write them through the driver's own adaptation."""

from __future__ import annotations

from app.storage.dialect import copy_texts


def test_copy_escapes_each_text_and_writes_null_as_backslash_n() -> None:
    assert copy_texts(["a\tb", None, "c\\d\ne\rf", "", "\\N", "é"]) == [
        "a\\tb", "\\N", "c\\\\d\\ne\\rf", "", "\\\\N", "é"]


def test_texts_needing_no_escape_are_their_own_fields_in_their_places() -> None:
    assert copy_texts(["k1", None, '{"a": [1, "é"]}', ""]) == ["k1", "\\N", '{"a": [1, "é"]}', ""]


def test_only_nulls_are_all_backslash_n() -> None:
    assert copy_texts([None, None]) == ["\\N", "\\N"]


def test_no_texts_are_no_fields() -> None:
    assert copy_texts([]) == []


def test_a_text_holding_nul_is_left_to_the_driver() -> None:
    assert copy_texts(["a", "b\x00c"]) is None


def test_bytes_are_left_to_the_driver() -> None:
    assert copy_texts(["a", b"b"]) is None  # type: ignore[list-item]
