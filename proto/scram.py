"""SCRAM-SHA-256 credentials (RFC 5802/7677, Kafka's ScramCredential), pure.

Theory of operation: a user's password is never stored. ``new_credential`` derives, from the
password and a random salt, ``SaltedPassword = PBKDF2-HMAC-SHA256(password, salt, iterations)``,
``StoredKey = SHA256(HMAC(SaltedPassword, "Client Key"))`` and
``ServerKey = HMAC(SaltedPassword, "Server Key")``; those three plus the iteration count are what
ZooKeeper holds (``/config/users/<user>``, Kafka's text format). ``verify`` re-derives StoredKey from
a presented password. Clients present the password once per connection over the listener's TLS
(SASL_SSL); PBKDF2 is deliberately slow, so ``CredentialCache`` remembers, per user, the digests of
passwords already checked against the current credential - a changed credential forgets them.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
from collections import OrderedDict
from dataclasses import dataclass
from typing import Final

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
