"""Values for the loft-sh/vcluster chart (v0.36 schema), one document per tenant.

The control plane runs in the tenant's own host namespace, so its pods must pass that
namespace's admission: Pod Security (restricted for Untrusted tenants) and the ResourceQuota,
which rejects containers without CPU/memory limits (loft-sh/vcluster#1746). The chart's default
runs the syncer as root; these values run every container of the chart non-root with limits.
"""

from __future__ import annotations

import hashlib
from urllib.parse import urlparse

from gputenant import naming
from gputenant.api.hub import GpuTenant, VClusterOIDC
from gputenant.config.models import ExposureType, OperatorConfig, VClusterExposure
from gputenant.policy.decision import Decision
from gputenant.render.errors import RenderError
from gputenant.render.podsecurity import pod_security_level
from gputenant.render.quantities import quantity
from gputenant.render.templates import render_documents
from gputenant.render.tenant_view import VIEW_CONFIGMAP
from gputenant.render.tenant_view import VIRTUAL_NAME as VIEW_VIRTUAL_NAME
from gputenant.render.tenant_view import VIRTUAL_NAMESPACE as VIEW_VIRTUAL_NAMESPACE

CONTROL_PLANE_UID = 12345
"""Non-root user and group of the chart's containers (any non-zero id works; the data volume is
made writable through fsGroup)."""

POD_SECURITY_CONTEXT = {
    "runAsNonRoot": True,
    "runAsUser": CONTROL_PLANE_UID,
    "runAsGroup": CONTROL_PLANE_UID,
    "fsGroup": CONTROL_PLANE_UID,
    "seccompProfile": {"type": "RuntimeDefault"},
}
CONTAINER_SECURITY_CONTEXT = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "runAsNonRoot": True,
    "runAsUser": CONTROL_PLANE_UID,
    "runAsGroup": CONTROL_PLANE_UID,
    "seccompProfile": {"type": "RuntimeDefault"},
}
"""Sets runAsUser and runAsGroup explicitly: Helm merges values into the chart's defaults, whose
``runAsUser: 0`` would otherwise survive."""

DISTRO_INIT_RESOURCES = {
    "requests": {"cpu": "40m", "memory": "64Mi"},
    "limits": {"cpu": "100m", "memory": "256Mi"},
}
"""The chart's own defaults for the binaries-copying init container, stated so the quota check
does not depend on a chart version's defaults."""

ASLEEP_REPLICAS = 0
"""The chart's ``controlPlane.statefulSet.highAvailability.replicas`` while the tenant sleeps. A value
of the release, not a scale through the API: Helm's three-way merge would put a scaled StatefulSet
back to the chart's 1 replica at the next upgrade. Awake tenants keep the chart's default, so their
values (and values hash) are what they were before sleep existed."""

OIDC_CA_DIRECTORY = "/etc/gputenant/oidc"
OIDC_CA_KEY = "ca.crt"
OIDC_CA_VOLUME = "gputenant-oidc-ca"
OIDC_CA_HASH_ANNOTATION = "checksum/gputenant-oidc-ca"
"""On the control-plane pods: the API server reads --oidc-ca-file once, at start, so a new caBundle
must roll the pod; the hash in the pod template makes the chart upgrade do that. Helm's checksum/
idiom, not gputenant.io/: the admission guard refuses the operator's keys on a tenant namespace's pods."""


def oidc_api_server_args(oidc: VClusterOIDC) -> list[str]:
    """The kube-apiserver flags that make it accept the issuer's ID tokens (every value explicit,
    so no default of the API server's version decides the names tenants are bound by)."""
    args = [
        f"--oidc-issuer-url={oidc.issuer_url}",
        f"--oidc-client-id={oidc.client_id}",
        f"--oidc-username-claim={oidc.username_claim}",
        f"--oidc-username-prefix={oidc.username_prefix}",
        f"--oidc-groups-claim={oidc.groups_claim}",
        f"--oidc-groups-prefix={oidc.groups_prefix}",
        f"--oidc-signing-algs={','.join(alg.value for alg in oidc.signing_algs)}",
    ]
    if oidc.ca_bundle:
        args.append(f"--oidc-ca-file={OIDC_CA_DIRECTORY}/{OIDC_CA_KEY}")
    return args


def oidc_ca_configmap(tenant: GpuTenant, namespace: str) -> dict | None:
    """The ConfigMap in the host namespace the control-plane pod mounts the issuer's CA from; None
    without a caBundle. Only the operator writes it: owners and members may not write ConfigMaps there."""
    oidc = tenant.spec.vcluster.oidc
    if oidc is None or not oidc.ca_bundle:
        return None
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": naming.OIDC_CA_CONFIGMAP, "namespace": namespace,
                         "labels": naming.tenant_labels(tenant.name, "oidc")},
            "data": {OIDC_CA_KEY: oidc.ca_bundle}}


