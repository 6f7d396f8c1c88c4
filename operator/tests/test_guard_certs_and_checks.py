"""Serving-certificate renewal, the webhook configurations' shape, and the GpuTenant change checks."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from cryptography import x509

from gputenant.api.v1alpha1 import GpuTenantSpec
from gputenant.config.models import OperatorConfig
from gputenant.guard.certs import CertificatePaths, ensure_certificates, expires_at
from gputenant.guard.configuration import webhook_configurations
from gputenant.guard.tenant_checks import check_tenant_change, judges_spec
from gputenant.policy.choose import decide

START = datetime(2026, 1, 1, tzinfo=UTC)


def certificates(paths: CertificatePaths) -> tuple[bytes, bytes, bytes]:
    return paths.ca_bundle.read_bytes(), paths.cert.read_bytes(), paths.key.read_bytes()


def test_leaf_is_renewed_with_a_third_of_its_life_left_and_the_ca_is_kept(tmp_path):
    paths = CertificatePaths.in_directory(tmp_path)
    assert ensure_certificates(tmp_path, ["127.0.0.1", "guard.ops.svc"], now=START)
    first = certificates(paths)
    assert not ensure_certificates(tmp_path, ["127.0.0.1", "guard.ops.svc"], now=START + timedelta(days=19))
    assert certificates(paths) == first
    assert ensure_certificates(tmp_path, ["127.0.0.1", "guard.ops.svc"], now=START + timedelta(days=21))
    bundle, cert, key = certificates(paths)
    assert bundle == first[0] and cert != first[1] and key != first[2]
    assert expires_at(paths.cert) > START + timedelta(days=50)
    leaf = x509.load_pem_x509_certificate(cert)
    [ca] = x509.load_pem_x509_certificates(bundle)
    leaf.verify_directly_issued_by(ca)
    sans = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert {str(name.value) for name in sans} == {"127.0.0.1", "guard.ops.svc"}


def test_renewed_ca_is_bundled_with_its_predecessor(tmp_path):
    paths = CertificatePaths.in_directory(tmp_path)
    ensure_certificates(tmp_path, ["127.0.0.1"], now=START)
    [old_ca] = x509.load_pem_x509_certificates(paths.ca_bundle.read_bytes())
    assert ensure_certificates(tmp_path, ["127.0.0.1"], now=START + timedelta(days=250))
    new_ca, kept = x509.load_pem_x509_certificates(paths.ca_bundle.read_bytes())
    assert kept == old_ca and new_ca != old_ca
    x509.load_pem_x509_certificate(paths.cert.read_bytes()).verify_directly_issued_by(new_ca)


def test_a_ca_replaced_within_the_same_second_still_keeps_its_predecessor(tmp_path):
    paths = CertificatePaths.in_directory(tmp_path)
    ensure_certificates(tmp_path, ["127.0.0.1"], now=START)
    (tmp_path / "ca.crt").unlink()
    assert ensure_certificates(tmp_path, ["127.0.0.1"], now=START)
    new_ca, old_ca = x509.load_pem_x509_certificates(paths.ca_bundle.read_bytes())
    assert new_ca.subject != old_ca.subject
    x509.load_pem_x509_certificate(paths.cert.read_bytes()).verify_directly_issued_by(new_ca)


def test_changed_hostnames_renew_the_leaf(tmp_path):
    ensure_certificates(tmp_path, ["127.0.0.1"], now=START)
    assert ensure_certificates(tmp_path, ["10.0.0.7"], now=START)


def test_webhook_configurations_spare_system_and_operator_namespaces():
    config = OperatorConfig(operator_namespace="gpu-ops")
    mutating, validating = webhook_configurations(config, {"url": "https://guard.gpu-ops.svc:443", "caBundle": "Q0E="})
    [mutate] = mutating["webhooks"]
    assert mutate["clientConfig"] == {"service": {"namespace": "gpu-ops", "name": "guard", "port": 443,
                                                  "path": "/mutate-pod"}, "caBundle": "Q0E="}
    assert mutate["namespaceSelector"]["matchExpressions"][1] == {
        "key": "kubernetes.io/metadata.name", "operator": "NotIn",
        "values": ["gpu-ops", "kube-node-lease", "kube-public", "kube-system"]}
    pods, services, tenants = validating["webhooks"]
    assert (pods["failurePolicy"], services["failurePolicy"], tenants["failurePolicy"]) == ("Fail", "Fail", "Ignore")
    assert [r["resources"] for r in pods["rules"]] == [["pods"], ["pods/ephemeralcontainers"]]
    assert services["namespaceSelector"] == mutate["namespaceSelector"]
    assert "namespaceSelector" not in tenants


def test_webhook_configurations_name_addresses_outside_the_cluster_by_url():
    _, validating = webhook_configurations(OperatorConfig(), {"url": "https://127.0.0.1:9443", "caBundle": "Q0E="})
    assert validating["webhooks"][0]["clientConfig"] == {"url": "https://127.0.0.1:9443/validate-pod",
                                                         "caBundle": "Q0E="}


CONFIG = OperatorConfig.model_validate({"pools": [
    {"name": "mig", "mode": "MIG", "gpuModel": "A100-80GB", "gpuMemoryMiB": 81920, "gpus": 4,
     "nodeSelector": {"p": "mig"}, "mig": {"config": "all-balanced", "profiles": ["1g.10gb", "2g.20gb"]}}],
    "trustModes": {"Untrusted": "MIG"}})


def spec(quota: float, profile: str = "1g.10gb") -> GpuTenantSpec:
    return GpuTenantSpec.model_validate({"trust": "Untrusted", "owners": [{"kind": "User", "name": "o"}],
                                         "gpu": {"quota": quota, "limit": quota}, "sharing": {"mig": {"profile": profile}}})


SHARED = OperatorConfig.model_validate({"pools": [
    {"name": "ts", "mode": "TimeSlicing", "gpuModel": "A100-80GB", "gpuMemoryMiB": 81920, "gpus": 4,
     "nodeSelector": {"p": "ts"}, "timeSlicing": {"replicas": 4}}]})


def trusted(quota: float) -> GpuTenantSpec:
    return GpuTenantSpec.model_validate({"trust": "Trusted", "owners": [{"kind": "User", "name": "o"}],
                                         "gpu": {"quota": quota, "limit": 4}})


def test_quota_that_fits_next_to_other_tenants_passes_and_one_that_does_not_is_refused():
    others = [("a", trusted(2), decide("a", trusted(2), SHARED)), ("b", trusted(1.5), decide("b", trusted(1.5), SHARED))]
    assert check_tenant_change(SHARED, "b", trusted(2), None, others, []) == ([], [])
    problems, _ = check_tenant_change(SHARED, "b", trusted(2.5), None, others, [])
    assert problems == ["[pool-capacity] gpu.quota 2.5 of tenant b does not fit pool ts: it has 4 GPUs and 2 are "
                        "guaranteed to other tenants (a: 2); lower gpu.quota to at most 2 or choose another pool with gpu.pool"]


def test_an_over_committed_pool_refuses_only_updates_that_ask_it_for_more():
    """Tenants admitted at the same moment can over-commit a pool; their other changes (here
    clearing preventDeletion, to offboard) must still pass, while a higher quota is refused."""
    others = [("a", trusted(2), decide("a", trusted(2), SHARED)), ("c", trusted(2), decide("c", trusted(2), SHARED))]
    old = trusted(1).model_copy(update={"prevent_deletion": True}).model_dump(by_alias=True, mode="json")
    assert old["preventDeletion"] is True
    assert check_tenant_change(SHARED, "b", trusted(1), old, others, []) == ([], [])
    assert check_tenant_change(SHARED, "b", trusted(0.5), old, others, []) == ([], [])
    problems, _ = check_tenant_change(SHARED, "b", trusted(1.5), old, others, [])
    assert problems == ["[pool-capacity] gpu.quota 1.5 of tenant b does not fit pool ts: it has 4 GPUs and 4 are "
                        "guaranteed to other tenants (a: 2, c: 2); lower gpu.quota to at most 0 or choose another pool "
                        "with gpu.pool"]


def test_metadata_updates_are_not_judged_again_only_creates_and_spec_changes():
    """A spec admitted before another tenant took its parent queue's name is refused if judged now;
    the operator's finalizer and annotation writes to it must still pass (or it could never be
    deleted), and they need no judging: the spec is the one admitted."""
    body = {"metadata": {"name": "b", "finalizers": ["gputenant.io/cleanup"]},
            "spec": trusted(1).model_dump(by_alias=True, mode="json") | {"gpu": {"quota": 1, "limit": 4, "parentQueue": "a"}}}
    old = {"metadata": {"name": "b"}, "spec": dict(body["spec"])}
    others = [("a", trusted(2), decide("a", trusted(2), SHARED))]
    problems, _ = check_tenant_change(SHARED, "b", GpuTenantSpec.model_validate(body["spec"]), old["spec"], others, [])
    assert problems and problems[0].startswith("[parent-queue] spec.gpu.parentQueue a is the queue of tenant a")
    assert not judges_spec(body, old)
    assert judges_spec(body, None)
    assert judges_spec({**body, "spec": {**body["spec"], "trust": "Internal"}}, old)


def test_withdrawing_a_profile_is_refused_only_while_pods_use_it():
    old = spec(1).model_dump(by_alias=True, mode="json")
    assert check_tenant_change(CONFIG, "b", spec(1, "2g.20gb"), old, [], [("idle", {})]) == ([], [])
    problems, _ = check_tenant_change(CONFIG, "b", spec(1, "2g.20gb"), old, [],
                                      [("train-0", {"nvidia.com/mig-1g.10gb": "1"})])
    assert problems == ["[gpu-resource-in-use] the change withdraws what running pods of tenant b use: MIG profile "
                        "1g.10gb is used by tenant-b/train-0; delete those pods first, then change the tenant"]
