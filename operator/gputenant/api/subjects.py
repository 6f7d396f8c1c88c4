"""Who a tenant belongs to: RBAC subjects (owners) and members with their role in the host namespace."""

from __future__ import annotations

import re
from typing import ClassVar

from pydantic import Field
from pydantic.json_schema import JsonDict

from gputenant.api.rules import DNS_SUBDOMAIN, Rule
from gputenant.api.types import ApiModel, DnsLabel, MemberRole, SubjectKind


class Subject(ApiModel):
    """A principal of the host cluster, as in an RBAC subject."""

    kind: SubjectKind = Field(description="User, Group or ServiceAccount.")
    name: str = Field(min_length=1, max_length=253, description="Name of the user, group or service account.")
    namespace: DnsLabel | None = Field(
        default=None,
        description="Namespace of the service account; required for kind ServiceAccount, forbidden otherwise.",
    )

    rules: ClassVar[tuple[Rule, ...]] = (
        Rule(
            "self.kind != 'ServiceAccount' || has(self.namespace)",
            "a ServiceAccount subject needs its namespace: set namespace",
            lambda subject: subject.kind != SubjectKind.SERVICE_ACCOUNT or subject.namespace is not None,
            field_path=".namespace",
            reason="FieldValueRequired",
        ),
        Rule(
            "self.kind == 'ServiceAccount' || !has(self.namespace)",
            "only ServiceAccount subjects have a namespace: remove namespace",
            lambda subject: subject.kind == SubjectKind.SERVICE_ACCOUNT or subject.namespace is None,
            field_path=".namespace",
            reason="FieldValueForbidden",
        ),
        Rule(
            f"self.kind != 'ServiceAccount' || self.name.matches(r'{DNS_SUBDOMAIN}')",
            "a ServiceAccount name is a DNS subdomain: lower-case letters, digits, '-' and '.'",
            lambda subject: subject.kind != SubjectKind.SERVICE_ACCOUNT or re.match(DNS_SUBDOMAIN, subject.name) is not None,
            field_path=".name",
        ),
    )


class Member(Subject):
    """A principal that gets a role in the tenant's host namespace."""

    role: MemberRole = Field(default=MemberRole.VIEW, description="admin, edit or view.")


def subject_key(subject: Subject) -> str:
    """Owners and members are unique by kind and name (the CRD's list-map keys)."""
    return f"{subject.kind.value}/{subject.name}"


SUBJECT_LIST: JsonDict = {"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["kind", "name"]}