def _oidc_values(oidc: VClusterOIDC | None) -> dict:
    """Template arguments for spec.vcluster.oidc: API server flags and, with a caBundle, its volume."""
    if oidc is None:
        return {"api_server_args": [], "add_volumes": [], "add_volume_mounts": [], "pod_annotations": {}}
    if not oidc.ca_bundle:
        return {"api_server_args": oidc_api_server_args(oidc), "add_volumes": [], "add_volume_mounts": [],
                "pod_annotations": {}}
    return {
        "api_server_args": oidc_api_server_args(oidc),
        "add_volumes": [{"name": OIDC_CA_VOLUME, "configMap": {"name": naming.OIDC_CA_CONFIGMAP}}],
        "add_volume_mounts": [{"name": OIDC_CA_VOLUME, "mountPath": OIDC_CA_DIRECTORY, "readOnly": True}],
        "pod_annotations": {OIDC_CA_HASH_ANNOTATION: hashlib.sha256(oidc.ca_bundle.encode()).hexdigest()},
    }


def _resources(tenant: GpuTenant) -> dict:
    """Control-plane container resources; both limits are required to pass the namespace quota."""
    resources = tenant.spec.vcluster.resources
    rendered: dict[str, dict[str, str]] = {"requests": {}, "limits": {}}
    for kind in ("requests", "limits"):
        amounts = getattr(resources, kind)
        for resource in ("cpu", "memory"):
            value = getattr(amounts, resource)
            path = f"spec.vcluster.resources.{kind}.{resource}"
            if value is None:
                if kind == "limits":
                    raise RenderError(f"{path}: required; the host namespace's ResourceQuota rejects "
                                      "a control plane without CPU and memory limits")
                continue
            rendered[kind][resource] = value
    for resource, request in rendered["requests"].items():
        limit = rendered["limits"][resource]
        requested = quantity(request, f"spec.vcluster.resources.requests.{resource}")
        if requested > quantity(limit, f"spec.vcluster.resources.limits.{resource}"):
            raise RenderError(f"spec.vcluster.resources.requests.{resource}: {request} is above the limit "
                              f"{limit}; lower the request or raise spec.vcluster.resources.limits.{resource}")
    return rendered


def extra_sans(tenant: GpuTenant, config: OperatorConfig) -> list[str]:
    """Names the API server's certificate needs beyond vCluster's own defaults: the in-cluster
    ``<release>.<ns>.svc``, the exposure address clients outside the cluster dial, the serverURL
    host tenants dial, and spec.extraSANs."""
    vcluster = tenant.spec.vcluster
    urls = [naming.vcluster_in_cluster_server(tenant.name, config)]
    if vcluster.server_url:
        urls.append(str(vcluster.server_url))
    hosts = [host for host in (urlparse(url).hostname for url in urls) if host]
    exposed = [config.vcluster.exposure.address] if config.vcluster.exposure.address else []
    return list(dict.fromkeys(hosts[:1] + exposed + hosts[1:] + vcluster.extra_sans))


def service_values(exposure: VClusterExposure) -> dict | None:
    """The chart's controlPlane.service for the exposure; None for ClusterIP (the chart's default).
    A LoadBalancer's fixed address is requested by spec.loadBalancerIP, which implementations
    still honour (MetalLB does)."""
    if exposure.type is ExposureType.CLUSTER_IP:
        return None
    spec: dict[str, str] = {"type": exposure.type.value}
    if exposure.type is ExposureType.LOAD_BALANCER:
        if exposure.load_balancer_class:
            spec["loadBalancerClass"] = exposure.load_balancer_class
        if exposure.address:
            spec["loadBalancerIP"] = exposure.address
    service: dict = {"spec": spec}
    if exposure.annotations:
        service["annotations"] = dict(exposure.annotations)
    return service


def render_vcluster_values(tenant: GpuTenant, decision: Decision, config: OperatorConfig) -> dict:
    """The values document for a possible decision. It places no pod: the admission guard pins
    GPU pods to the tenant's pool and the others to the CPU pool, which vCluster's one node
    selector for every synced pod could not."""
    vcluster = tenant.spec.vcluster
    [values] = render_documents(
        "vcluster-values.yaml",
        kubernetes_version=vcluster.kubernetes_version,
        pod_security_context=POD_SECURITY_CONTEXT,
        container_security_context=CONTAINER_SECURITY_CONTEXT,
        distro_init_resources=DISTRO_INIT_RESOURCES,
        control_plane_resources=_resources(tenant),
        storage_size=vcluster.values.storage_size,
        storage_class=vcluster.values.storage_class,
        extra_sans=extra_sans(tenant, config),
        coredns_replicas=vcluster.values.core_dns_replicas,
        in_cluster_server=naming.vcluster_in_cluster_server(tenant.name, config),
        service=service_values(config.vcluster.exposure),
        sync_ingresses=vcluster.values.sync_ingresses,
        pod_security_standard=pod_security_level(tenant.spec.trust),
        view_mappings={f"{naming.host_namespace(tenant.name, config)}/{VIEW_CONFIGMAP}":
                       f"{VIEW_VIRTUAL_NAMESPACE}/{VIEW_VIRTUAL_NAME}"},
        **_oidc_values(vcluster.oidc),
    )
    if tenant.spec.sleep.asleep:
        values["controlPlane"]["statefulSet"]["highAvailability"] = {"replicas": ASLEEP_REPLICAS}
    return values
