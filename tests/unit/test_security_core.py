"""The pure parts of SPEC S12: principals, SCRAM credentials, the ACL authorizer, client options."""

from __future__ import annotations

import base64

import pytest

from broker.security.authorizer import ALLOW, CLUSTER, CLUSTER_NAME, DENY, TOPIC, Acl, AclAuthorizer, Resource
from broker.security.principal import ANONYMOUS, Principal, broker_id_of, peer_host, user
from proto import scram
from proto.transport import ChannelSecurity, SecurityConfigError, parse_sasl_header

ALICE, BOB = user("alice"), user("bob")
ORDERS = Resource(TOPIC, "orders")


def test_broker_principals_are_named_by_the_certificate() -> None:
    assert broker_id_of(user("broker-2")) == 2
    assert broker_id_of(user("broker-")) is None and broker_id_of(user("broker-2x")) is None
    assert broker_id_of(user("alice")) is None and broker_id_of(Principal("Group", "broker-1")) is None
    assert broker_id_of(user("kafka-7"), prefix="kafka-") == 7
    assert Principal.parse("User:alice") == ALICE and str(ANONYMOUS) == "User:ANONYMOUS"
    with pytest.raises(ValueError):
        Principal.parse("alice")
    assert peer_host("ipv4:127.0.0.1:5555") == "127.0.0.1" and peer_host("ipv6:[::1]:5555") == "::1"


def test_scram_credentials_store_no_password() -> None:
    cred = scram.new_credential("s3cret", iterations=4096, salt=b"0123456789abcdef")
    text = cred.encode()
    assert "s3cret" not in text and text.startswith("salt=") and text.endswith("iterations=4096")
    assert scram.ScramCredential.decode(text) == cred
    assert scram.verify(cred, "s3cret") and not scram.verify(cred, "S3cret")
    # KIP-554: the client sends (salt, SaltedPassword); the broker derives the same credential.
    salt, salted = scram.salt_password("s3cret", 4096, b"0123456789abcdef")
    assert scram.credential_from_salted(salt, salted, 4096) == cred
    with pytest.raises(ValueError):
        scram.new_credential("x", iterations=10)
    with pytest.raises(ValueError):
        scram.ScramCredential.decode("salt=AAAA")


def test_credential_cache_forgets_a_changed_password() -> None:
    cache = scram.CredentialCache()
    cache.set("alice", scram.new_credential("one"))
    assert cache.authenticate("alice", "one") and not cache.authenticate("alice", "two")
    assert cache.authenticate("alice", "one")  # the memo, not PBKDF2 again
    cache.set("alice", scram.new_credential("two"))
    assert not cache.authenticate("alice", "one") and cache.authenticate("alice", "two")
    cache.set("alice", None)
    assert not cache.authenticate("alice", "two") and not cache.authenticate("nobody", "x")


def test_acls_allow_deny_and_implied_operations() -> None:
    authz = AclAuthorizer(super_users=[user("admin")])
    assert not authz.authorize(ALICE, "10.0.0.1", "Read", ORDERS)  # no ACL: denied by default
    authz.set_acls(ORDERS, [Acl("User:alice", "*", "Read", ALLOW)])
    assert authz.authorize(ALICE, "10.0.0.1", "Read", ORDERS)
    assert authz.authorize(ALICE, "10.0.0.1", "Describe", ORDERS)  # Read implies Describe
    assert not authz.authorize(ALICE, "10.0.0.1", "Write", ORDERS)
    assert not authz.authorize(BOB, "10.0.0.1", "Read", ORDERS)
    assert authz.authorize(user("admin"), "10.0.0.1", "Delete", ORDERS)  # super user
    # A Deny wins over any Allow, including a wildcard resource's.
    authz.set_acls(Resource(TOPIC, "*"), [Acl("User:*", "*", "Read", ALLOW), Acl("User:alice", "10.0.0.9", "All",
                                                                               DENY)])
    assert authz.authorize(BOB, "10.0.0.1", "Read", Resource(TOPIC, "other"))
    assert not authz.authorize(ALICE, "10.0.0.9", "Read", ORDERS)
    assert authz.authorize(ALICE, "10.0.0.1", "Read", ORDERS)
    # Describe is implied by an Allow, never a Deny of Read.
    authz.set_acls(ORDERS, [Acl("User:alice", "*", "Read", DENY), Acl("User:alice", "*", "Describe", ALLOW)])
    assert authz.authorize(ALICE, "10.0.0.1", "Describe", ORDERS) and not authz.authorize(
        ALICE, "10.0.0.1", "Read", ORDERS)
    assert authz.allows_any(BOB, "10.0.0.1", "Read", TOPIC) and not authz.allows_any(BOB, "h", "Write", TOPIC)
    cluster = Resource(CLUSTER, CLUSTER_NAME)
    everyone = AclAuthorizer(allow_everyone_if_no_acl_found=True)
    assert everyone.authorize(ALICE, "h", "Create", cluster)
    with pytest.raises(ValueError):
        Acl("User:alice", "*", "Fly", ALLOW).check()
    with pytest.raises(ValueError):
        Acl("alice", "*", "Read", ALLOW).check()


def test_client_security_options_must_fit_together() -> None:
    with pytest.raises(SecurityConfigError):
        ChannelSecurity("SASL_SSL", ssl_cafile="ca.pem")  # no user
    with pytest.raises(SecurityConfigError):
        ChannelSecurity("SSL")  # no CA
    with pytest.raises(SecurityConfigError):
        ChannelSecurity("TLS")
    sec = ChannelSecurity.from_properties({"security.protocol": "sasl_ssl", "ssl.truststore.location": "ca.pem",
                                           "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "alice",
                                           "sasl.password": "pw:with:colons"})
    assert sec.security_protocol == "SASL_SSL" and sec.sasl_plain_password == "pw:with:colons"
    token = base64.b64encode(b"alice:pw:with:colons").decode()
    assert parse_sasl_header(f"SCRAM-SHA-256 {token}") == ("SCRAM-SHA-256", "alice", "pw:with:colons")
    assert parse_sasl_header("SCRAM-SHA-256 !!!") is None and parse_sasl_header("x") is None
