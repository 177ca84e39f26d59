"""The server side of SCRAM-SHA-256 (proto.scram.server_first / server_final), as the Kafka listener's
SaslAuthenticate runs it: RFC 7677's own example, a client written here from RFC 5802, and every way
an exchange must fail (bad proof, wrong nonce, unknown user, oversized or garbled messages)."""

from __future__ import annotations

import base64

import pytest
from scram_client import client_final

from proto import scram
from proto.scram import ScramCredential, ScramError, server_final, server_first

SECRET = b"per-server secret"


def _lookup(users: dict[str, ScramCredential]):  # type: ignore[no-untyped-def]
    return users.get


def test_rfc_7677_example() -> None:
    """The exchange printed in RFC 7677 section 3, byte for byte."""
    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    cred = scram.new_credential("pencil", 4096, salt)
    state = server_first(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO", _lookup({"user": cred}),
                         "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0", SECRET)
    assert state.message == "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    user, final = server_final(state, b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                                      b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
    assert user == "user" and final == b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def test_good_proof_with_escaped_name_and_authzid() -> None:
    cred = scram.new_credential("s3cret")
    bare = "n=a=2Cb=3Dc,r=abc"
    state = server_first(f"n,a=a=2Cb=3Dc,{bare}".encode(), _lookup({"a,b=c": cred}), "XYZ", SECRET)
    user, final = server_final(state, client_final("s3cret", bare, state.message, gs2="n,a=a=2Cb=3Dc,"))
    assert user == "a,b=c" and final.startswith(b"v=")


def test_bad_proof_and_unknown_user_fail_alike() -> None:
    cred = scram.new_credential("right")
    lookup = _lookup({"alice": cred})
    state = server_first(b"n,,n=alice,r=abc", lookup, "S1", SECRET)
    with pytest.raises(ScramError, match="invalid credentials") as bad:
        server_final(state, client_final("wrong", "n=alice,r=abc", state.message))
    assert bad.value.code == 58
    # An unknown user gets a salt and iteration count too (stable per user), and fails only at the proof.
    ghost = server_first(b"n,,n=mallory,r=abc", lookup, "S1", SECRET)
    assert ghost.message == server_first(b"n,,n=mallory,r=abc", lookup, "S1", SECRET).message
    assert ",s=" in ghost.message and ghost.message.endswith(",i=4096")
    with pytest.raises(ScramError, match="invalid credentials"):
        server_final(ghost, client_final("anything", "n=mallory,r=abc", ghost.message))


def test_wrong_nonce_or_channel_binding_fails() -> None:
    cred = scram.new_credential("pw")
    state = server_first(b"n,,n=u,r=client", _lookup({"u": cred}), "server", SECRET)
    good = client_final("pw", "n=u,r=client", state.message).decode()
    with pytest.raises(ScramError, match="nonce"):
        server_final(state, good.replace("r=clientserver", "r=clientother").encode())
    with pytest.raises(ScramError, match="channel binding"):
        server_final(state, good.replace("c=biws", "c=" + base64.b64encode(b"y,,").decode()).encode())
    assert server_final(state, good.encode())[0] == "u"


@pytest.mark.parametrize("message", [
    b"", b"n,,", b"garbage", b"p=tls-unique,,n=u,r=x", b"n,,r=x,n=u", b"n,,n=u", b"n,,n=,r=x",
    b"n,,n=u,r=a,b", b"n,,n=u=41,r=x", b"n,,n=u,r=x,m=must", b"n,a=other,n=u,r=x", b"\xff\xfe,,n=u,r=x",
    b"n,,n=u,r=" + b"x" * 300, b"n,,n=u,r=x,tokenauth=true", b"n,,n=" + b"u" * 2000 + b",r=x",
])
def test_garbled_or_oversized_client_first_is_refused(message: bytes) -> None:
    with pytest.raises(ScramError):
        server_first(message, _lookup({"u": scram.new_credential("pw")}), "S", SECRET)


@pytest.mark.parametrize("final", [
    b"", b"c=biws", b"c=biws,r=xS", b"c=biws,r=xS,p=!!!", b"c=biws,r=xS,p=" + base64.b64encode(b"short"),
    b"r=xS,c=biws,p=AAAA", b"c=biws,r=xS,p=" + b"A" * 2000, b"\xff,r=xS,p=AAAA",
])
def test_garbled_or_oversized_client_final_is_refused(final: bytes) -> None:
    state = server_first(b"n,,n=u,r=x", _lookup({"u": scram.new_credential("pw")}), "S", SECRET)
    with pytest.raises(ScramError):
        server_final(state, final)


def test_server_nonce_must_be_printable() -> None:
    with pytest.raises(ValueError):
        server_first(b"n,,n=u,r=x", _lookup({}), "a,b", SECRET)
