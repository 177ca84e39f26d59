"""The broker's security shell (SPEC S12): TLS per listener, who each call is from, what they may do.

Theory of operation
-------------------
* Listeners. Every listener is its own gRPC server. SSL and SASL_SSL listeners present the
  broker's certificate (``ssl.keystore.location``); the inter-broker and control-plane listeners
  also *require* a client certificate signed by the cluster CA (``ssl.truststore.location``), as
  does any SSL listener with ``ssl.client.auth=required``. Expired, self-signed or foreign
  certificates fail the TLS handshake and never reach a handler.
* Authentication, per call (``authenticate``): the principal is the client certificate's common
  name (SSL), the SCRAM user whose password checked out (SASL_SSL) or ANONYMOUS (PLAINTEXT). On
  the inter-broker and control-plane listeners only broker principals are let through.
* Authorization (``allowed``): the ACL authorizer when ``authorizer.class.name`` is set, else
  everything is allowed (Kafka's default). Brokers are super users of each other.
* The Kafka wire-protocol listeners (``broker.network.kafka_listener``) take the same material as a Python
  ``ssl.SSLContext`` (``kafka_tls``) and authenticate SASL_SSL clients by SCRAM against the same
  credential cache (``kafka_sasl``); their principals follow the same mapping.
* State from ZooKeeper: SCRAM credentials (``/config/users``) and ACLs (``/kafka-acl``) are loaded
  at start and reloaded on change notifications; the pure parts live in ``scram`` and
  ``authorizer``.
"""

from __future__ import annotations

import logging
import os
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from broker.security.authorizer import CLUSTER, CLUSTER_NAME, AclAuthorizer, Resource
from broker.security.kafka_sasl import SaslServerConfig
from broker.security.principal import (
    ANONYMOUS,
    SASL_SSL,
    SSL,
    Principal,
    RequestContext,
    broker_id_of,
    peer_host,
    user,
)
from broker.server.config import BrokerConfig, Listener
from proto import errors
from proto.scram import MECHANISM, CredentialCache
from proto.transport import AUTH_HEADER, ChannelSecurity, parse_sasl_header, read_key_pair

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ListenerRole:
    listener: Listener
    inter_broker: bool  # the inter-broker or the control-plane listener: brokers only
    serves_control: bool  # BrokerControl and ControllerApi are served here
    serves_replication: bool  # follower fetches are accepted here


