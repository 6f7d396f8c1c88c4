"""HAMi-core's caps on an Internal tenant's KAI fraction pods (guard/hami_caps.py): what the guard writes, that
it follows the share, and every way a tenant could fake, lift or reach them refused with a named rule.
Decisions come from `decide` on examples/config.yaml (pool l4-hami: 23034 MiB per GPU), as the guard gets them."""

from __future__ import annotations

import copy
import re
from pathlib import Path

import jsonpatch
import pytest

from gputenant.api.v1alpha1 import GpuTenant
from gputenant.config.models import OperatorConfig
from gputenant.guard import hami_caps
from gputenant.guard.kai_sharing import guard_prefix, with_kai_shape
from gputenant.guard.mutation import mutate_pod
from gputenant.guard.rules import validate_pod
from gputenant.policy.choose import decide

EXAMPLE = OperatorConfig.load(Path(__file__).parents[2] / "examples" / "config.yaml")
GPU_MIB = EXAMPLE.pool("l4-hami").gpu_memory_mi_b


def internal(core_percent: int = 25) -> GpuTenant:
    return GpuTenant.model_validate({"metadata": {"name": "shares"}, "spec": {
        "trust": "Internal", "owners": [{"kind": "User", "name": "dana"}],
        "gpu": {"quota": 2}, "sharing": {"mode": "HAMi", "hami": {"corePercent": core_percent}}}})


def share_pod(fraction: str = "0.25", **container) -> dict:
    return {"metadata": {"name": "p", "namespace": "tenant-shares", "annotations": {"gpu-fraction": fraction}},
            "spec": {"containers": [{"name": "infer", "image": "busybox", **container}]}}


def admitted(pod: dict, model: GpuTenant | None = None) -> tuple[dict, list[tuple[str, str]]]:
    """The pod as the guard's mutation leaves it, and what validation then refuses."""
    model = model or internal()
    decision = decide("shares", model.spec, EXAMPLE)
    assert decision.possible, decision.message
    mutated = jsonpatch.apply_patch(pod, mutate_pod(pod, "shares", decision))
    return mutated, [(v.rule, v.message) for v in validate_pod(mutated, "shares", model.spec.trust, decision)]


def env_of(container: dict) -> dict[str, str]:
    return {v["name"]: v.get("value") for v in container.get("env") or []}


@pytest.mark.parametrize("fraction, sm", [("0.25", "25"), ("0.5", "50"), ("0.75", "75")])
def test_each_share_is_capped_at_its_portion_of_the_pools_gpu(fraction, sm):
    mutated, refused = admitted(share_pod(fraction))
    assert refused == []
    env = env_of(mutated["spec"]["containers"][0])
    memory = int(env[hami_caps.MEMORY_LIMIT].removesuffix("m"))
    assert abs(memory - GPU_MIB * float(fraction)) <= GPU_MIB * float(fraction) * 0.01
    assert env[hami_caps.SM_LIMIT] == sm
    assert env[hami_caps.SHARED_CACHE] == hami_caps.CACHE_FILE


def test_cap_values_are_plain_decimals_that_hami_core_cannot_read_as_octal_or_no_limit():
    """HAMi-core parses with strtoul(value, 0): a leading 0 is octal, 0 means no limit."""
    mutated, _ = admitted(share_pod("0.25"))
    env = env_of(mutated["spec"]["containers"][0])
    assert re.fullmatch(r"[1-9][0-9]*m", env[hami_caps.MEMORY_LIMIT])
    assert re.fullmatch(r"[1-9][0-9]*", env[hami_caps.SM_LIMIT])


def test_the_library_is_preloaded_read_only_from_the_pods_own_volume_and_never_a_host_path():
    mutated, _ = admitted(share_pod("0.5"))
    spec = mutated["spec"]
    mounts = {m["mountPath"]: m for m in spec["containers"][0]["volumeMounts"]}
    for path in (hami_caps.PRELOAD, hami_caps.LIBRARY_DIR, hami_caps.OVERRIDE_ENV_FILE):
        assert mounts[path]["readOnly"] is True and mounts[path]["name"] == hami_caps.LIBRARY_VOLUME
    assert [c["name"] for c in spec["initContainers"]] == [hami_caps.INIT_CONTAINER]
    init = spec["initContainers"][0]
    assert init["image"] == EXAMPLE.pool("l4-hami").hami_settings().library.image
    assert init["securityContext"]["runAsNonRoot"] is True
    assert env_of(init)["NVIDIA_VISIBLE_DEVICES"] == "void"
    assert all("hostPath" not in volume for volume in spec["volumes"])
    assert {v["name"]: v for v in spec["volumes"]}[hami_caps.LIBRARY_VOLUME]["emptyDir"]


