"""SASL SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677) as Kafka serves them: the
credentials a server keeps, and the server's side of the exchange, without channel binding.

What is kept of a password is RFC 5802's: a salt, an iteration count, StoredKey = H(ClientKey)
and ServerKey, never the salted password, so a copy of them does not let anyone authenticate.
Here the password is an API key, 256 random bits of secret: PBKDF2 at 4,096 iterations (Kafka's
minimum for SCRAM) is far cheaper to run than the scrypt the key's other hash uses, but no
offline guess of a 256-bit secret is within reach at any cost, so the cheaper function gives
nothing away.

The server's side is written here rather than taken from a SCRAM library (scramp, which the
tests use as the client): a principal may have several live API keys, which share one salt
(app.storage.security.add_api_key), and the client's proof is checked against each of their
StoredKeys, where a library's server holds one; and Kafka's clients may send the extension
`tokenauth=true` (delegation tokens), which RFC 5802's grammar for extensions does not allow
and a strict parser refuses as malformed, where Kafka answers it.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from app.domain.errors import AuthenticationFailed

# Kafka's names, and the hash function of each.
HASHES: dict[str, str] = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
# Kafka's minimum: its clients refuse fewer.
ITERATIONS = 4096
SALT_BYTES = 16
# What the client must send back in c= without channel binding: base64 of its gs2 header.
_GS2_WITHOUT_BINDING = ("n", "y")


@dataclass(frozen=True, slots=True)
class ScramCredential:
    """What the server keeps of one password for one mechanism."""

    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes


def _hmac(algorithm: str, key: bytes, message: bytes) -> bytes:
    return hmac.new(key, message, algorithm).digest()


def credential(mechanism: str, password: str, salt: bytes, iterations: int = ITERATIONS) -> ScramCredential:
    """RFC 5802's StoredKey and ServerKey of `password`. SASLprep leaves an API key as it is
    (ASCII letters, digits, `_` and `-`), so it is not applied."""
    algorithm = HASHES[mechanism]
    salted = hashlib.pbkdf2_hmac(algorithm, password.encode(), salt, iterations)
    client_key = _hmac(algorithm, salted, b"Client Key")
    return ScramCredential(salt, iterations, hashlib.new(algorithm, client_key).digest(),
                           _hmac(algorithm, salted, b"Server Key"))


_SASLNAME = re.compile(r"(?:[^=,]|=2C|=3D)*")
_ESCAPED = {"=2C": ",", "=3D": "="}


def _saslname(text: str) -> str:
    """RFC 5802's saslname: `=2C` is a comma, `=3D` an equals sign, and no other `=`. Checked
    and decoded in one pass each: removing one escape after the other would let `==2C3D`
    through as `=3D` (an `=` the name may not hold)."""
    if _SASLNAME.fullmatch(text) is None:
        raise AuthenticationFailed("malformed SCRAM client-first message: '=' in the user name must be =2C or =3D")
    return re.sub("=2C|=3D", lambda m: _ESCAPED[m.group()], text)


def _nonce(text: str) -> str:
    if not text or any(not 0x21 <= ord(c) <= 0x7E or c == "," for c in text):
        raise AuthenticationFailed("malformed SCRAM message: the nonce must be printable ASCII without ','")
    return text


@dataclass(frozen=True, slots=True)
class ClientFirst:
    gs2_header: str
    user: str
    nonce: str
    bare: str  # client-first-message-bare, part of the AuthMessage

    @classmethod
    def parse(cls, data: bytes) -> ClientFirst:
        """`n,[a=authzid],n=user,r=nonce[,extension...]`. An authorization identity other than
        the user, channel binding (`p=`) and a delegation token (`tokenauth=true`) are refused,
        as Kafka refuses them where it serves no delegation tokens; other extensions are
        ignored, as Kafka ignores those it does not know."""
        try:
            text = bytes(data).decode("utf-8")
        except UnicodeDecodeError:
            raise AuthenticationFailed("malformed SCRAM client-first message: not UTF-8") from None
        parts = text.split(",", 2)
        if len(parts) != 3:
            raise AuthenticationFailed("malformed SCRAM client-first message: no gs2 header (n,,)")
        flag, authzid, bare = parts
        if flag.startswith("p="):
            raise AuthenticationFailed("SCRAM with channel binding (-PLUS) is not served: send the gs2 header n,,")
        if flag not in _GS2_WITHOUT_BINDING or (authzid and not authzid.startswith("a=")):
            raise AuthenticationFailed("malformed SCRAM client-first message: the gs2 header is not n,, or n,a=<user>,")
        attributes = bare.split(",")
        if len(attributes) < 2 or not attributes[0].startswith("n=") or not attributes[1].startswith("r="):
            raise AuthenticationFailed(
                "malformed SCRAM client-first message: it must be n=<user>,r=<nonce>[,extensions]")
        user = _saslname(attributes[0][2:])
        if not user:
            raise AuthenticationFailed("malformed SCRAM client-first message: the user name is empty")
        if authzid and _saslname(authzid[2:]) != user:
            raise AuthenticationFailed("the SCRAM authorization identity differs from the user name")
        if "tokenauth=true" in attributes[2:]:
            raise AuthenticationFailed("delegation tokens (tokenauth) are not served: authenticate with an API key")
        return cls(f"{flag},{authzid},", user, _nonce(attributes[1][2:]), bare)


@dataclass(frozen=True, slots=True)
class Candidate:
    """One of the user's live keys: its id and its credential for the mechanism."""

    key_id: str
    credential: ScramCredential


