"""API keys: their shape, and the salted scrypt hash that is all the database keeps."""

from __future__ import annotations

from app.services.security import hash_secret, new_api_key, secret_matches, split_api_key


def test_a_new_key_names_its_id_and_carries_256_random_bits() -> None:
    key_id, secret, key = new_api_key()
    assert key == f"outbox_{key_id}_{secret}"
    assert split_api_key(key) == (key_id, secret)
    assert len(key_id) == 16 and len(secret) == 43  # 32 bytes, base64url without padding
    assert new_api_key()[2] != key


def test_only_the_keys_shape_is_split() -> None:
    for not_a_key in ("", "outbox_", "outbox_0123456789abcdef", "outbox_0123456789abcdef_", "Bearer x",
                      "outbox_0123456789abcde_secret", "eyJhbGciOi.payload.signature"):
        assert split_api_key(not_a_key) is None, not_a_key


def test_the_hash_matches_its_secret_only() -> None:
    stored = hash_secret("s3cret")
    assert secret_matches("s3cret", stored)
    assert not secret_matches("s3cret!", stored)
    assert not secret_matches("", stored)


def test_each_hash_has_its_own_salt_and_holds_no_secret() -> None:
    first, second = hash_secret("s3cret"), hash_secret("s3cret")
    assert first != second
    assert "s3cret" not in first
    assert first.startswith("scrypt$16384$8$1$")


def test_a_stored_hash_of_another_scheme_or_garbage_matches_nothing() -> None:
    for stored in ("", "plain$x", "scrypt$1$8$1$!!$!!", "bcrypt$2b$12$abc"):
        assert not secret_matches("s3cret", stored)
