"""The security settings act or are refused: each method's own settings are required with it
and refused without it (README, Configuration)."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from app.settings import Settings

JWT = {"jwt_public_key_file": "/keys/idp.pem", "jwt_issuer": "https://idp", "jwt_audience": "outbox"}


def settings(**values: object) -> Settings:
    return Settings(database_url="sqlite:///x.db", **values)  # type: ignore[arg-type]


@pytest.mark.parametrize(("value", "methods"), [
    (None, ()), ("", ()), ("none", ()), ("api_key", ("api_key",)),
    ("mtls, API_KEY", ("api_key", "mtls")), ("jwt,api_key", ("api_key", "jwt")),
])
def test_authentication_names_the_methods_on(value: str | None, methods: tuple[str, ...]) -> None:
    extra = {"tls_cert_file": "c.pem", "tls_client_ca_file": "ca.pem"} if "mtls" in methods else {}
    extra.update(JWT if "jwt" in methods else {})
    assert settings(authentication=value, **extra).authentication_methods == methods


@pytest.mark.parametrize("value", ["password", "none,api_key", "api_key,ldap", ","])
def test_an_unknown_authentication_method_is_refused(value: str) -> None:
    with pytest.raises(ValidationError, match="api_key, jwt, mtls"):
        settings(authentication=value)


@pytest.mark.parametrize(("values", "problem"), [
    ({"authentication": "jwt", "jwt_issuer": "i", "jwt_audience": "a"}, "exactly one of OUTBOX_JWT_JWKS_URL"),
    ({"authentication": "jwt", **JWT, "jwt_jwks_url": "https://idp/jwks"}, "exactly one of OUTBOX_JWT_JWKS_URL"),
    ({"authentication": "jwt", "jwt_public_key_file": "k.pem", "jwt_audience": "a"}, "OUTBOX_JWT_ISSUER"),
    ({"authentication": "jwt", **JWT, "jwt_algorithms": "HS256"}, "public-key algorithms"),
    ({"authentication": "api_key", "jwt_issuer": "https://idp"}, "jwt is not in OUTBOX_AUTHENTICATION"),
    ({"authentication": "api_key", "jwt_leeway_s": 120}, "OUTBOX_JWT_LEEWAY_S set, but jwt is not in"),
    ({"authentication": "api_key", "jwt_principal_claim": "email"}, "OUTBOX_JWT_PRINCIPAL_CLAIM set, but jwt is not in"),
    ({"jwt_algorithms": "PS256"}, "OUTBOX_JWT_ALGORITHMS set, but jwt is not in"),
    ({"authentication": "mtls", "tls_cert_file": "c.pem"}, "OUTBOX_TLS_CLIENT_CA_FILE"),
    ({"authentication": "api_key", "tls_client_ca_file": "ca.pem", "tls_cert_file": "c.pem"}, "mtls is not in"),
    ({"tls_key_file": "k.pem"}, "without OUTBOX_TLS_CERT_FILE"),
    ({"super_users": "User:admin"}, "names no method"),
    ({"authentication": "none", "protect_metrics": True}, "names no method"),
    ({"protect_metrics": True}, "names no method"),
    ({"protect_docs": True}, "names no method"),
    ({"security_refresh_interval_ms": 500}, "OUTBOX_SECURITY_REFRESH_INTERVAL_MS set, but"),
    ({"authentication": "none", "security_refresh_interval_ms": 1_000}, "none is refreshed"),
    ({"authentication": "api_key", "super_users": "admin"}, "User:<name>"),
    ({"authentication": "api_key", "super_users": "User:*"}, "User:<name>"),
])
def test_a_setting_that_would_not_act_is_refused(values: dict, problem: str) -> None:
    with pytest.raises(ValidationError, match=problem):
        settings(**values)


@pytest.mark.parametrize(("authentication", "protect_metrics", "protected"), [
    (None, None, False), ("none", None, False), (None, False, False),
    ("api_key", None, True), ("api_key", True, True), ("api_key", False, False),
])
def test_metrics_are_protected_with_authentication_on_unless_protect_metrics_is_false(
        authentication: str | None, protect_metrics: bool | None, protected: bool) -> None:
    values = {} if protect_metrics is None else {"protect_metrics": protect_metrics}
    assert settings(authentication=authentication, **values).metrics_protected is protected


def test_super_users_are_separated_by_semicolons() -> None:
    s = settings(authentication="api_key", super_users=" User:admin ; User:ops;")
    assert s.super_user_list == frozenset({"User:admin", "User:ops"})


def test_a_jwt_public_key_file_that_cannot_be_read_stops_the_start(tmp_path: Path) -> None:
    from app.domain.clock import system_clock
    from app.services.security import JwtVerifier

    bad = tmp_path / "not-a-key.pem"
    bad.write_text("hello")
    with pytest.raises(ValueError, match="cannot read a PEM public key"):
        JwtVerifier(settings(authentication="jwt", **{**JWT, "jwt_public_key_file": str(bad)}), system_clock)
