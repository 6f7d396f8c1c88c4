"""GpuTenants the API must accept and ones it must reject, each with the field the error names.

One table for both checks: the API server (CRD schema and CEL rules, e2e/tests/
test_admission_gputenant.py) and pydantic (operator/tests/test_crd.py) must reject every invalid
tenant here, at the same field. Platform engineers can read it as a list of what the API refuses.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from gputenant.api.group import GROUP, HUB_VERSION, KIND


def minimal_tenant(name: str = "team-a", **spec: Any) -> dict[str, Any]:
    """The smallest valid GpuTenant; ``spec`` keywords replace top-level spec fields. In the hub's
    shape (v1alpha1, still served), which the pydantic checks of the table validate."""
    return {
        "apiVersion": f"{GROUP}/{HUB_VERSION}",
        "kind": KIND,
        "metadata": {"name": name},
        "spec": {"trust": "Trusted", "owners": [{"kind": "User", "name": "alice"}], **spec},
    }


def with_changes(tenant: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``tenant`` with ``changes`` merged in; keys are dotted paths, e.g. ``spec.gpu.quota``."""
    result = copy.deepcopy(tenant)
    for path, value in changes.items():
        *parents, leaf = path.split(".")
        node = result
        for key in parents:
            node = node.setdefault(key, {})
        node[leaf] = value
    return result


@dataclass(frozen=True)
class InvalidCase:
    id: str
    changes: dict[str, Any]
    """Dotted path -> value, applied to the minimal tenant."""
    path: str
    """The field the API server's error names, e.g. ``spec.owners[0].namespace``."""
    offline_path: str | None = None
    """The field pydantic's error names, where it differs (duplicates are reported on the list)."""
    message: str | None = None
    """Words of the rule's message both must say (rules only; schema errors word it their own way)."""
    unknown_field: bool = False
    """Rejected because of an unknown field: the API server does this only with fieldValidation=Strict."""

    @property
    def tenant(self) -> dict[str, Any]:
        return with_changes(minimal_tenant(), self.changes)

    @property
    def pydantic_path(self) -> str:
        return self.offline_path or self.path


SA_OWNER = {"kind": "ServiceAccount", "name": "ci", "namespace": "ci-system"}

