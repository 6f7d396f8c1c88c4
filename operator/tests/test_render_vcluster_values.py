"""Unit tests of the vCluster values a tenant renders to: valid against the upstream chart's schema
(vCluster 0.36.1), KAI-compatible sync, placement left to the guard, a non-root control plane with
limits, overrides reaching the chart, deterministic output."""

from __future__ import annotations

import jsonschema
import pytest
from pydantic import ValidationError
from test_render import CONFIG, TRUST_OF_MODE, decision, tenant, upstream_schema  # noqa: F401 (fixture)

from gputenant.api.v1alpha1 import SharingMode
from gputenant.render import RenderError, render_tenant


@pytest.mark.parametrize("mode", [SharingMode.TIME_SLICING, SharingMode.HAMI, SharingMode.MIG])
def test_values_validate_against_the_upstream_schema(mode, upstream_schema):  # noqa: F811
    spec = {"vcluster": {"kubernetesVersion": "v1.35.4", "serverURL": "https://a.example.com",
                         "extraSANs": ["a.internal"],
                         "values": {"syncIngresses": True, "storageClass": "fast", "storageSize": "20Gi",
                                    "coreDNSReplicas": 2}}}
    trust = TRUST_OF_MODE[mode]
    values = render_tenant(tenant(trust=trust, **spec), decision(mode), CONFIG).vcluster_values
    jsonschema.validate(values, upstream_schema)


def test_service_account_tokens_stay_out_of_pod_annotations(upstream_schema):  # noqa: F811
    """vCluster keeps synced pods' tokens in a pod annotation unless useSecretsForSATokens is set."""
    values = render_tenant(tenant(), decision(SharingMode.MIG), CONFIG).vcluster_values
    assert values["sync"]["toHost"]["pods"]["useSecretsForSATokens"] is True
    pods_schema = upstream_schema["$defs"]["SyncPods"]["properties"]
    assert pods_schema["useSecretsForSATokens"]["type"] == "boolean"
    jsonschema.validate(values, upstream_schema)


def test_values_of_a_tenant_without_gpus_validate(upstream_schema):  # noqa: F811
    no_pool = decision(SharingMode.MIG, mode=None, pool=None, quota={"requests.nvidia.com/gpu": "0"})
    values = render_tenant(tenant(), no_pool, CONFIG).vcluster_values
    jsonschema.validate(values, upstream_schema)


def test_schema_check_catches_an_unknown_key(upstream_schema):  # noqa: F811
    """The upstream schema is strict (additionalProperties: false), so the checks above can fail."""
    values = render_tenant(tenant(), decision(SharingMode.MIG), CONFIG).vcluster_values
    values["controlPlane"]["statefulSet"]["securityContext"] = {}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(values, upstream_schema)


def test_values_keep_kai_compatible_sync_and_leave_placement_to_the_guard():
    """vCluster 0.36 forces sync.fromHost.nodes.selector.labels and enforceTolerations onto every
    synced pod (CoreDNS and CPU pods included), so the values set neither; the guard places pods."""
    values = render_tenant(tenant(), decision(SharingMode.MIG), CONFIG).vcluster_values
    assert values["experimental"]["syncSettings"]["setOwner"] is False
    assert values["sync"]["toHost"]["priorityClasses"]["enabled"] is False
    assert values["sync"]["fromHost"] == {"configMaps": {"enabled": True, "mappings": {"byName": {
        "tenant-team-a/gputenant-view": "kube-public/gputenant"}}}}, "only the tenant's own view, nothing else"
    assert values["rbac"] == {"clusterRole": {"enabled": False}}
    assert "enforceTolerations" not in values["sync"]["toHost"]["pods"]
    assert "pro" not in values and "sleep" not in values and "platform" not in values


def test_values_expose_the_api_in_cluster_and_sign_every_name():
    spec = {"vcluster": {"serverURL": "https://team-a.gpu.example.com:6443", "extraSANs": ["10.1.2.3", "team-a.gpu.example.com"]}}
    values = render_tenant(tenant(**spec), decision(SharingMode.MIG), CONFIG).vcluster_values
    assert values["exportKubeConfig"]["server"] == "https://team-a.tenant-team-a.svc:443"
    assert values["controlPlane"]["proxy"]["extraSANs"] == [
        "team-a.tenant-team-a.svc", "team-a.gpu.example.com", "10.1.2.3"]


def test_values_run_the_control_plane_non_root_with_limits():
    spec = {"vcluster": {"resources": {"requests": {"cpu": "300m", "memory": "512Mi"},
                                       "limits": {"cpu": "3", "memory": "3Gi"}}}}
    control_plane = render_tenant(tenant(**spec), decision(SharingMode.MIG), CONFIG).vcluster_values["controlPlane"]
    statefulset = control_plane["statefulSet"]
    assert statefulset["resources"] == {"requests": {"cpu": "300m", "memory": "512Mi"},
                                        "limits": {"cpu": "3", "memory": "3Gi"}}
    container = statefulset["security"]["containerSecurityContext"]
    assert container["runAsUser"] != 0 and container["runAsGroup"] != 0 and container["runAsNonRoot"] is True
    assert container["allowPrivilegeEscalation"] is False
    assert container["capabilities"] == {"drop": ["ALL"]}
    assert statefulset["security"]["podSecurityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert control_plane["distro"]["k8s"]["securityContext"] == container
    assert set(control_plane["distro"]["k8s"]["resources"]["limits"]) == {"cpu", "memory"}


def test_missing_control_plane_limit_is_refused():
    spec = {"vcluster": {"resources": {"limits": {"memory": "2Gi"}}}}
    with pytest.raises(RenderError, match=r"^spec\.vcluster\.resources\.limits\.cpu: required"):
        render_tenant(tenant(**spec), decision(SharingMode.MIG), CONFIG)


def test_request_above_limit_is_refused_by_the_model_as_by_the_crd():
    """The CRD's CEL rule and its Python twin refuse it before anything is rendered (issue 17)."""
    spec = {"vcluster": {"resources": {"requests": {"cpu": "4", "memory": "1Gi"},
                                       "limits": {"cpu": "2", "memory": "2Gi"}}}}
    with pytest.raises(ValidationError, match=r"requests\.cpu must not exceed limits\.cpu"):
        tenant(**spec)


def test_overrides_and_kubernetes_version_reach_the_values():
    spec = {"vcluster": {"kubernetesVersion": "v1.34.2",
                         "values": {"syncIngresses": True, "storageSize": "20Gi", "storageClass": "fast",
                                    "coreDNSReplicas": 3}}}
    values = render_tenant(tenant(**spec), decision(SharingMode.MIG), CONFIG).vcluster_values
    assert values["controlPlane"]["distro"]["k8s"]["version"] == "v1.34.2"
    assert values["controlPlane"]["statefulSet"]["persistence"]["volumeClaim"] == {"size": "20Gi", "storageClass": "fast"}
    assert values["controlPlane"]["coredns"]["deployment"]["replicas"] == 3
    assert values["sync"]["toHost"]["ingresses"]["enabled"] is True


def test_defaults_leave_out_optional_values():
    values = render_tenant(tenant(), decision(SharingMode.MIG), CONFIG).vcluster_values
    assert "version" not in values["controlPlane"]["distro"]["k8s"]
    assert values["controlPlane"]["statefulSet"]["persistence"]["volumeClaim"] == {"size": "5Gi"}


def test_rendering_is_deterministic():
    first = render_tenant(tenant(), decision(SharingMode.MIG), CONFIG)
    second = render_tenant(tenant(), decision(SharingMode.MIG), CONFIG)
    assert first == second
