"""An attack on the KAI queue tree through spec.gpu.parentQueue (issue 12, class 7), refused by the
operator's own GpuTenant webhook as it runs (`gputenant run`, its guard on loopback): a tenant may
not hang its queue under another tenant's queue, its own, or a queue the platform does not list.
(The host-side attacks on the tenant API, without the operator, are test_attack_tenant_api.py.)"""

from __future__ import annotations

import json

import kubernetes
import pytest
from kubernetes.client.rest import ApiException

from gputenant import GROUP, PLURAL, VERSION
from kubeplane import wait_for

VICTIM = "pq-victim"


@pytest.fixture(scope="module")
def operator_custom(operator):
    with operator.plane.api_client() as api:
        yield kubernetes.client.CustomObjectsApi(api)


@pytest.fixture(scope="module")
def victim_tenant(operator, tenants_api):
    tenants_api.apply(tenants_api.manifest(VICTIM, "Internal", "victim-owner", gpus=1))
    return VICTIM


@pytest.mark.parametrize("parent,why", [(VICTIM, f"is the queue of tenant {VICTIM}"),
                                        ("pq-attacker", "is the tenant's own queue"),
                                        ("sales", "is not one of the platform's parent queues")])
def test_a_parent_queue_must_be_a_platform_queue(operator, operator_custom, tenants_api, victim_tenant, parent, why):
    body = tenants_api.manifest("pq-attacker", "Internal", "owner", gpu={"quota": 1, "parentQueue": parent})

    def refused() -> ApiException | None:
        try:
            operator_custom.create_cluster_custom_object(GROUP, VERSION, PLURAL, body, dry_run="All")
        except ApiException as error:
            return error
        return None
    try:
        error = wait_for(refused, timeout=60, interval=0.5, what="the operator's GpuTenant webhook to refuse")
    except TimeoutError:
        raise AssertionError(f"accepted; operator log:\n{operator.log_tail()}") from None
    message = json.loads(error.body)["message"]
    assert error.status == 403, message
    assert (f"[parent-queue] spec.gpu.parentQueue {parent} {why}; name research, or leave gpu.parentQueue unset"
            in message)
