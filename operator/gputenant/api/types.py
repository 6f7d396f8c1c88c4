"""The building blocks of the API models: the base model that carries CEL rules into the CRD,
validated scalar types (quantities, durations, URLs, MIG profiles, DNS names) and the small enums.
"""

from __future__ import annotations

from enum import Enum
from typing import Annotated, Any, ClassVar

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel
from pydantic_core import PydanticCustomError

from gputenant.api.gpus import all_mig_profile_names
from gputenant.api.rules import (
    CEL_KEY,
    DNS_LABEL,
    DNS_SUBDOMAIN,
    Rule,
    check_rules,
    duration_between,
    is_https_url,
    is_positive_quantity,
    value_rule,
)
from gputenant.timefmt import DURATION_PATTERN

MIN_TOKEN_LIFETIME = "10m"
MAX_TOKEN_LIFETIME = "8760h"


def _add_cel_rules(schema: dict[str, Any], model: type[ApiModel]) -> None:
    rules = [rule.cel() for rule in model.rules]
    if rules:
        schema[CEL_KEY] = schema.get(CEL_KEY, []) + rules


class ApiModel(BaseModel):
    """Base of every API object: camelCase on the wire, unknown fields rejected.

    ``rules`` are the model's cross-field rules: the CRD carries them as CEL, and validating the
    model checks their Python twins.
    """

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        use_enum_values=False,
        json_schema_extra=_add_cel_rules,
    )
    rules: ClassVar[tuple[Rule, ...]] = ()

    @model_validator(mode="after")
    def _check_rules(self) -> ApiModel:
        check_rules(self, self.rules)
        return self


Quantity = Annotated[
    str,
    Field(max_length=64),
    *value_rule(
        "isQuantity(self) && quantity(self).isGreaterThan(quantity('0'))",
        "must be a positive Kubernetes quantity such as 500m, 2 or 4Gi",
        is_positive_quantity,
    ),
]
"""A positive resource quantity as Kubernetes writes it."""

Duration = Annotated[
    str,
    Field(max_length=32),
    *value_rule(
        f"self.matches(r'{DURATION_PATTERN}') && duration(self) >= duration('{MIN_TOKEN_LIFETIME}') "
        f"&& duration(self) <= duration('{MAX_TOKEN_LIFETIME}')",
        f"must be a duration in whole h, m or s units such as 90m or 24h, between {MIN_TOKEN_LIFETIME} and {MAX_TOKEN_LIFETIME}",
        lambda text: duration_between(text, MIN_TOKEN_LIFETIME, MAX_TOKEN_LIFETIME),
    ),
]

HttpsUrl = Annotated[
    str,
    Field(max_length=2048),
    *value_rule(
        "isURL(self) && url(self).getScheme() == 'https' && url(self).getHostname() != ''",
        "must be an https URL with a host, such as https://team-a.gpu.example.com",
        is_https_url,
    ),
]



def _known_mig_profile(profile: str) -> str:
    if profile not in all_mig_profile_names():
        raise PydanticCustomError(
            "enum", "must be a MIG profile of a supported GPU: {profiles}", {"profiles": ", ".join(all_mig_profile_names())}
        )
    return profile


MigProfileName = Annotated[
    str, Field(max_length=16, json_schema_extra={"enum": all_mig_profile_names()}), AfterValidator(_known_mig_profile)
]
"""A MIG profile that exists on at least one supported GPU (api/gpus.py)."""

DnsLabel = Annotated[str, Field(min_length=1, max_length=63, pattern=DNS_LABEL)]
DnsSubdomain = Annotated[str, Field(min_length=1, max_length=253, pattern=DNS_SUBDOMAIN)]


class SubjectKind(str, Enum):
    """Kind of an RBAC subject."""

    USER = "User"
    GROUP = "Group"
    SERVICE_ACCOUNT = "ServiceAccount"


class MemberRole(str, Enum):
    """Role of a member in the tenant's host namespace."""

    ADMIN = "admin"
    EDIT = "edit"
    VIEW = "view"


class KubeconfigRole(str, Enum):
    """Role of an issued kubeconfig in the virtual cluster."""

    ADMIN = "admin"
    VIEW = "view"


class DeletionPolicy(str, Enum):
    """What happens to the host namespace when the tenant is deleted."""

    DELETE = "Delete"
    RETAIN = "Retain"
