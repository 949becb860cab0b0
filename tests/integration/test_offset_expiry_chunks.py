"""The offset expiry's transactions (GroupExpiry.expire_offsets) each delete the range of keys
from their chunk's first to its last (groups.delete_expired_offsets): the look must give the
keys in key order whatever order they were committed in. On both databases; time is the
test's clock."""

from __future__ import annotations

import pytest

from app.services.group_expiry import OffsetExpiry
from tests.helpers import create_topic

RETENTION_MS = 10_080 * 60_000  # OUTBOX_OFFSETS_RETENTION_MINUTES=10080 (settings)


@pytest.fixture
def settings(settings):  # type: ignore[no-untyped-def]
    """OUTBOX_OFFSETS_RETENTION_MINUTES set (unset, the default, nothing expires)."""
    return settings.model_copy(update={"offsets_retention_minutes": 10_080})


def test_offsets_committed_in_reverse_key_order_all_expire(client, services, clock, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    # Read in commit order, the first chunk would be c, b: the range from c to b holds no key,
    # and c and b would outlive the pass.
    from app.services import group_expiry
    monkeypatch.setattr(group_expiry, "EXPIRY_CHUNK_OFFSETS", 2)
    create_topic(client, "in", 1)
    for group_id in ["c", "b", "a"]:
        r = client.post(f"/v1/groups/{group_id}/offsets",
                        json={"offsets": [{"topic": "in", "partition": 0, "offset": 1}]})
        assert r.status_code == 200, r.text
    clock.advance(RETENTION_MS)

    assert services.group_expiry.expire_offsets(clock()) == OffsetExpiry(3, False)
    assert client.get("/v1/groups").json() == {"groups": [], "next_after": None}
