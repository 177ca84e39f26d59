"""SCRAM-SHA-256 credentials (RFC 5802/7677, Kafka's ScramCredential), pure.

Theory of operation: a user's password is never stored. ``new_credential`` derives, from the
password and a random salt, ``SaltedPassword = PBKDF2-HMAC-SHA256(password, salt, iterations)``,
``StoredKey = SHA256(HMAC(SaltedPassword, "Client Key"))`` and
``ServerKey = HMAC(SaltedPassword, "Server Key")``; those three plus the iteration count are what
ZooKeeper holds (``/config/users/<user>``, Kafka's text format). ``verify`` re-derives StoredKey from
a presented password. Clients present the password once per connection over the listener's TLS
(SASL_SSL); PBKDF2 is deliberately slow, so ``CredentialCache`` remembers, per user, the digests of
passwords already checked against the current credential - a changed credential forgets them.

The Kafka wire-protocol listener speaks SCRAM itself (SaslAuthenticate, RFC 5802/7677): there the
password never crosses the wire. ``ScramServer`` is the server side of that exchange as a pure
state machine over the same stored credential - client-first -> server-first (nonce, salt,
iterations) -> client-final (proof) -> server-final (signature) - bounded in message size and in
rounds, failing with ``ScramError`` (SASL_AUTHENTICATION_FAILED). An unknown user is answered with
a salt derived from a per-server secret, so that it fails exactly where a wrong password does and
the exchange does not reveal which users exist (RFC 5802 section 5.1).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import re
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from proto.errors import SaslAuthenticationFailedError

MECHANISM: Final = "SCRAM-SHA-256"
MIN_ITERATIONS: Final = 4096
MAX_ITERATIONS: Final = 16384


@dataclass(frozen=True, slots=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def encode(self) -> str:
        """Kafka's ``salt=...,stored_key=...,server_key=...,iterations=N`` (base64 fields)."""
        b64 = base64.b64encode
        return (f"salt={b64(self.salt).decode()},stored_key={b64(self.stored_key).decode()},"
                f"server_key={b64(self.server_key).decode()},iterations={self.iterations}")

    @classmethod
    def decode(cls, text: str) -> ScramCredential:
        fields = dict(part.split("=", 1) for part in text.split(",") if "=" in part)
        try:
            return cls(base64.b64decode(fields["salt"]), base64.b64decode(fields["stored_key"]),
                       base64.b64decode(fields["server_key"]), int(fields["iterations"]))
        except (KeyError, ValueError) as e:
            raise ValueError(f"not a SCRAM credential: {e}") from None


def _salted(password: str, salt: bytes, iterations: int) -> bytes:
    return hashlib.pbkdf2_hmac("sha256", password.encode(), salt, iterations)


def salt_password(password: str, iterations: int = MIN_ITERATIONS, salt: bytes | None = None) -> tuple[bytes, bytes]:
    """(salt, SaltedPassword): what a client sends to set a credential (KIP-554), never the password."""
    if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise ValueError(f"iterations must be between {MIN_ITERATIONS} and {MAX_ITERATIONS}")
    if not password:
        raise ValueError("the password is empty")
    salt = salt if salt is not None else os.urandom(16)
    return salt, _salted(password, salt, iterations)


def credential_from_salted(salt: bytes, salted: bytes, iterations: int) -> ScramCredential:
    client_key = hmac.new(salted, b"Client Key", hashlib.sha256).digest()
    server_key = hmac.new(salted, b"Server Key", hashlib.sha256).digest()
    return ScramCredential(salt, hashlib.sha256(client_key).digest(), server_key, iterations)


def new_credential(password: str, iterations: int = MIN_ITERATIONS, salt: bytes | None = None) -> ScramCredential:
    salt, salted = salt_password(password, iterations, salt)
    return credential_from_salted(salt, salted, iterations)


def verify(credential: ScramCredential, password: str) -> bool:
    salted = _salted(password, credential.salt, credential.iterations)
    client_key = hmac.new(salted, b"Client Key", hashlib.sha256).digest()
    return hmac.compare_digest(hashlib.sha256(client_key).digest(), credential.stored_key)


