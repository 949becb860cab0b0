"""The host names and "host:port" addresses the settings (and the commands' options) take."""

from __future__ import annotations


def host_name(host: str) -> str:
    """`host` (a name or an address); ValueError if no resolver could be asked for it. The
    socket functions encode a name with the idna codec, which refuses an empty label (`a..b`)
    or one over 63 characters with a UnicodeError: checked here, it is the setting's mistake,
    named, and not an unexpected error of the socket's."""
    try:
        host.encode("idna")
    except UnicodeError as e:
        # The codec's reason: its own (a UnicodeEncodeError's), or that of the error it wraps.
        reason = getattr(e, "reason", None) or e.__cause__ or e
        raise ValueError(f"{host!r} is not a valid host name ({reason})") from None
    return host


# The hosts that bind a listener to every interface: no client can connect to one of them.
EVERY_ADDRESS = frozenset({"0.0.0.0", "::", ""})


def kafka_address(listener: str) -> tuple[str, int]:
    """"host:port" (an IPv6 host in brackets) as (host, port); ValueError if it is not one."""
    host, sep, port = listener.strip().rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"must be host:port, e.g. 127.0.0.1:9092, not {listener!r}")
    return host_name(host), int(port)
