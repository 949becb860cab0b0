"""SASL SCRAM (RFC 5802, RFC 7677) as the Kafka door serves it, server side (app.domain.scram),
driven by an independent client: scramp's, or messages built by hand where the point is a
message scramp would not send."""

from __future__ import annotations

import base64

import pytest
from scramp import ScramClient, ScramMechanism

from app.domain.errors import AuthenticationFailed
from app.domain.scram import NO_MATCH, Candidate, ClientFirst, ServerExchange, credential

KEY = "outbox_0123456789abcdef_" + "s" * 43
OTHER_KEY = "outbox_fedcba9876543210_" + "t" * 43
SALT = b"0123456789abcdef"
MECHANISMS = ["SCRAM-SHA-256", "SCRAM-SHA-512"]

NONCE_REFUSED = ("the SCRAM client-final nonce is not the one the server sent (librdkafka before 2.6.1 sends "
                 "it twice: upgrade the client, or use PLAIN over TLS)")


def _exchange(mechanism: str, client_first: str, *keys: tuple[str, str], salt: bytes = SALT) -> ServerExchange:
    candidates = [Candidate(key_id, credential(mechanism, key, salt)) for key_id, key in keys]
    return ServerExchange(mechanism, ClientFirst.parse(client_first.encode()), "servernonce", salt, 4096, candidates)


def _run(mechanism: str, password: str, *keys: tuple[str, str], salt: bytes = SALT) -> tuple[ScramClient, str, bytes]:
    """The whole exchange with scramp's client: (the client, the key id, server-final)."""
    client = ScramClient([mechanism], "alice", password)
    server = _exchange(mechanism, client.get_client_first(), *keys, salt=salt)
    client.set_server_first(server.first().decode())
    key_id, server_final = server.final(client.get_client_final().encode())
    return client, key_id, server_final


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_the_stored_credential_is_rfc_5802s_stored_key_and_server_key(mechanism: str) -> None:
    salt, stored_key, server_key, iterations = ScramMechanism(mechanism).make_auth_info(KEY, 4096, SALT)
    assert credential(mechanism, KEY, SALT) == credential(mechanism, KEY, salt, iterations)
    assert (credential(mechanism, KEY, SALT).stored_key, credential(mechanism, KEY, SALT).server_key) == (
        stored_key, server_key)


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_a_client_with_the_right_key_authenticates_and_verifies_the_server(mechanism: str) -> None:
    client, key_id, server_final = _run(mechanism, KEY, ("k1", KEY))
    assert key_id == "k1"
    client.set_server_final(server_final.decode())  # raises unless the server signature is right


def test_any_live_key_of_the_principal_authenticates_under_their_shared_salt() -> None:
    _, key_id, _ = _run("SCRAM-SHA-256", OTHER_KEY, ("k1", KEY), ("k2", OTHER_KEY))
    assert key_id == "k2"


def _final_with_looking_again(password: str, found: list[tuple[str, str]],
                              asked: list[tuple[bytes, int]]) -> str:
    """The key id of scramp's client with `password` in an exchange whose one candidate is k1
    (KEY) and whose look_again records what it was asked and finds `found`."""
    def look_again(salt: bytes, iterations: int) -> list[Candidate]:
        asked.append((salt, iterations))
        return [Candidate(key_id, credential("SCRAM-SHA-256", key, salt, iterations)) for key_id, key in found]
    client = ScramClient(["SCRAM-SHA-256"], "alice", password)
    server = ServerExchange("SCRAM-SHA-256", ClientFirst.parse(client.get_client_first().encode()), "servernonce",
                            SALT, 4096, [Candidate("k1", credential("SCRAM-SHA-256", KEY, SALT))], look_again)
    client.set_server_first(server.first().decode())
    key_id, _ = server.final(client.get_client_final().encode())
    return key_id


def test_a_proof_matching_no_candidate_is_checked_again_against_the_keys_found_by_looking_again() -> None:
    asked: list[tuple[bytes, int]] = []
    key_id = _final_with_looking_again(OTHER_KEY, [("k1", KEY), ("k2", OTHER_KEY)], asked)
    assert (key_id, asked) == ("k2", [(SALT, 4096)])


def test_a_proof_that_matches_a_candidate_does_not_look_again() -> None:
    asked: list[tuple[bytes, int]] = []
    assert _final_with_looking_again(KEY, [], asked) == "k1"
    assert asked == []


def test_the_server_first_message_states_the_salt_iterations_and_extends_the_clients_nonce() -> None:
    server = _exchange("SCRAM-SHA-256", "n,,n=alice,r=clientnonce", ("k1", KEY))
    assert server.first() == b"r=clientnonceservernonce,s=" + base64.b64encode(SALT) + b",i=4096"


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_a_wrong_key_is_refused(mechanism: str) -> None:
    with pytest.raises(AuthenticationFailed) as e:
        _run(mechanism, OTHER_KEY, ("k1", KEY))
    assert e.value.message == NO_MATCH


def test_a_user_without_scram_credentials_is_refused_at_the_proof_as_a_wrong_key_is() -> None:
    with pytest.raises(AuthenticationFailed) as e:
        _run("SCRAM-SHA-256", KEY)
    assert e.value.message == NO_MATCH
    assert "create a new key" in NO_MATCH