def test_mutation_is_idempotent_and_survives_kais_own_admission():
    """The API server may call the guard again after KAI's webhook has added its env and envFrom."""
    model = internal()
    decision = decide("shares", model.spec, EXAMPLE)
    pod = share_pod("0.25")
    once = jsonpatch.apply_patch(pod, mutate_pod(pod, "shares", decision))
    after_kai = with_kai_shape(once, guard_prefix(once) or "")
    assert mutate_pod(after_kai, "shares", decision) == []
    assert validate_pod(after_kai, "shares", model.spec.trust, decision) == []


def test_the_guards_init_container_goes_first_and_tenant_init_containers_are_blinded():
    pod = share_pod("0.25")
    pod["spec"]["initContainers"] = [{"name": "fetch", "image": "busybox"}]
    mutated, refused = admitted(pod)
    assert refused == []
    assert [c["name"] for c in mutated["spec"]["initContainers"]] == [hami_caps.INIT_CONTAINER, "fetch"]
    assert env_of(mutated["spec"]["initContainers"][1])["NVIDIA_VISIBLE_DEVICES"] == "void"


def test_a_sidecar_of_a_capped_pod_is_blinded_not_capped():
    pod = share_pod("0.25")
    pod["spec"]["containers"].append({"name": "log", "image": "busybox"})
    mutated, refused = admitted(pod)
    assert refused == []
    assert env_of(mutated["spec"]["containers"][1]) == {"NVIDIA_VISIBLE_DEVICES": "void"}


def test_the_caps_follow_the_share_on_update():
    """A pod's env cannot change after creation and its fraction may not: an update whose share no longer
    matches the stored caps is refused by hami-caps, beside fraction-annotation."""
    model = internal()
    decision = decide("shares", model.spec, EXAMPLE)
    old = jsonpatch.apply_patch(share_pod("0.25"), mutate_pod(share_pod("0.25"), "shares", decision))
    new = copy.deepcopy(old)
    new["metadata"]["annotations"]["gpu-fraction"] = "0.5"
    rules = {v.rule for v in validate_pod(new, "shares", model.spec.trust, decision, operation="UPDATE", old=old)}
    assert {"fraction-annotation", "hami-caps"} <= rules