class Gatekeeper:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.prefix = config.broker_principal_prefix
        self.credentials = CredentialCache()
        supers = [Principal.parse(p.strip()) for p in config.super_users.split(";") if p.strip()]
        self.authorizer: AclAuthorizer | None = None
        if config.authorizer_enabled:
            self.authorizer = AclAuthorizer(supers, config.allow_everyone_if_no_acl_found)
        self._key_pair: tuple[bytes, bytes] | None = None
        self._ca: bytes | None = None
        # Stand-in salts of unknown SCRAM users on the Kafka listeners: fixed for this process.
        self._scram_secret = os.urandom(32)

    # ------------------------------------------------------------ listeners

    def roles(self) -> list[ListenerRole]:
        cfg = self.config
        inter, control = cfg.inter_broker_listener, cfg.control_plane_listener
        return [ListenerRole(x, x.name in (inter.name, control.name), x.name == control.name, x.name == inter.name)
                for x in cfg.listener_list]

    def _material(self) -> tuple[tuple[bytes, bytes], bytes]:
        if self._key_pair is None or self._ca is None:
            self._key_pair = read_key_pair(self.config.ssl_keystore_location)
            self._ca = Path(self.config.ssl_truststore_location).read_bytes()
        return self._key_pair, self._ca

    def server_credentials(self, role: ListenerRole) -> grpc.ServerCredentials | None:
        if role.listener.security_protocol not in (SSL, SASL_SSL):
            return None
        (chain, key), ca = self._material()
        require = role.inter_broker or (role.listener.security_protocol == SSL
                                        and self.config.ssl_client_auth == "required")
        return grpc.ssl_server_credentials([(key, chain)], root_certificates=ca, require_client_auth=require)

    def kafka_tls(self, listener: Listener) -> ssl.SSLContext | None:
        """The TLS side of a Kafka wire-protocol listener (None: PLAINTEXT). A client certificate
        is required on SSL listeners with ``ssl.client.auth=required``, as on the gRPC ones."""
        if listener.security_protocol not in (SSL, SASL_SSL):
            return None
        return self._server_tls(listener.security_protocol == SSL and self.config.ssl_client_auth == "required")

    def replica_fetch_tls(self) -> ssl.SSLContext:
        """The TLS side of the replica fetch listener (``broker.network.replica_fetch_socket``): mutual TLS
        with a certificate signed by the cluster CA, as on the inter-broker gRPC listener."""
        return self._server_tls(require_client_cert=True)

    def _server_tls(self, require_client_cert: bool) -> ssl.SSLContext:
        cfg = self.config
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.load_cert_chain(cfg.ssl_keystore_location)  # one PEM: chain and key (``minikafka certs``)
        ctx.load_verify_locations(cafile=cfg.ssl_truststore_location)
        ctx.verify_mode = ssl.CERT_REQUIRED if require_client_cert else ssl.CERT_NONE
        return ctx

    def kafka_sasl(self, listener: Listener) -> SaslServerConfig | None:
        if listener.security_protocol != SASL_SSL:
            return None
        return SaslServerConfig(self.credentials.get, self._scram_secret)

    def broker_channel_security(self) -> ChannelSecurity:
        """How this broker connects to other brokers' inter-broker listeners: mutual TLS."""
        cfg = self.config
        return ChannelSecurity("SSL", ssl_cafile=cfg.ssl_truststore_location, ssl_certfile=cfg.ssl_keystore_location)

    # ------------------------------------------------------------ authentication

    def authenticate(self, role: ListenerRole, context: Any) -> RequestContext:
        """The call's RequestContext; raises a typed error when it may not be served at all."""
        proto = role.listener.security_protocol
        host = peer_host(context.peer())
        principal = ANONYMOUS
        if proto == SSL:
            names = (context.auth_context() or {}).get("x509_common_name") or []
            if names:
                principal = user(names[0].decode("utf-8", "replace"))
        elif proto == SASL_SSL:
            principal = self._sasl_principal(context)
        broker_id = broker_id_of(principal, self.prefix) if proto == SSL else None
        if role.inter_broker and broker_id is None:
            raise errors.ClusterAuthorizationFailedError(
                f"{principal} is not a broker: the {role.listener.name} listener serves brokers only")
        return RequestContext(principal, role.listener.name, proto, host, inter_broker=role.inter_broker,
                              broker_id=broker_id)

    def _sasl_principal(self, context: Any) -> Principal:
        header = next((v for k, v in context.invocation_metadata() if k == AUTH_HEADER), None)
        parsed = parse_sasl_header(header) if isinstance(header, str) else None
        if parsed is None:
            raise errors.SaslAuthenticationFailedError("SASL_SSL listener: no credentials were presented")
        mechanism, name, password = parsed
        if mechanism != MECHANISM:
            raise errors.UnsupportedSaslMechanismError(f"mechanism {mechanism!r} is not enabled; use {MECHANISM}")
        if not self.credentials.authenticate(name, password):
            raise errors.SaslAuthenticationFailedError(f"authentication failed for user {name!r}")
        return user(name)

    # ------------------------------------------------------------ authorization

    @property
    def enabled(self) -> bool:
        return self.authorizer is not None

    def allowed(self, ctx: RequestContext, operation: str, resource_type: str, name: str) -> bool:
        if self.authorizer is None or ctx.broker_id is not None:
            return True
        return self.authorizer.authorize(ctx.principal, ctx.host, operation, Resource(resource_type, name))

    def cluster_allowed(self, ctx: RequestContext, operation: str) -> bool:
        return self.allowed(ctx, operation, CLUSTER, CLUSTER_NAME)
