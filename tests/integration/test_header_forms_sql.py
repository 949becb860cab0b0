"""benchmarks/header_forms.py's delimited_sql and arrays_sql (PostgreSQL only, benchmarks only:
what a view would make of the stored headers): the delimited text PostgreSQL makes of each
header object, read back by the form's rules (split the entries at U+0001, a name from its value
at the first U+0002, each U+0003 pair unescaped in one pass), is the object, its entries in the
object's order; the arrays are its names and its values in that order. Over objects holding the
very characters the form delimits and escapes with (header_forms.EDGE_CASES)."""

from __future__ import annotations

import json
import re

from sqlalchemy import text

from benchmarks.header_forms import EDGE_CASES, arrays_sql, delimited_sql

ESCAPED = {"a": "\x01", "b": "\x02", "c": "\x03"}


def _read_back(delimited: str | None) -> list[tuple[str, str]] | None:
    if delimited is None:
        return None
    if delimited == "":
        return []
    entries = []
    for entry in delimited.split("\x01"):
        name, value = entry.split("\x02", 1)
        entries.append(tuple(re.sub("\x03(.)", lambda m: ESCAPED[m.group(1)], t, flags=re.S) for t in (name, value)))
    return entries


def _entries(stored: str | None) -> list[tuple[str, str]] | None:
    return None if stored is None else list(json.loads(stored).items())


def test_delimited_text_and_arrays_made_on_postgresql_are_the_header_objects(postgres_engine) -> None:  # type: ignore[no-untyped-def]
    with postgres_engine.connect() as conn:
        rows = conn.execute(text(
            f"SELECT t.h, {delimited_sql('t.h')} AS d, a.header_keys, a.header_values "
            f"FROM unnest(CAST(:cases AS text[])) WITH ORDINALITY AS t(h, n), "
            f"LATERAL ({arrays_sql('(SELECT t.h AS headers)')}) a ORDER BY t.n"), {"cases": EDGE_CASES}).all()
    assert [r.h for r in rows] == EDGE_CASES
    assert [_read_back(r.d) for r in rows] == [_entries(c) for c in EDGE_CASES]
    assert [None if r.header_keys is None else list(zip(r.header_keys, r.header_values, strict=True))
            for r in rows] == [_entries(c) for c in EDGE_CASES]
    # The cases hold each delimiter inside a name or a value: the text escapes them.
    assert sum("\x03" in r.d for r in rows if r.d is not None) >= 3
    assert [r.d for r in rows[:4]] == [None, "", "\x02", "a\x021"]
