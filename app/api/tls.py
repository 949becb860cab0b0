"""HTTPS for `outbox serve`, and the client certificate in the ASGI scope for mtls.

uvicorn verifies a client certificate against OUTBOX_TLS_CLIENT_CA_FILE during the handshake
but does not put it in the request's scope (the ASGI TLS extension). `with_client_certificate`
wraps uvicorn's HTTP protocol: once a connection's handshake is done, the verified
certificate's subject goes into every request of that connection as
scope["extensions"]["tls"]["client_cert_name"] (RFC 4514), where app.api.security reads it.
"""

from __future__ import annotations

import ssl
from typing import Any

from cryptography import x509

from app.settings import Settings


def ssl_options(settings: Settings) -> dict[str, Any]:
    """uvicorn.Config's TLS arguments, after checking that the files load (a clear error here
    rather than uvicorn's traceback). Client certificates are asked for but optional: a
    request without one (or without any other credentials) gets the service's JSON 401
    rather than a failed handshake."""
    if not settings.tls_cert_file:
        return {}
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        context.load_cert_chain(settings.tls_cert_file, settings.tls_key_file)
    except (OSError, ssl.SSLError) as e:
        raise ValueError(f"OUTBOX_TLS_CERT_FILE / OUTBOX_TLS_KEY_FILE: cannot load the certificate and key: {e}") from None
    options: dict[str, Any] = {"ssl_certfile": settings.tls_cert_file, "ssl_keyfile": settings.tls_key_file}
    if settings.tls_client_ca_file:
        try:
            context.load_verify_locations(settings.tls_client_ca_file)
        except (OSError, ssl.SSLError) as e:
            raise ValueError(f"OUTBOX_TLS_CLIENT_CA_FILE: cannot load the CA certificates: {e}") from None
        options.update(ssl_ca_certs=settings.tls_client_ca_file, ssl_cert_reqs=ssl.CERT_OPTIONAL)
    return options


def with_client_certificate(protocol_class: type) -> type:
    """A subclass of uvicorn's HTTP protocol class that adds the TLS extension to the scope."""

    class ClientCertificateProtocol(protocol_class):  # type: ignore[misc, valid-type]
        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            ssl_object = transport.get_extra_info("ssl_object")
            der = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
            if not der:
                return
            # Verified by the handshake (CERT_OPTIONAL still refuses a certificate the CA did
            # not sign); only its subject is needed.
            name = x509.load_der_x509_certificate(der).subject.rfc4514_string()
            tls = {"client_cert_name": name, "client_cert_chain": [ssl.DER_cert_to_PEM_cert(der)],
                   "client_cert_error": None}
            app = self.app

            async def app_with_tls(scope: Any, receive: Any, send: Any) -> None:
                scope["extensions"] = {**scope.get("extensions", {}), "tls": tls}
                await app(scope, receive, send)

            self.app = app_with_tls

    return ClientCertificateProtocol
