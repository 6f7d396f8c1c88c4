"""No address taking: what a tenant's Service may say on the host (pure; the webhook is
``service_reviews``).

vCluster syncs a tenant's Services into its host namespace, written by the syncer's ServiceAccount,
and the node routes whatever address a Service claims: ``spec.externalIPs`` (any address, another
tenant's load-balancer address included: the class of CVE-2020-8554), ``spec.loadBalancerIP`` and
the annotations a load-balancer implementation reads to pick or share an address, and
``status.loadBalancer.ingress`` (kube-proxy routes it too). A tenant's Service may claim none of
them: an allow-list of spec fields, no address field set, no annotation of a load-balancer
implementation's domain, and no status write of its own. Its LoadBalancer Services (as far as its
ResourceQuota allows any) get an address from the implementation's default pool, which the
platform team restricts per namespace (docs/threat-model.md, "The network"). Platform writers (the
operator's Helm release, MetalLB writing status) are not tenants and are not judged here.
"""

from __future__ import annotations

SERVICE_SPEC_FIELDS = frozenset({
    "allocateLoadBalancerNodePorts", "clusterIP", "clusterIPs", "externalIPs", "externalName",
    "externalTrafficPolicy", "healthCheckNodePort", "internalTrafficPolicy", "ipFamilies", "ipFamilyPolicy",
    "loadBalancerClass", "loadBalancerIP", "loadBalancerSourceRanges", "ports", "publishNotReadyAddresses",
    "selector", "sessionAffinity", "sessionAffinityConfig", "trafficDistribution", "type",
})
"""Service spec fields the rules below account for; one a newer Kubernetes adds is refused until
a rule has looked at it."""
ADDRESS_FIELDS = ("externalIPs", "loadBalancerIP", "loadBalancerClass")
"""Spec fields that claim an address, or pick the implementation that reads the address annotations."""
ADDRESS_ANNOTATION_DOMAINS = (
    "metallb.universe.tf", "metallb.io", "kube-vip.io", "lbipam.cilium.io", "io.cilium",
    "projectcalico.org", "service.beta.kubernetes.io", "loadbalancer.openstack.org", "networking.gke.io", "cloud.google.com", "oci.oraclecloud.com",
    "purelb.io", "openelb.kubesphere.io", "eip.openelb.kubesphere.io",
)
"""Annotation domains (and their subdomains) of load-balancer implementations and cloud providers:
their keys request, pin, share or pool addresses."""


def _address_domain(key: str) -> str | None:
    """The load-balancer domain an annotation key belongs to, or None."""
    if "/" not in key:
        return None
    domain = key.split("/", 1)[0]
    return next((d for d in ADDRESS_ANNOTATION_DOMAINS if domain == d or domain.endswith(f".{d}")), None)


def service_problems(service: dict) -> list[str]:
    """Why a tenant may not store this Service (spec and metadata), each naming the field and the fix."""
    spec = service.get("spec") or {}
    problems = [f"spec.{name} is not reviewed by the admission guard yet (remove it)"
                for name in sorted(set(spec) - SERVICE_SPEC_FIELDS)]
    for name in ADDRESS_FIELDS:
        if spec.get(name):
            problems.append(f"spec.{name} {spec[name]} claims an address or its implementation for the tenant; "
                            f"addresses are the platform's to give (remove spec.{name})")
    annotations = (service.get("metadata") or {}).get("annotations") or {}
    for key in sorted(annotations):
        if _address_domain(key):
            problems.append(f"annotation {key} asks the load balancer for an address, a pool or a shared address; "
                            "addresses are the platform's to give (remove the annotation)")
    return problems


def status_problems(service: dict, old: dict | None) -> list[str]:
    """Why a tenant may not write this Service status: the load-balancer addresses are the
    implementation's to report, and kube-proxy routes them."""
    ingress = ((service.get("status") or {}).get("loadBalancer") or {}).get("ingress")
    before = (((old or {}).get("status") or {}).get("loadBalancer") or {}).get("ingress")
    if ingress == before:
        return []
    return ["status.loadBalancer.ingress is written by the platform's load balancer, and the node routes its "
            "addresses to the Service; a tenant may not set it (leave status.loadBalancer as it is)"]


def refusal(service: dict, old: dict | None, subresource: str | None) -> list[str]:
    """What a tenant's request breaks; on UPDATE only what the old object did not already break (a
    Service stored before these rules can still have its other fields updated)."""
    if subresource == "status":
        return status_problems(service, old)
    found = service_problems(service)
    if old is None:
        return found
    before = set(service_problems(old))
    return [problem for problem in found if problem not in before]
