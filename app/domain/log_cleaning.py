"""What the log cleaner may delete: pure rules, no I/O (app.services.log_cleaner runs them).

Sizes. A partition's size, which `retention_bytes` limits, is the UTF-8 bytes of its data
records' keys, values and headers as stored (`record_size`); control markers have none.
"""

from __future__ import annotations


def record_size(key: str | None, value: str | None, headers: str | None) -> int:
    """The bytes a record counts for: its key, value (JSON text) and headers (JSON text)."""
    return sum(0 if text is None else len(text.encode()) for text in (key, value, headers))