INVALID_CASES: list[InvalidCase] = [
    InvalidCase("trust-unknown", {"spec.trust": "Friendly"}, "spec.trust"),
    InvalidCase("owners-empty", {"spec.owners": []}, "spec.owners"),
    InvalidCase("quota-negative", {"spec.gpu": {"quota": -1}}, "spec.gpu.quota"),
    InvalidCase("quota-not-a-number", {"spec.gpu": {"quota": "two"}}, "spec.gpu.quota"),
    InvalidCase("quota-above-maximum", {"spec.gpu": {"quota": 20000}}, "spec.gpu.quota"),
    InvalidCase("limit-below-quota", {"spec.gpu": {"quota": 4, "limit": 2}}, "spec.gpu.limit", message="limit must be at least quota"),
    InvalidCase("over-quota-weight-too-high", {"spec.gpu": {"overQuotaWeight": 1001}}, "spec.gpu.overQuotaWeight"),
    InvalidCase("parent-queue-not-dns-label", {"spec.gpu": {"parentQueue": "Research_Dept"}}, "spec.gpu.parentQueue"),
    InvalidCase("pool-not-dns-label", {"spec.gpu": {"pool": "a100.pool"}}, "spec.gpu.pool"),
    InvalidCase(
        "exclusive-fractional-quota", {"spec.sharing": {"mode": "Exclusive"}, "spec.gpu": {"quota": 1.5}},
        "spec.gpu.quota", message="make gpu.quota a whole number",
    ),
    InvalidCase(
        "exclusive-fractional-limit", {"spec.sharing": {"mode": "Exclusive"}, "spec.gpu": {"quota": 1, "limit": 2.5}},
        "spec.gpu.limit", message="make gpu.limit a whole number",
    ),
    InvalidCase("mig-profile-unknown", {"spec.sharing": {"mode": "MIG", "mig": {"profile": "9g.99gb"}}}, "spec.sharing.mig.profile"),
    InvalidCase(
        "mig-profile-plus-me", {"spec.sharing": {"mode": "MIG", "mig": {"profile": "1g.10gb+me"}}}, "spec.sharing.mig.profile"
    ),
    InvalidCase(
        "untrusted-time-slicing", {"spec.trust": "Untrusted", "spec.sharing": {"mode": "TimeSlicing"}},
        "spec.sharing.mode", message="Untrusted tenants need hardware isolation",
    ),
    InvalidCase(
        "untrusted-hami", {"spec.trust": "Untrusted", "spec.sharing": {"mode": "HAMi"}},
        "spec.sharing.mode", message="Untrusted tenants need hardware isolation",
    ),
    InvalidCase(
        "internal-time-slicing", {"spec.trust": "Internal", "spec.sharing": {"mode": "TimeSlicing"}},
        "spec.sharing.mode", message="Internal tenants need memory isolation",
    ),
    InvalidCase("sharing-mode-unknown", {"spec.sharing": {"mode": "MPS"}}, "spec.sharing.mode"),
    InvalidCase(
        "time-slicing-block-with-mig", {"spec.sharing": {"mode": "MIG", "timeSlicing": {"replicas": 4}}},
        "spec.sharing.timeSlicing", message="timeSlicing parameters apply only to mode TimeSlicing",
    ),
    InvalidCase(
        "hami-block-with-exclusive", {"spec.sharing": {"mode": "Exclusive", "hami": {"corePercent": 50}}},
        "spec.sharing.hami", message="hami parameters apply only to mode HAMi",
    ),
    InvalidCase(
        "mig-block-with-hami", {"spec.trust": "Internal", "spec.sharing": {"mode": "HAMi", "mig": {"profile": "1g.10gb"}}},
        "spec.sharing.mig", message="mig parameters apply only to mode MIG",
    ),
    InvalidCase("time-slicing-one-replica", {"spec.sharing": {"mode": "TimeSlicing", "timeSlicing": {"replicas": 1}}},
                "spec.sharing.timeSlicing.replicas"),
    InvalidCase("hami-core-percent-zero", {"spec.sharing": {"mode": "HAMi", "hami": {"corePercent": 0}}},
                "spec.sharing.hami.corePercent"),
    InvalidCase(
        "service-account-without-namespace", {"spec.owners": [{"kind": "ServiceAccount", "name": "ci"}]},
        "spec.owners[0].namespace", message="a ServiceAccount subject needs its namespace",
    ),
    InvalidCase(
        "user-with-namespace", {"spec.members": [{"kind": "User", "name": "bob", "namespace": "default"}]},
        "spec.members[0].namespace", message="only ServiceAccount subjects have a namespace",
    ),
    InvalidCase(
        "service-account-name-invalid", {"spec.owners": [{**SA_OWNER, "name": "CI_Bot"}]},
        "spec.owners[0].name", message="a ServiceAccount name is a DNS subdomain",
    ),
    InvalidCase("subject-kind-unknown", {"spec.owners": [{"kind": "Robot", "name": "r2"}]}, "spec.owners[0].kind"),
    InvalidCase("member-role-unknown", {"spec.members": [{"kind": "User", "name": "bob", "role": "owner"}]},
                "spec.members[0].role"),
    InvalidCase(
        "owners-duplicate", {"spec.owners": [{"kind": "User", "name": "alice"}, {"kind": "User", "name": "alice"}]},
        "spec.owners[1]", offline_path="spec.owners",
    ),
    InvalidCase(
        "members-duplicate",
        {"spec.members": [{"kind": "Group", "name": "ml", "role": "edit"}, {"kind": "Group", "name": "ml", "role": "view"}]},
        "spec.members[1]", offline_path="spec.members",
    ),
    InvalidCase("quota-cpu-not-quantity", {"spec.quotas": {"cpu": "lots"}}, "spec.quotas.cpu", message="positive Kubernetes quantity"),
    InvalidCase("quota-memory-zero", {"spec.quotas": {"memory": "0"}}, "spec.quotas.memory", message="positive Kubernetes quantity"),
    InvalidCase(
        "vcluster-limit-negative", {"spec.vcluster": {"resources": {"limits": {"memory": "-1Gi"}}}},
        "spec.vcluster.resources.limits.memory", message="positive Kubernetes quantity",
    ),
    InvalidCase(
        "storage-size-bad-suffix", {"spec.vcluster": {"values": {"storageSize": "5GB"}}},
        "spec.vcluster.values.storageSize", message="positive Kubernetes quantity",
    ),
    InvalidCase(
        "limit-range-request-above-limit", {"spec.quotas": {"limitRange": {"defaultCpu": "500m", "defaultRequestCpu": "1"}}},
        "spec.quotas.limitRange.defaultRequestCpu", message="defaultRequestCpu must not exceed defaultCpu",
    ),
    InvalidCase(
        "limit-range-memory-request-above-limit",
        {"spec.quotas": {"limitRange": {"defaultMemory": "512Mi", "defaultRequestMemory": "1Gi"}}},
        "spec.quotas.limitRange.defaultRequestMemory", message="defaultRequestMemory must not exceed defaultMemory",
    ),
    InvalidCase("pods-zero", {"spec.quotas": {"pods": 0}}, "spec.quotas.pods"),
    InvalidCase("token-lifetime-words", {"spec.kubeconfig": {"tokenLifetime": "1 day"}}, "spec.kubeconfig.tokenLifetime",
                message="must be a duration"),
    InvalidCase("token-lifetime-too-short", {"spec.kubeconfig": {"tokenLifetime": "5m"}}, "spec.kubeconfig.tokenLifetime",
                message="between 10m and 8760h"),
    InvalidCase("token-lifetime-too-long", {"spec.kubeconfig": {"tokenLifetime": "9000h"}}, "spec.kubeconfig.tokenLifetime",
                message="between 10m and 8760h"),
    InvalidCase("kubeconfig-roles-duplicate", {"spec.kubeconfig": {"roles": ["admin", "admin"]}}, "spec.kubeconfig.roles[1]",
                offline_path="spec.kubeconfig.roles"),
    InvalidCase("kubeconfig-role-unknown", {"spec.kubeconfig": {"roles": ["edit"]}}, "spec.kubeconfig.roles[0]"),
    InvalidCase("server-url-http", {"spec.vcluster": {"serverURL": "http://team-a.example.com"}}, "spec.vcluster.serverURL",
                message="must be an https URL"),
    InvalidCase("server-url-no-host", {"spec.vcluster": {"serverURL": "https://"}}, "spec.vcluster.serverURL",
                message="must be an https URL"),
    InvalidCase("kubernetes-version-without-v", {"spec.vcluster": {"kubernetesVersion": "1.35.4"}},
                "spec.vcluster.kubernetesVersion"),
    InvalidCase("core-dns-replicas-too-many", {"spec.vcluster": {"values": {"coreDNSReplicas": 5}}},
                "spec.vcluster.values.coreDNSReplicas"),
    InvalidCase("extra-sans-duplicate", {"spec.vcluster": {"extraSANs": ["a.example.com", "a.example.com"]}},
                "spec.vcluster.extraSANs[1]", offline_path="spec.vcluster.extraSANs"),
    InvalidCase("deletion-policy-unknown", {"spec.deletionPolicy": "Orphan"}, "spec.deletionPolicy"),
    InvalidCase("argocd-namespace-invalid", {"spec.argocd": {"namespace": "Argo CD"}}, "spec.argocd.namespace"),
    InvalidCase("name-too-long", {"metadata.name": "a" * 41}, "metadata.name", message="at most 40 characters"),
    InvalidCase("name-not-dns-label", {"metadata.name": "team.a"}, "metadata.name", message="DNS label"),
    InvalidCase("unknown-field-in-spec", {"spec.colour": "blue"}, "spec.colour", unknown_field=True),
    InvalidCase("unknown-field-in-gpu", {"spec.gpu": {"count": 2}}, "spec.gpu.count", unknown_field=True),
    InvalidCase("unknown-field-in-limit-range", {"spec.quotas": {"limitRange": {"defaultGpu": "1"}}},
                "spec.quotas.limitRange.defaultGpu", unknown_field=True),
    InvalidCase("unknown-field-in-owner", {"spec.owners": [{"kind": "User", "name": "alice", "email": "a@example.com"}]},
                "spec.owners[0].email", unknown_field=True),
]