class ServerExchange:
    """One exchange, server side: client-first in, server-first out (first()); client-final
    in, server-final out and the key that proved itself (final()). Every candidate shares one
    salt and iteration count, which server-first states; with no candidate the caller passes
    a salt of its own (a user without SCRAM credentials), so that the exchange runs to its end
    and fails as a wrong password does, telling nothing of the user."""

    def __init__(self, mechanism: str, client_first: ClientFirst, server_nonce: str, salt: bytes, iterations: int,
                 candidates: Sequence[Candidate],
                 look_again: Callable[[bytes, int], Sequence[Candidate]] | None = None) -> None:
        self._check_shared(candidates, salt, iterations)
        self.algorithm = HASHES[mechanism]
        self.client_first = client_first
        self.nonce = client_first.nonce + server_nonce
        self.candidates = tuple(candidates)
        self.salt, self.iterations = salt, iterations
        # Asked once, when the proof matches no candidate: the candidates under this salt and
        # iteration count as they stand now (a key created since server-first). The proof is
        # then checked again against the same AuthMessage, which nothing in it changed.
        self.look_again = look_again
        self.server_first = f"r={self.nonce},s={base64.b64encode(salt).decode()},i={iterations}"

    def first(self) -> bytes:
        return self.server_first.encode()

    def final(self, data: bytes) -> tuple[str, bytes]:
        """(the key id whose credential the proof matches, server-final); AuthenticationFailed if none."""
        try:
            text = bytes(data).decode("ascii")
        except UnicodeDecodeError:
            raise AuthenticationFailed("malformed SCRAM client-final message: not ASCII") from None
        attributes = text.split(",")
        if (len(attributes) < 3 or not attributes[0].startswith("c=") or not attributes[1].startswith("r=")
                or not attributes[-1].startswith("p=")):
            raise AuthenticationFailed(
                "malformed SCRAM client-final message: it must be c=<binding>,r=<nonce>,...,p=<proof>")
        if attributes[0][2:] != base64.b64encode(self.client_first.gs2_header.encode()).decode():
            raise AuthenticationFailed("the SCRAM channel binding differs from the client-first message's gs2 header")
        if not hmac.compare_digest(attributes[1][2:].encode(), self.nonce.encode()):
            # The likeliest sender of another nonce is a librdkafka before 2.6.1, which repeats it.
            raise AuthenticationFailed("the SCRAM client-final nonce is not the one the server sent (librdkafka "
                                       "before 2.6.1 sends it twice: upgrade the client, or use PLAIN over TLS)")
        try:
            proof = base64.b64decode(attributes[-1][2:], validate=True)
        except (binascii.Error, ValueError):
            raise AuthenticationFailed("malformed SCRAM client-final message: the proof is not base64") from None
        without_proof = text[:text.rindex(",p=")]
        auth_message = f"{self.client_first.bare},{self.server_first},{without_proof}".encode()
        matched = self._matching(self.candidates, proof, auth_message)
        if matched is None and self.look_again is not None:
            again = self.look_again(self.salt, self.iterations)
            self._check_shared(again, self.salt, self.iterations)
            matched = self._matching(again, proof, auth_message)
        if matched is None:
            raise AuthenticationFailed(NO_MATCH)
        return matched

    @staticmethod
    def _check_shared(candidates: Sequence[Candidate], salt: bytes, iterations: int) -> None:
        if any((c.credential.salt, c.credential.iterations) != (salt, iterations) for c in candidates):
            raise ValueError("the candidates of one exchange share its salt and iteration count")

    def _matching(self, candidates: Sequence[Candidate], proof: bytes, auth_message: bytes) -> tuple[str, bytes] | None:
        """(key id, server-final) of the candidate whose StoredKey the proof matches, or None."""
        for c in candidates:
            signature = _hmac(self.algorithm, c.credential.stored_key, auth_message)
            if len(proof) != len(signature):
                return None
            client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
            if hmac.compare_digest(hashlib.new(self.algorithm, client_key).digest(), c.credential.stored_key):
                server_signature = _hmac(self.algorithm, c.credential.server_key, auth_message)
                return c.key_id, b"v=" + base64.b64encode(server_signature)
        return None


# One answer for a wrong password, an unknown user and a key without SCRAM credentials alike:
# naming the fix for the last without telling an outsider which of the three it was.
NO_MATCH = ("the password is not a live API key of this user with SCRAM credentials (keys created before "
            "SCRAM was served have none: create a new key for the principal, or use SASL/PLAIN)")
