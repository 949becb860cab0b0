"""ACLs and API keys over HTTP: Kafka's CreateAcls / DescribeAcls / DeleteAcls, and the
principals' API keys. Changing either needs ALTER on the cluster, reading it DESCRIBE; what the
principal may do on the cluster is answered too, so that the console offers only that."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path, Query

from app.api.deps import ServicesDep
from app.api.errors import documented
from app.api.json_body import json_body, refuse_body, refuse_fields
from app.api.schemas.acls import (
    PRINCIPAL_PATTERN,
    AclBindingOut,
    AclList,
    AclOperations,
    ApiKeyInfo,
    ClusterAuthorizedOperations,
    CreateAclsRequest,
    CreateAclsResponse,
    CreatedAcl,
    CreatedApiKey,
    DeleteAclsResponse,
    PrincipalInfo,
    PrincipalList,
    RevokedApiKeys,
)
from app.api.security import AccessDep
from app.domain.acl import (
    CLUSTER,
    OPERATIONS_OF,
    AclFilter,
    Operation,
    PatternType,
    Permission,
    ResourceType,
    authorized_operations,
    principal_name,
)
from app.domain.errors import InvalidRequest, ResourceNotFound
from app.services.security import KEY_ID_MAX_LENGTH, KEY_ID_PATTERN

router = APIRouter(prefix="/v1/acls", tags=["acls"])
principals_router = APIRouter(prefix="/v1/principals", tags=["acls"])
cluster_router = APIRouter(prefix="/v1/cluster", tags=["acls"])

PrincipalQuery = Annotated[str | None, Query(min_length=6, max_length=255, pattern=PRINCIPAL_PATTERN)]
PrincipalPath = Annotated[str, Path(min_length=1, max_length=255, pattern=r"^[^\x00-\x1f/\x7f]+$",
                                    description="User:<name>, or just <name>")]
KeyIdPath = Annotated[str, Path(min_length=1, max_length=KEY_ID_MAX_LENGTH, pattern=KEY_ID_PATTERN)]


def _filter(principal: str | None, resource_type: ResourceType | None, resource_name: str | None,
            pattern_type: PatternType | None, operation: Operation | None,
            permission: Permission | None) -> AclFilter:
    return AclFilter(principal, resource_type, resource_name, pattern_type, operation, permission)


NameQuery = Annotated[str | None, Query(min_length=1, max_length=255)]


@router.get("", operation_id="describe_acls", response_model=AclList, responses=documented(401, 403))
def describe_acls(
    services: ServicesDep, access: AccessDep,
    principal: PrincipalQuery = None, resource_type: ResourceType | None = None, resource_name: NameQuery = None,
    pattern_type: PatternType | None = None, operation: Operation | None = None,
    permission: Permission | None = None,
) -> AclList:
    """The ACL bindings that match every parameter given (Kafka's DescribeAcls, exact match
    per field). Needs DESCRIBE on the cluster."""
    access.require(Operation.DESCRIBE, CLUSTER)
    match = _filter(principal, resource_type, resource_name, pattern_type, operation, permission)
    return AclList(acls=[AclBindingOut.of(b) for b in services.security.list_acls(match)])


@router.get("/operations", operation_id="describe_acl_operations", response_model=AclOperations,
            responses=documented(401, 403))
def describe_acl_operations(access: AccessDep) -> AclOperations:
    """The operations a binding may name for each resource type: the console's ACL form offers
    these, so that it holds no copy of the table. Needs DESCRIBE on the cluster, as the listing."""
    access.require(Operation.DESCRIBE, CLUSTER)
    return AclOperations(operations_of={t: [op for op in Operation if op in OPERATIONS_OF[t]] for t in ResourceType})


@router.post("", operation_id="create_acls", response_model=CreateAclsResponse,
             responses=documented(400, 401, 403, 415))
def create_acls(body: Annotated[CreateAclsRequest, json_body(CreateAclsRequest)], services: ServicesDep,
                access: AccessDep) -> CreateAclsResponse:
    """Add ACL bindings (Kafka's CreateAcls); a binding stored already is left as it is.
    Needs ALTER on the cluster. Every process applies a change within
    OUTBOX_SECURITY_REFRESH_INTERVAL_MS, this one at once."""
    access.require(Operation.ALTER, CLUSTER)
    bindings = [b.to_domain() for b in body.acls]
    added = services.security.add_acls(bindings, by=access.principal)
    return CreateAclsResponse(acls=[CreatedAcl(**AclBindingOut.of(b).model_dump(), created=new)
                                    for b, new in zip(bindings, added, strict=True)])


_QUERY_ONLY = refuse_body("DELETE /v1/acls takes no body: give its filter as query parameters "
                          "(?principal=…&resource_type=…); the bindings that match them all are deleted")


@router.delete("", operation_id="delete_acls", response_model=DeleteAclsResponse,
               responses=documented(400, 401, 403))
def delete_acls(
    services: ServicesDep, access: AccessDep, _: Annotated[None, _QUERY_ONLY],
    principal: PrincipalQuery = None, resource_type: ResourceType | None = None, resource_name: NameQuery = None,
    pattern_type: PatternType | None = None, operation: Operation | None = None,
    permission: Permission | None = None,
) -> DeleteAclsResponse:
    """Delete the ACL bindings that match every parameter given (Kafka's DeleteAcls); at least
    one parameter, so that no mistyped request deletes them all. The parameters are the query
    string's; a body is refused. Needs ALTER on the cluster."""
    access.require(Operation.ALTER, CLUSTER)
    match = _filter(principal, resource_type, resource_name, pattern_type, operation, permission)
    if match.matches_everything:
        raise InvalidRequest("name at least one of principal, resource_type, resource_name, pattern_type, "
                             "operation, permission as query parameters: the bindings that match them all "
                             "are deleted")
    removed = services.security.remove_acls(match, by=access.principal)
    return DeleteAclsResponse(deleted=[AclBindingOut.of(b) for b in removed])


@principals_router.get("", operation_id="list_principals", response_model=PrincipalList,
                       responses=documented(401, 403))
def list_principals(services: ServicesDep, access: AccessDep) -> PrincipalList:
    """Every principal that has API keys, with their ids and when they were created and
    revoked (never the keys). Needs DESCRIBE on the cluster."""
    access.require(Operation.DESCRIBE, CLUSTER)
    by_principal: dict[str, list[ApiKeyInfo]] = {}
    for k in services.security.list_api_keys():
        by_principal.setdefault(k.principal, []).append(
            ApiKeyInfo(key_id=k.key_id, created_ms=k.created_ms, revoked_ms=k.revoked_ms,
                       scram_credentials=bool(k.scram)))
    return PrincipalList(principals=[PrincipalInfo(principal=p, api_keys=keys) for p, keys in by_principal.items()])


@principals_router.post("/{principal}/api-keys", status_code=201, operation_id="create_api_key",
                        response_model=CreatedApiKey, responses=documented(400, 401, 403, 415))
def create_api_key(principal: PrincipalPath, services: ServicesDep, access: AccessDep,
                   _: Annotated[None, Depends(refuse_fields)]) -> CreatedApiKey:
    """A new API key for the principal (User:<name>): the answer holds the key, which is never
    shown again. Needs ALTER on the cluster."""
    access.require(Operation.ALTER, CLUSTER)
    issued = services.security.create_api_key(principal, by=access.principal)
    return CreatedApiKey(principal=issued.principal, key_id=issued.key_id, api_key=issued.api_key,
                         created_ms=issued.created_ms)


@principals_router.delete("/{principal}/api-keys/{key_id}", operation_id="revoke_api_key",
                          response_model=RevokedApiKeys, responses=documented(401, 403, 404))
def revoke_api_key(principal: PrincipalPath, key_id: KeyIdPath, services: ServicesDep,
                   access: AccessDep) -> RevokedApiKeys:
    """Revoke one of the principal's API keys: it stops working here at once, and in every
    process within OUTBOX_SECURITY_REFRESH_INTERVAL_MS. Needs ALTER on the cluster."""
    access.require(Operation.ALTER, CLUSTER)
    revoked = services.security.revoke_api_keys(by=access.principal, principal=principal_name(principal),
                                                key_id=key_id)
    if not revoked:
        raise ResourceNotFound(f"{principal_name(principal)} has no live API key {key_id!r}")
    return RevokedApiKeys(revoked=revoked)


@cluster_router.get("/authorized-operations", operation_id="describe_cluster_authorized_operations",
                    response_model=ClusterAuthorizedOperations, responses=documented(401))
def describe_cluster_authorized_operations(access: AccessDep) -> ClusterAuthorizedOperations:
    """What the principal may do on the cluster (Kafka's cluster_authorized_operations): the
    console offers an operator's actions only with alter. None without DESCRIBE on the cluster,
    as Kafka's DescribeCluster answers, rather than a refusal: the console asks on every page
    that may offer one, and a page view is no refused request."""
    allowed = authorized_operations(CLUSTER, access.allows)
    return ClusterAuthorizedOperations(authorized_operations=[op.value for op in allowed])
