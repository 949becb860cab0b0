"""ACL bindings and API keys (the admin endpoints of app.api.routers.acls)."""

from __future__ import annotations

from typing import Annotated

import msgspec
from msgspec import Meta
from pydantic import BaseModel, Field

from app.api.schemas.common import RequestBody
from app.domain.acl import AclBinding, Operation, PatternType, Permission, ResourceType

# No control character; spaces are allowed (a certificate's subject, User:CN=Pizza Shop,O=Example).
PRINCIPAL_PATTERN = r"^User:[^\x00-\x1f\x7f]+$"
PrincipalName = Annotated[str, Meta(min_length=6, max_length=255, pattern=PRINCIPAL_PATTERN,
                                    description="User:<name>, or User:* for every principal")]
ResourceName = Annotated[str, Meta(min_length=1, max_length=255, pattern=r"^[^\x00-\x1f\x7f]+$",
                                   description="a topic, group or transactional id (literal: the name, or * "
                                   "for all; prefixed: the prefix), or outbox-cluster")]


class AclBindingIn(RequestBody):
    principal: PrincipalName
    resource_type: ResourceType
    resource_name: ResourceName
    operation: Operation
    pattern_type: PatternType = PatternType.LITERAL
    permission: Permission = Permission.ALLOW

    def to_domain(self) -> AclBinding:
        return AclBinding(self.principal, self.resource_type, self.resource_name, self.pattern_type,
                          self.operation, self.permission)


class CreateAclsRequest(RequestBody):
    acls: Annotated[list[AclBindingIn], Meta(min_length=1, max_length=1000)] = msgspec.field(default_factory=list)


class AclBindingOut(BaseModel):
    principal: str
    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType
    operation: Operation
    permission: Permission

    @classmethod
    def of(cls, b: AclBinding) -> "AclBindingOut":
        return cls(principal=b.principal, resource_type=b.resource_type, resource_name=b.resource_name,
                   pattern_type=b.pattern_type, operation=b.operation, permission=b.permission)


class AclList(BaseModel):
    acls: list[AclBindingOut]


class CreatedAcl(AclBindingOut):
    created: bool = Field(description="false: the same binding was stored already")


class CreateAclsResponse(BaseModel):
    acls: list[CreatedAcl]


class DeleteAclsResponse(BaseModel):
    deleted: list[AclBindingOut]


class ApiKeyInfo(BaseModel):
    key_id: str
    created_ms: int
    revoked_ms: int | None
    scram_credentials: bool = Field(description=(
        "whether the key authenticates with SASL SCRAM at the Kafka door too; false for keys created before "
        "migration 0024, which take SASL/PLAIN only: create a new key and revoke this one to use SCRAM"))


class PrincipalInfo(BaseModel):
    principal: str
    api_keys: list[ApiKeyInfo]


class PrincipalList(BaseModel):
    principals: list[PrincipalInfo]


class CreatedApiKey(BaseModel):
    principal: str
    key_id: str
    api_key: str = Field(description="the key, shown this once: only a hash of it is stored")
    created_ms: int


class RevokedApiKeys(BaseModel):
    revoked: list[str]


class ClusterAuthorizedOperations(BaseModel):
    authorized_operations: list[str] = Field(description="the cluster operations the ACLs allow the principal "
                                              "(Kafka's cluster_authorized_operations, KIP-430)")


class AclOperations(BaseModel):
    operations_of: dict[ResourceType, list[Operation]] = Field(description=(
        "the operations a binding may name for each resource type (Kafka's resource type × operation table), "
        "each in the order of the operation enum; a binding of another is refused"))