@dataclass(frozen=True)
class ValidCase:
    id: str
    tenant: dict[str, Any] = field(default_factory=minimal_tenant)


VALID_CASES: list[ValidCase] = [
    ValidCase("minimal"),
    ValidCase("trusted-time-slicing", minimal_tenant(
        "team-ts", gpu={"quota": 0.5, "limit": 2}, sharing={"mode": "TimeSlicing", "timeSlicing": {"replicas": 4}},
    )),
    ValidCase("internal-hami", minimal_tenant(
        "team-hami", trust="Internal", gpu={"quota": 2, "limit": 4, "parentQueue": "research", "pool": "a100-hami"},
        sharing={"mode": "HAMi", "hami": {"memoryMiB": 10240, "corePercent": 30}},
        members=[{"kind": "Group", "name": "ml-engineers", "role": "edit"}, {**SA_OWNER, "role": "view"}],
    )),
    ValidCase("untrusted-mig", minimal_tenant(
        "customer-x", trust="Untrusted", owners=[SA_OWNER, {"kind": "Group", "name": "customer-x-admins"}],
        gpu={"quota": 2, "model": "H100-80GB"}, sharing={"mode": "MIG", "mig": {"profile": "3g.40gb"}},
        vcluster={"serverURL": "https://customer-x.gpu.example.com", "extraSANs": ["customer-x.gpu.example.com", "10.0.0.7"],
                  "kubernetesVersion": "v1.35.4", "chartVersion": "0.36.1"},
        kubeconfig={"roles": ["view"], "tokenLifetime": "1h30m"},
    )),
    ValidCase("untrusted-exclusive", minimal_tenant(
        "customer-y", trust="Untrusted", gpu={"quota": 1, "limit": 2.0}, sharing={"mode": "Exclusive"},
        quotas={"cpu": "8", "memory": "32Gi", "limitRange": {"defaultCpu": "500m", "defaultRequestCpu": "500m"}},
        deletionPolicy="Retain", preventDeletion=True,
    )),
    # The rest of the trust matrix (README, docs/trust-levels.md): a trust level may use its weakest
    # allowed mechanism and every stronger one, and Auto always.
    ValidCase("trusted-hami", minimal_tenant("trusted-hami", sharing={"mode": "HAMi"})),
    ValidCase("trusted-mig", minimal_tenant("trusted-mig", sharing={"mode": "MIG"})),
    ValidCase("trusted-exclusive", minimal_tenant("trusted-exclusive", sharing={"mode": "Exclusive"})),
    ValidCase("internal-auto", minimal_tenant("internal-auto", trust="Internal", sharing={"mode": "Auto"})),
    ValidCase("internal-mig", minimal_tenant("internal-mig", trust="Internal", sharing={"mode": "MIG"})),
    ValidCase("internal-exclusive", minimal_tenant("internal-exclusive", trust="Internal", sharing={"mode": "Exclusive"})),
    ValidCase("untrusted-auto", minimal_tenant("untrusted-auto", trust="Untrusted", sharing={"mode": "Auto"})),
]
