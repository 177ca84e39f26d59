"""The client side of SCRAM-SHA-256 (RFC 5802 section 3), written from the RFC for tests: what
librdkafka computes, independent of the server code under test."""

from __future__ import annotations

import base64
import hashlib
import hmac


def client_final(password: str, client_first_bare: str, server_first_message: str, gs2: str = "n,,") -> bytes:
    attrs = dict(part.split("=", 1) for part in server_first_message.split(","))
    salted = hashlib.pbkdf2_hmac("sha256", password.encode(), base64.b64decode(attrs["s"]), int(attrs["i"]))
    client_key = hmac.new(salted, b"Client Key", hashlib.sha256).digest()
    without_proof = f"c={base64.b64encode(gs2.encode()).decode()},r={attrs['r']}"
    auth = f"{client_first_bare},{server_first_message},{without_proof}".encode()
    signature = hmac.new(hashlib.sha256(client_key).digest(), auth, hashlib.sha256).digest()
    proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
    return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()