def test_a_credential_of_the_other_mechanism_does_not_authenticate() -> None:
    client = ScramClient(["SCRAM-SHA-512"], "alice", KEY)
    server = ServerExchange("SCRAM-SHA-512", ClientFirst.parse(client.get_client_first().encode()), "servernonce",
                            SALT, 4096, [Candidate("k1", credential("SCRAM-SHA-256", KEY, SALT))])
    client.set_server_first(server.first().decode())
    with pytest.raises(AuthenticationFailed) as e:
        server.final(client.get_client_final().encode())
    assert e.value.message == NO_MATCH


def _final_by_hand(server: ServerExchange, nonce: str, binding: str = "biws") -> bytes:
    return f"c={binding},r={nonce},p={base64.b64encode(b'x' * 32).decode()}".encode()


def test_a_client_final_with_another_nonce_is_refused() -> None:
    server = _exchange("SCRAM-SHA-256", "n,,n=alice,r=clientnonce", ("k1", KEY))
    with pytest.raises(AuthenticationFailed) as e:
        server.final(_final_by_hand(server, "clientnonceservernoncf"))
    assert e.value.message == NONCE_REFUSED


def test_a_tampered_nonce_in_a_real_exchange_is_refused() -> None:
    client = ScramClient(["SCRAM-SHA-256"], "alice", KEY)
    server = _exchange("SCRAM-SHA-256", client.get_client_first(), ("k1", KEY))
    client.set_server_first(server.first().decode())
    final = client.get_client_final()
    tampered = final.replace("servernonce", "servernoncX")
    assert tampered != final
    with pytest.raises(AuthenticationFailed) as e:
        server.final(tampered.encode())
    assert e.value.message == NONCE_REFUSED


def test_a_channel_binding_other_than_the_gs2_header_is_refused() -> None:
    server = _exchange("SCRAM-SHA-256", "n,,n=alice,r=clientnonce", ("k1", KEY))
    with pytest.raises(AuthenticationFailed) as e:
        server.final(_final_by_hand(server, "clientnonceservernonce", binding="eSws"))  # "y,,"
    assert e.value.message == "the SCRAM channel binding differs from the client-first message's gs2 header"


@pytest.mark.parametrize("message, why", [
    (b"", "malformed SCRAM client-first message: no gs2 header (n,,)"),
    (b"\xff\xfe", "malformed SCRAM client-first message: not UTF-8"),
    (b"n=alice,r=abc", "malformed SCRAM client-first message: no gs2 header (n,,)"),
    (b"x,,n=alice,r=abc", "malformed SCRAM client-first message: the gs2 header is not n,, or n,a=<user>,"),
    (b"n,,r=abc,n=alice", "malformed SCRAM client-first message: it must be n=<user>,r=<nonce>[,extensions]"),
    (b"n,,n=alice", "malformed SCRAM client-first message: it must be n=<user>,r=<nonce>[,extensions]"),
    (b"n,,n=,r=abc", "malformed SCRAM client-first message: the user name is empty"),
    (b"n,,n=al=ice,r=abc", "malformed SCRAM client-first message: '=' in the user name must be =2C or =3D"),
    (b"n,,n===2C3D,r=abc", "malformed SCRAM client-first message: '=' in the user name must be =2C or =3D"),
    (b"n,,n==3=2CD,r=abc", "malformed SCRAM client-first message: '=' in the user name must be =2C or =3D"),
    (b"n,,n=alice,r=", "malformed SCRAM message: the nonce must be printable ASCII without ','"),
    (b"n,,n=alice,r=a b", "malformed SCRAM message: the nonce must be printable ASCII without ','"),
    (b"p=tls-unique,,n=alice,r=abc", "SCRAM with channel binding (-PLUS) is not served: send the gs2 header n,,"),
    (b"n,a=bob,n=alice,r=abc", "the SCRAM authorization identity differs from the user name"),
    (b"n,,n=alice,r=abc,tokenauth=true", "delegation tokens (tokenauth) are not served: authenticate with an API key"),
])
def test_a_client_first_message_that_cannot_be_served_is_refused_saying_why(message: bytes, why: str) -> None:
    with pytest.raises(AuthenticationFailed) as e:
        ClientFirst.parse(message)
    assert e.value.message == why


def test_the_user_name_is_unescaped_and_unknown_extensions_are_ignored() -> None:
    first = ClientFirst.parse(b"n,a=User:a=2Cb=3Dc,n=User:a=2Cb=3Dc,r=abc,x=1,tokenauth=false")
    assert (first.gs2_header, first.user, first.nonce, first.bare) == (
        "n,a=User:a=2Cb=3Dc,", "User:a,b=c", "abc", "n=User:a=2Cb=3Dc,r=abc,x=1,tokenauth=false")


FINAL_SHAPE = "malformed SCRAM client-final message: it must be c=<binding>,r=<nonce>,...,p=<proof>"


@pytest.mark.parametrize("message, why", [
    (b"r=clientnonceservernonce,p=eA==", FINAL_SHAPE),
    (b"c=biws,r=clientnonceservernonce", FINAL_SHAPE),
    (b"c=biws,r=clientnonceservernonce,p=!!!", "malformed SCRAM client-final message: the proof is not base64"),
    (b"c=biws,r=clientnonceservernonce,p=\xff", "malformed SCRAM client-final message: not ASCII"),
    (b"c=biws,r=clientnonceservernonce,p=eA==", NO_MATCH),  # a proof of the wrong length
])
def test_a_client_final_message_that_cannot_be_served_is_refused_saying_why(message: bytes, why: str) -> None:
    server = _exchange("SCRAM-SHA-256", "n,,n=alice,r=clientnonce", ("k1", KEY))
    with pytest.raises(AuthenticationFailed) as e:
        server.final(message)
    assert e.value.message == why
