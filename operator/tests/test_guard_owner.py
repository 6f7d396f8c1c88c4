"""The guard's webhook configurations are owned by the Helm release's ClusterRole, so the garbage
collector removes them on `helm uninstall` (issue 17: they failed closed for every tenant pod)."""

from __future__ import annotations

from gputenant.config.models import OperatorConfig
from gputenant.guard.configuration import webhook_configurations

CLIENT_CONFIG = {"url": "https://guard.gpu-ops.svc:443", "caBundle": "Q0E="}
OWNER = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
         "metadata": {"name": "gto-tenant-namespace", "uid": "0b9d2f5e-1111-2222-3333-444455556666"}}


def test_both_configurations_name_the_release_cluster_role_as_owner():
    for configuration in webhook_configurations(OperatorConfig(), CLIENT_CONFIG, OWNER):
        assert configuration["metadata"]["ownerReferences"] == [{
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "name": "gto-tenant-namespace", "uid": "0b9d2f5e-1111-2222-3333-444455556666"}]
        # No blockOwnerDeletion: it would need update on the ClusterRole's finalizers.
        assert "blockOwnerDeletion" not in configuration["metadata"]["ownerReferences"][0]


def test_without_a_release_the_configurations_have_no_owner():
    for configuration in webhook_configurations(OperatorConfig(), CLIENT_CONFIG):
        assert "ownerReferences" not in configuration["metadata"]