ATTACKS = [
    ("a higher memory cap", dict(env=[{"name": "CUDA_DEVICE_MEMORY_LIMIT", "value": "23034m"}]), "hami-caps"),
    ("no memory cap", dict(env=[{"name": "CUDA_DEVICE_MEMORY_LIMIT", "value": "0"}]), "hami-caps"),
    ("an octal cap", dict(env=[{"name": "CUDA_DEVICE_MEMORY_LIMIT", "value": "05758m"}]), "hami-caps"),
    ("the cap from a ConfigMap", dict(env=[{"name": "CUDA_DEVICE_MEMORY_LIMIT",
                                            "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}}}]), "hami-caps"),
    ("a per-device memory cap", dict(env=[{"name": "CUDA_DEVICE_MEMORY_LIMIT_0", "value": "0"}]), "isolation-env"),
    ("a per-device SM cap", dict(env=[{"name": "CUDA_DEVICE_SM_LIMIT_0", "value": "100"}]), "isolation-env"),
    ("its own compute cap", dict(env=[{"name": "CUDA_DEVICE_SM_LIMIT", "value": "100"}]), "hami-caps"),
    ("its own shared region", dict(env=[{"name": "CUDA_DEVICE_MEMORY_SHARED_CACHE", "value": "/tmp/x"}]), "hami-caps"),
    ("compute limiting off", dict(env=[{"name": "GPU_CORE_UTILIZATION_POLICY", "value": "disable"}]), "isolation-env"),
    ("HAMi-core switched off", dict(env=[{"name": "CUDA_DISABLE_CONTROL", "value": "true"}]), "isolation-env"),
    ("another library first", dict(env=[{"name": "LD_PRELOAD", "value": "/app/fake.so"}]), "isolation-env"),
    ("another HAMi-core", dict(env=[{"name": "CUDA_REDIRECT", "value": "/app/libvgpu.so"}]), "isolation-env"),
    ("the kernel recorder", dict(env=[{"name": "RECORD_KERNEL_INTERVAL", "value": "0"}]), "isolation-env"),
    ("a subset of devices (HAMi-core#319)", dict(env=[{"name": "CUDA_VISIBLE_DEVICES", "value": "0"}]), "hami-caps"),
    ("variables from a ConfigMap", dict(envFrom=[{"configMapRef": {"name": "overrides"}}]), "env-from"),
    ("its own preload list", dict(volumeMounts=[{"name": "v", "mountPath": "/etc/ld.so.preload", "subPath": "p"}]),
     "hami-preload"),
    ("its own /etc", dict(volumeMounts=[{"name": "v", "mountPath": "/etc"}]), "hami-preload"),
    ("its own library", dict(volumeMounts=[{"name": "v", "mountPath": "/usr/local/vgpu/libvgpu.so", "subPath": "l"}]),
     "hami-preload"),
    ("its own override file", dict(volumeMounts=[{"name": "v", "mountPath": "/overrideEnv", "subPath": "o"}]),
     "hami-preload"),
    ("a prepared shared region", dict(volumeMounts=[{"name": "v", "mountPath": "/run/gputenant-hami"}]), "hami-preload"),
]


@pytest.mark.parametrize("what, container, rule", ATTACKS, ids=[a[0] for a in ATTACKS])
def test_a_tenant_cannot_lift_or_fake_the_caps(what, container, rule):
    pod = share_pod("0.25", **container)
    if container.get("volumeMounts"):
        pod["spec"]["volumes"] = [{"name": "v", "emptyDir": {}}]
    _, refused = admitted(pod)
    assert rule in {r for r, _ in refused}, refused
    assert all(message for _, message in refused)


def test_a_tenants_look_alike_init_container_is_refused():
    """Same name as the guard's, another image: the guard leaves it (never overwrites) and validation refuses."""
    pod = share_pod("0.25")
    pod["spec"]["initContainers"] = [{"name": hami_caps.INIT_CONTAINER, "image": "evil/libvgpu-noop"}]
    _, refused = admitted(pod)
    assert ("hami-caps" in {r for r, _ in refused}
            and any("only the guard's own init container" in m for _, m in refused))


@pytest.mark.parametrize("volume", [{"name": hami_caps.LIBRARY_VOLUME, "hostPath": {"path": "/tmp/evil"}},
                                    {"name": "gputenant-hami-extra", "emptyDir": {}}])
def test_a_tenant_volume_under_the_guards_names_is_refused(volume):
    pod = share_pod("0.25")
    pod["spec"]["volumes"] = [volume]
    _, refused = admitted(pod)
    assert any(rule == "hami-caps" and volume["name"] in message for rule, message in refused)


def test_a_sidecar_or_debug_container_cannot_reach_the_shared_region():
    model = internal()
    decision = decide("shares", model.spec, EXAMPLE)
    pod = share_pod("0.25")
    pod["spec"]["containers"].append({"name": "spy", "image": "busybox",
                                      "volumeMounts": [{"name": hami_caps.CACHE_VOLUME, "mountPath": "/x"}]})
    _, refused = admitted(pod)
    assert any(rule == "hami-caps" and "spy" in message for rule, message in refused)
    created = jsonpatch.apply_patch(share_pod("0.25"), mutate_pod(share_pod("0.25"), "shares", decision))
    debug = copy.deepcopy(created)
    debug["spec"]["ephemeralContainers"] = [{"name": "dbg", "image": "busybox",
                                             "volumeMounts": [{"name": hami_caps.CACHE_VOLUME, "mountPath": "/x"}]}]
    found = validate_pod(debug, "shares", model.spec.trust, decision, operation="UPDATE", old=created)
    assert any(v.rule == "hami-caps" and "dbg" in v.message for v in found)


def test_the_isolators_opt_out_annotation_is_refused():
    pod = share_pod("0.25")
    pod["metadata"]["annotations"]["kai-resource-isolator.io/inject"] = "false"
    _, refused = admitted(pod)
    assert "scheduler-key" in {r for r, _ in refused}


@pytest.mark.parametrize("spec", [
    {"trust": "Trusted", "sharing": {"mode": "TimeSlicing"}},
    {"trust": "Untrusted", "sharing": {"mode": "MIG"}},
    {"trust": "Internal", "sharing": {"mode": "Exclusive"}},
])
def test_time_slicing_mig_and_whole_gpu_pods_get_no_hami_caps(spec):
    model = GpuTenant.model_validate({"metadata": {"name": "t"}, "spec": {
        "owners": [{"kind": "User", "name": "dana"}], "gpu": {"quota": 1}, **spec}})
    decision = decide("t", model.spec, EXAMPLE)
    assert decision.possible, decision.message
    pod = share_pod("0.25") if spec["trust"] == "Trusted" else share_pod(resources={"limits": {
        next(iter(decision.pod_rules.gpu_resources)): "1"}})
    if spec["trust"] != "Trusted":
        pod["metadata"]["annotations"] = {}
    mutated = jsonpatch.apply_patch(pod, mutate_pod(pod, "t", decision))
    assert not set(env_of(mutated["spec"]["containers"][0])) & set(hami_caps.CAP_VARIABLES)
    assert "initContainers" not in mutated["spec"] and "volumes" not in mutated["spec"]


def test_a_pool_names_where_its_library_comes_from():
    library = EXAMPLE.pool("l4-hami").hami_settings().library
    init = hami_caps.init_container(library)
    assert init["command"][-1] == library.path
    assert init["terminationMessagePolicy"] == "FallbackToLogsOnError", "a failed copy's reason reaches the status"
    with pytest.raises(ValueError, match="path"):
        OperatorConfig.model_validate({"pools": [{"name": "h", "mode": "HAMi", "gpuModel": "L4", "gpuMemoryMiB": 1,
                                                  "hami": {"library": {"path": "lib; rm -rf /"}}}]})


def test_the_guards_init_container_is_recognised_as_the_api_server_stores_it():
    """After the guard's mutation the API server defaults the termination message fields and reinvokes the
    ServiceAccount plugin, which mounts the pod's token; anything else added makes it a look-alike."""
    model = internal()
    decision = decide("shares", model.spec, EXAMPLE)
    pod = share_pod("0.25")
    stored = jsonpatch.apply_patch(pod, mutate_pod(pod, "shares", decision))
    init = stored["spec"]["initContainers"][0]
    init.update(terminationMessagePath="/dev/termination-log")  # its terminationMessagePolicy is the guard's
    init["volumeMounts"].append({"name": "kube-api-access-x", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
                                 "readOnly": True})
    assert validate_pod(stored, "shares", model.spec.trust, decision) == []
    init["volumeMounts"].append({"name": "data", "mountPath": "/data"})
    assert "hami-caps" in {v.rule for v in validate_pod(stored, "shares", model.spec.trust, decision)}


TOKEN_MOUNT = {"name": "kube-api-access-r6gbs", "mountPath": hami_caps.SERVICE_ACCOUNT_TOKEN_PATH, "readOnly": True}
TOKEN_VOLUME = {"name": "kube-api-access-r6gbs", "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]}}


def with_token(pod: dict, mount: dict = TOKEN_MOUNT, volume: dict = TOKEN_VOLUME, **spec) -> dict:
    """The pod as the webhooks receive it: the ServiceAccount plugin has mounted its token in every container."""
    pod = copy.deepcopy(pod)
    pod["spec"].update(volumes=[volume], **spec)
    for container in pod["spec"]["containers"]:
        container["volumeMounts"] = [mount]
    return pod


def test_the_guards_init_container_carries_the_token_mount_the_plugin_would_add_so_no_reinvocation():
    """The ServiceAccount plugin's second pass finds the init container already mounted, changes nothing, and
    the API server does not call the mutating webhook again (e2e: test_guard_admission.py counts the calls)."""
    mutated, refused = admitted(with_token(share_pod("0.25")))
    assert refused == []
    init = mutated["spec"]["initContainers"][0]
    assert init["volumeMounts"] == [{"name": hami_caps.LIBRARY_VOLUME, "mountPath": hami_caps.STAGING}, TOKEN_MOUNT]


@pytest.mark.parametrize("pod", [
    share_pod("0.25"),
    with_token(share_pod("0.25"), automountServiceAccountToken=False),
    with_token(share_pod("0.25"), volume={"name": "kube-api-access-r6gbs", "hostPath": {"path": "/"}}),
    with_token(share_pod("0.25"), mount={**TOKEN_MOUNT, "readOnly": False}),
    with_token(share_pod("0.25"), mount={**TOKEN_MOUNT, "subPath": "token"}),
    with_token(share_pod("0.25"), mount={**TOKEN_MOUNT, "name": "data"}, volume={**TOKEN_VOLUME, "name": "data"}),
], ids=["no-token", "automount-off", "not-projected", "writable", "sub-path", "not-the-plugins-volume"])
def test_the_init_container_gets_no_mount_the_plugin_would_not_have_added(pod):
    mutated, _ = admitted(pod)
    assert mutated["spec"]["initContainers"][0]["volumeMounts"] == [
        {"name": hami_caps.LIBRARY_VOLUME, "mountPath": hami_caps.STAGING}]