class CredentialCache:
    """Users' credentials, and which presented passwords already matched them."""

    def __init__(self, max_verified: int = 4096) -> None:
        self._credentials: dict[str, ScramCredential] = {}
        self._verified: OrderedDict[tuple[str, bytes], bool] = OrderedDict()
        self._max = max_verified

    def set(self, name: str, credential: ScramCredential | None) -> None:
        if credential is None:
            self._credentials.pop(name, None)
        else:
            self._credentials[name] = credential
        for key in [k for k in self._verified if k[0] == name]:
            del self._verified[key]

    def users(self) -> dict[str, ScramCredential]:
        return dict(self._credentials)

    def get(self, name: str) -> ScramCredential | None:
        return self._credentials.get(name)

    def authenticate(self, name: str, password: str) -> bool:
        credential = self._credentials.get(name)
        if credential is None:
            return False
        key = (name, hashlib.sha256(password.encode()).digest())
        known = self._verified.get(key)
        if known is not None:
            self._verified.move_to_end(key)
            return known
        ok = verify(credential, password)
        self._verified[key] = ok
        if len(self._verified) > self._max:
            self._verified.popitem(last=False)
        return ok


# ------------------------------------------------------------------ the server side of RFC 5802

# Client messages longer than this are refused unread: a client-first is a user name and a nonce,
# a client-final a nonce and a 32-byte proof (Kafka bounds SASL receives the same way).
MAX_MESSAGE_BYTES: Final = 1024
MAX_NONCE_CHARS: Final = 256
# Kafka's wording, the same for every credential failure (which part was wrong is not said).
INVALID_CREDENTIALS: Final = ("Authentication failed during authentication due to invalid credentials with SASL "
                              f"mechanism {MECHANISM}")


class ScramError(SaslAuthenticationFailedError):
    """The SCRAM exchange failed; the message is safe to send to the client."""


def _attributes(text: str, what: str) -> list[tuple[str, str]]:
    """``a=x,b=y`` as [(a, x), (b, y)]: every attribute one letter, then ``=``."""
    out = []
    for part in text.split(","):
        if len(part) < 2 or part[1] != "=" or not part[0].isalpha():
            raise ScramError(f"malformed SCRAM {what}: {part[:32]!r} is not an attribute")
        out.append((part[0], part[2:]))
    return out


def _saslname(value: str) -> str:
    """A user name as SCRAM writes it: ``,`` is ``=2C`` and ``=`` is ``=3D``, no other ``=``."""
    if re.search(r"=(?!2C|3D)", value):
        raise ScramError("malformed SCRAM user name")
    return value.replace("=2C", ",").replace("=3D", "=")


def _printable_nonce(nonce: str) -> bool:
    return 0 < len(nonce) <= MAX_NONCE_CHARS and all(0x21 <= ord(ch) <= 0x7E and ch != "," for ch in nonce)


def _text(message: bytes, what: str) -> str:
    if len(message) > MAX_MESSAGE_BYTES:
        raise ScramError(f"the SCRAM {what} is {len(message)} bytes, more than {MAX_MESSAGE_BYTES}")
    try:
        return message.decode("utf-8")
    except UnicodeDecodeError:
        raise ScramError(f"the SCRAM {what} is not UTF-8") from None


def _b64(value: str, what: str) -> bytes:
    try:
        return base64.b64decode(value, validate=True)
    except ValueError:
        raise ScramError(f"malformed SCRAM {what}: not base64") from None


@dataclass(frozen=True, slots=True)
class ClientFirst:
    gs2_header: str  # "n,," or "n,a=<authzid>,": no channel binding (Kafka supports none)
    user: str
    client_nonce: str
    bare: str  # client-first-message-bare, part of the AuthMessage


