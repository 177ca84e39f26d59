"""The ACL authorizer (Kafka's AclAuthorizer), pure: no ZooKeeper, no clock.

Theory of operation (SPEC S12.3)
--------------------------------
An ACL says: principal P, from host H, may (Allow) or may not (Deny) perform operation O on a
resource R, where R is a topic, a group or the cluster, named literally or ``*`` (every resource
of the type). ``AclAuthorizer.authorize`` answers one question, as Kafka does:

1. super users (``super.users``) may do anything;
2. the ACLs that apply are those of the resource's literal name and of ``*``; a Deny that
   matches the principal (or ``User:*``), the host (or ``*``) and the operation (or ``All``)
   wins over any Allow;
3. an Allow matching the same way grants; an Allow of Read, Write, Delete or Alter also grants
   Describe, and AlterConfigs grants DescribeConfigs (Kafka's implied operations);
4. with no ACL at all on the resource, ``allow.everyone.if.no.acl.found`` decides (default: no).

ACLs live in ZooKeeper under ``/kafka-acl/<Type>/<name>`` (Kafka's layout, zk.data.AclZNode);
the broker keeps them in this object and reloads a resource when ``/kafka-acl-changes`` says so.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from broker.security.principal import Principal

TOPIC: Final = "Topic"
GROUP: Final = "Group"
CLUSTER: Final = "Cluster"
TRANSACTIONAL_ID: Final = "TransactionalId"  # KIP-98: Write (use the id), Describe (find its coordinator)
RESOURCE_TYPES: Final = (TOPIC, GROUP, CLUSTER, TRANSACTIONAL_ID)
CLUSTER_NAME: Final = "kafka-cluster"
WILDCARD: Final = "*"

OPERATIONS: Final = ("All", "Read", "Write", "Create", "Delete", "Alter", "Describe", "ClusterAction",
                     "DescribeConfigs", "AlterConfigs", "IdempotentWrite")
ALLOW: Final = "Allow"
DENY: Final = "Deny"

_IMPLIED_BY: Final[dict[str, frozenset[str]]] = {
    "Describe": frozenset({"Read", "Write", "Delete", "Alter"}),
    "DescribeConfigs": frozenset({"AlterConfigs"}),
}


@dataclass(frozen=True, slots=True)
class Acl:
    principal: str  # "User:alice" or "User:*"
    host: str  # an address or "*"
    operation: str
    permission_type: str  # Allow | Deny

    def check(self) -> None:
        if self.operation not in OPERATIONS:
            raise ValueError(f"unknown operation {self.operation!r}; one of {', '.join(OPERATIONS)}")
        if self.permission_type not in (ALLOW, DENY):
            raise ValueError(f"permission type must be Allow or Deny, got {self.permission_type!r}")
        Principal.parse(self.principal)
        if not self.host:
            raise ValueError("host is empty (use * for any)")


@dataclass(frozen=True, slots=True)
class Resource:
    resource_type: str
    name: str


def _matches(acl: Acl, principal: Principal, host: str, operation: str, *, implied: bool) -> bool:
    if acl.principal not in (str(principal), f"{principal.principal_type}:{WILDCARD}"):
        return False
    if acl.host not in (WILDCARD, host):
        return False
    if acl.operation in ("All", operation):
        return True
    return implied and acl.operation in _IMPLIED_BY.get(operation, frozenset())


class AclAuthorizer:
    def __init__(self, super_users: Iterable[Principal] = (), allow_everyone_if_no_acl_found: bool = False) -> None:
        self.super_users = frozenset(super_users)
        self.allow_everyone_if_no_acl_found = allow_everyone_if_no_acl_found
        self._acls: dict[Resource, frozenset[Acl]] = {}

    def set_acls(self, resource: Resource, acls: Iterable[Acl]) -> None:
        frozen = frozenset(acls)
        if frozen:
            self._acls[resource] = frozen
        else:
            self._acls.pop(resource, None)

    def acls(self) -> dict[Resource, frozenset[Acl]]:
        return dict(self._acls)

    def allows_any(self, principal: Principal, host: str, operation: str, resource_type: str) -> bool:
        """Is ``operation`` allowed on at least one resource of the type (Kafka's KIP-679 check)?"""
        return any(r.resource_type == resource_type and self.authorize(principal, host, operation, r)
                   for r in self._acls)

    def authorize(self, principal: Principal, host: str, operation: str, resource: Resource) -> bool:
        if principal in self.super_users:
            return True
        applicable = self._acls.get(resource, frozenset()) | self._acls.get(
            Resource(resource.resource_type, WILDCARD), frozenset())
        if not applicable:
            return self.allow_everyone_if_no_acl_found
        if any(a.permission_type == DENY and _matches(a, principal, host, operation, implied=False)
               for a in applicable):
            return False
        return any(a.permission_type == ALLOW and _matches(a, principal, host, operation, implied=True)
                   for a in applicable)
