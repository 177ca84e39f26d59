"""SASL on the Kafka wire-protocol listener: the pre-authentication gate and the SCRAM exchange (pure).

Theory of operation
-------------------
A connection to a SASL_SSL Kafka listener is a ``SaslSession`` until it has authenticated, as in
Kafka's ``SaslServerAuthenticator``:

* HANDSHAKE: the client may send ApiVersions (a few times: a client retries a lower version on
  UNSUPPORTED_VERSION) and then SaslHandshake naming its mechanism. Only SCRAM-SHA-256 is
  enabled (the cluster's one mechanism, the same stored credentials as the gRPC listeners);
  any other is answered UNSUPPORTED_SASL_MECHANISM with the enabled list, then the connection
  closes.
* AUTHENTICATE: exactly the two client messages of SCRAM (``proto.scram``): client-first is
  answered with server-first, client-final with server-final, and the session is AUTHENTICATED
  as ``User:<name>``. They come in SaslAuthenticate requests after a v1 handshake, or as bare
  size-prefixed tokens after a v0 one (Kafka's pre-KIP-152 framing, still accepted by Kafka).
  A failure is answered SASL_AUTHENTICATION_FAILED (58) - v0 framing has no way to say it, so
  there the connection just closes - and the connection closes.
* Anything else before AUTHENTICATED (any other API, a SaslAuthenticate before the handshake, a
  third SCRAM message, more than ``MAX_PREAUTH_REQUESTS`` requests) is a protocol violation: the
  shell closes the connection without an answer. The shell also bounds each pre-authentication
  frame (``MAX_PREAUTH_FRAME_BYTES``) and the time until AUTHENTICATED.

After authentication (and on listeners without SASL) SaslHandshake and SaslAuthenticate are
answered ILLEGAL_SASL_STATE, Kafka's answer when re-authentication (KIP-368) is off; responses say
a session lifetime of 0, so clients do not try it.
"""

from __future__ import annotations

import enum
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from proto import scram
from proto.scram import ScramCredential, ScramError

API_VERSIONS: Final = 18
SASL_HANDSHAKE: Final = 17
SASL_AUTHENTICATE: Final = 36
UNSUPPORTED_SASL_MECHANISM: Final = 33
ILLEGAL_SASL_STATE: Final = 34
SASL_AUTHENTICATION_FAILED: Final = 58
ENABLED_MECHANISMS: Final = (scram.MECHANISM,)
# ApiVersions (a few, for version retries), one SaslHandshake and SCRAM's two messages.
MAX_PREAUTH_REQUESTS: Final = 8
# A pre-authentication frame carries at most a SCRAM message plus a request header.
MAX_PREAUTH_FRAME_BYTES: Final = scram.MAX_MESSAGE_BYTES + 1024


class Phase(enum.Enum):
    HANDSHAKE = "handshake"
    AUTHENTICATE = "authenticate"
    AUTHENTICATED = "authenticated"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class SaslServerConfig:
    """What a SASL listener authenticates against (the gatekeeper's credential cache)."""

    credential_of: Callable[[str], ScramCredential | None]
    # Derives the stand-in salt of unknown users: fixed for the broker's life (proto.scram).
    secret: bytes


@dataclass(frozen=True, slots=True)
class Reply:
    values: dict[str, Any]  # the response's fields (kafka_wire.response builds the version asked for)
    close: bool  # answer, then close the connection (a failed handshake or authentication)


def _nonce() -> str:
    return secrets.token_urlsafe(24)  # base64url: printable, no ','


class SaslSession:
    def __init__(self, config: SaslServerConfig, nonce: Callable[[], str] = _nonce) -> None:
        self.config = config
        self.phase = Phase.HANDSHAKE
        self.legacy = False  # a v0 handshake: SCRAM messages follow as bare tokens
        self.user: str | None = None
        self._nonce = nonce
        self._scram: scram.ServerFirst | None = None
        self._requests = 0

    @property
    def authenticated(self) -> bool:
        return self.phase is Phase.AUTHENTICATED

    @property
    def expects_token(self) -> bool:
        """The next frame is a bare SCRAM message (after a v0 handshake), not a Kafka request."""
        return self.legacy and self.phase is Phase.AUTHENTICATE

    def admits(self, api_key: int) -> bool:
        """May a request of ``api_key`` be served now? Counts it while unauthenticated."""
        if self.authenticated:
            return True
        self._requests += 1
        if self._requests > MAX_PREAUTH_REQUESTS:
            return False
        if self.phase is Phase.HANDSHAKE:
            return api_key in (API_VERSIONS, SASL_HANDSHAKE)
        if self.phase is Phase.AUTHENTICATE:
            return api_key == SASL_AUTHENTICATE and not self.legacy
        return False

    def handshake(self, mechanism: str, version: int) -> Reply:
        listed = list(ENABLED_MECHANISMS)
        if self.phase is not Phase.HANDSHAKE:
            return Reply({"error_code": ILLEGAL_SASL_STATE, "mechanisms": listed}, close=True)
        if mechanism not in ENABLED_MECHANISMS:
            self.phase = Phase.FAILED
            return Reply({"error_code": UNSUPPORTED_SASL_MECHANISM, "mechanisms": listed}, close=True)
        self.phase = Phase.AUTHENTICATE
        self.legacy = version == 0
        return Reply({"error_code": 0, "mechanisms": listed}, close=False)

    def authenticate(self, token: bytes) -> Reply:
        """One SCRAM message in; the answer (``auth_bytes``) or SASL_AUTHENTICATION_FAILED out."""
        if self.authenticated:  # no re-authentication (KIP-368): refused, the session stands
            return Reply(illegal_state(SASL_AUTHENTICATE), close=False)
        if self.phase is not Phase.AUTHENTICATE:
            return self._fail("SaslAuthenticate is not expected now", ILLEGAL_SASL_STATE)
        try:
            if self._scram is None:
                self._scram = scram.server_first(token, self.config.credential_of, self._nonce(), self.config.secret)
                return Reply(self._ok(self._scram.message.encode()), close=False)
            self.user, final = scram.server_final(self._scram, token)
        except ScramError as e:
            return self._fail(e.message, SASL_AUTHENTICATION_FAILED)
        self._scram = None
        self.phase = Phase.AUTHENTICATED
        return Reply(self._ok(final), close=False)

    @staticmethod
    def _ok(auth_bytes: bytes) -> dict[str, Any]:
        return {"error_code": 0, "error_message": None, "auth_bytes": auth_bytes, "session_lifetime": 0}

    def _fail(self, message: str, code: int) -> Reply:
        self.phase = Phase.FAILED
        self._scram = None
        return Reply({"error_code": code, "error_message": message, "auth_bytes": b"", "session_lifetime": 0},
                     close=True)


def illegal_state(api_key: int) -> dict[str, Any]:
    """The answer to SaslHandshake/SaslAuthenticate where no SASL exchange is due."""
    if api_key == SASL_HANDSHAKE:
        return {"error_code": ILLEGAL_SASL_STATE, "mechanisms": []}
    return {"error_code": ILLEGAL_SASL_STATE, "auth_bytes": b"", "session_lifetime": 0,
            "error_message": "no SASL authentication is expected on this connection now"}
