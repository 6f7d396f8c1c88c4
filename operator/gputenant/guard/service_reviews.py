"""Service reviews: a tenant's Service may claim no address (``guard.services``), answered from the
guard's tenant index like pod reviews, without kopf's handler machinery.

Only Services of a recorded tenant's host namespace are judged (any other namespace labelled as a
tenant's is refused, as for pods), and only requests from the tenant's side (its syncer, its
people): the operator's Helm release and the load balancer writing status are the platform's.
"""

from __future__ import annotations

import logging

import kopf

from gputenant.guard.configuration import VALIDATE_SERVICE
from gputenant.guard.pod_reviews import GUARD_ERROR, judgeable, response
from gputenant.guard.services import refusal
from gputenant.guard.webhook import DENIED, Guard, tenant_of_namespace

log = logging.getLogger(__name__)

SERVICE_RESOURCE = {"group": "", "version": "v1", "resource": "services"}


class ServiceReviews:
    """Answers the ``validate-service`` webhook (Services and services/status in tenant namespaces)."""

    webhooks: tuple[str, ...] = (VALIDATE_SERVICE,)

    def __init__(self, guard: Guard):
        self.guard = guard

    def answer(self, request: dict, webhook: str, tenants: kopf.Index) -> dict:
        payload, refused = judgeable(request, SERVICE_RESOURCE, "services")
        if refused is not None:
            return refused
        service = payload["object"]
        try:
            namespace = (service.get("metadata") or {}).get("namespace") or payload.get("namespace", "")
            tenant = tenant_of_namespace(namespace, tenants)
            if not self.guard.by_tenant(payload["userInfo"], namespace):
                return response(request, payload, allowed=True)
            problems = refusal(service, payload.get("oldObject"), payload.get("subResource"))
        except kopf.AdmissionError as error:
            return response(request, payload, allowed=False, code=error.code or GUARD_ERROR, message=str(error))
        except Exception as error:  # a bug must refuse the Service, not let it through
            log.exception("the admission guard failed on a Service review; the Service is refused")
            return response(request, payload, allowed=False, code=GUARD_ERROR, message=str(error) or repr(error))
        if not problems:
            return response(request, payload, allowed=True)
        message = "; ".join(f"[service-address] {problem}" for problem in problems)
        return response(request, payload, allowed=False, code=DENIED, message=f"{message} (tenant {tenant.name})")