def parse_client_first(message: bytes) -> ClientFirst:
    text = _text(message, "client-first message")
    cbind, sep, rest = text.partition(",")
    authzid, sep2, bare = rest.partition(",")
    if not sep or not sep2:
        raise ScramError("malformed SCRAM client-first message: no GS2 header")
    if cbind not in ("n", "y"):
        raise ScramError("SCRAM channel binding is not supported")  # "p=..." asks for it
    attrs = _attributes(bare, "client-first message")
    if len(attrs) < 2 or attrs[0][0] != "n" or attrs[1][0] != "r":
        raise ScramError("malformed SCRAM client-first message: expected n=<user>,r=<nonce>")
    user_name = _saslname(attrs[0][1])
    nonce = attrs[1][1]
    if not user_name or not _printable_nonce(nonce):
        raise ScramError("malformed SCRAM client-first message: empty user or bad nonce")
    # Extensions: a mandatory one (m=) cannot be honoured; Kafka's delegation-token extension
    # (tokenauth=true) is not an attribute and was refused above as malformed (no tokens here).
    if any(key == "m" for key, _v in attrs[2:]):
        raise ScramError("unsupported SCRAM extension")
    if authzid and (not authzid.startswith("a=") or _saslname(authzid[2:]) != user_name):
        # Kafka's rule: an authorization id, if any, is the authenticating user itself.
        raise ScramError("the SCRAM authorization id does not match the user")
    return ClientFirst(f"{cbind},{authzid},", user_name, nonce, bare)


@dataclass(frozen=True, slots=True)
class ServerFirst:
    """What the server remembers between its first message and the client's final one."""

    client: ClientFirst
    nonce: str  # client nonce + server nonce
    message: str  # server-first-message, part of the AuthMessage
    credential: ScramCredential | None  # None: unknown user, answered with a stand-in salt


def server_first(client_first: bytes, credential_of: Callable[[str], ScramCredential | None], server_nonce: str,
                 secret: bytes) -> ServerFirst:
    """Step 1: the client's first message -> the server's (``ServerFirst.message``).
    ``secret`` derives the stand-in salt of unknown users (stable per user and server)."""
    if not _printable_nonce(server_nonce):
        raise ValueError("the server nonce must be printable ASCII without ','")
    client = parse_client_first(client_first)
    credential = credential_of(client.user)
    if credential is not None:
        salt, iterations = credential.salt, credential.iterations
    else:
        salt = hmac.new(secret, client.user.encode(), hashlib.sha256).digest()[:16]
        iterations = MIN_ITERATIONS
    nonce = client.client_nonce + server_nonce
    message = f"r={nonce},s={base64.b64encode(salt).decode()},i={iterations}"
    return ServerFirst(client, nonce, message, credential)


def server_final(state: ServerFirst, client_final: bytes) -> tuple[str, bytes]:
    """Step 2: the client's final message -> (the authenticated user, the server-final message).
    Raises ScramError unless the proof is right for the stored credential."""
    text = _text(client_final, "client-final message")
    without_proof, sep, proof_attr = text.rpartition(",")
    attrs = _attributes(without_proof, "client-final message") if sep else []
    if len(attrs) < 2 or attrs[0][0] != "c" or attrs[1][0] != "r" or not proof_attr.startswith("p="):
        raise ScramError("malformed SCRAM client-final message: expected c=...,r=...,p=...")
    if _b64(attrs[0][1], "channel binding") != state.client.gs2_header.encode():
        raise ScramError("the SCRAM channel binding does not match the client-first message")
    if not hmac.compare_digest(attrs[1][1].encode(), state.nonce.encode()):
        raise ScramError("the SCRAM nonce does not match")
    proof = _b64(proof_attr[2:], "proof")
    auth_message = f"{state.client.bare},{state.message},{without_proof}".encode()
    credential = state.credential
    if credential is None or len(proof) != hashlib.sha256().digest_size:
        raise ScramError(INVALID_CREDENTIALS)
    signature = hmac.new(credential.stored_key, auth_message, hashlib.sha256).digest()
    client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
    if not hmac.compare_digest(hashlib.sha256(client_key).digest(), credential.stored_key):
        raise ScramError(INVALID_CREDENTIALS)
    server_signature = hmac.new(credential.server_key, auth_message, hashlib.sha256).digest()
    return state.client.user, b"v=" + base64.b64encode(server_signature)
