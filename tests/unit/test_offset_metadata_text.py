"""How a committed offset's metadata is stored (app.storage.tables.OffsetMetadataText): a
backslash as two, a NUL as a backslash and '0', on both databases; read back as committed."""

from __future__ import annotations

import pytest

from app.storage.tables import OffsetMetadataText

_TYPE = OffsetMetadataText()


def _stored(metadata: str | None) -> str | None:
    return _TYPE.process_bind_param(metadata, None)


def _read(stored: str | None) -> str | None:
    return _TYPE.process_result_value(stored, None)


@pytest.mark.parametrize(("metadata", "stored"), [
    (None, None),
    ("plain", "plain"),
    ("Hello world!\x00", "Hello world!\\0"),
    ("back\\slash", "back\\\\slash"),
    ("\\0", "\\\\0"),
    ("\x00\\\x00\\\\", "\\0\\\\\\0\\\\\\\\"),
])
def test_metadata_is_stored_with_backslashes_doubled_and_nul_as_backslash_0(metadata: str | None,
                                                                            stored: str | None) -> None:
    assert (_stored(metadata), _read(stored)) == (stored, metadata)


def test_a_backslash_the_escaping_never_writes_before_another_character_reads_as_itself() -> None:
    assert _read("a\\b\\") == "a\\b\\"
