"""Pod reviews answered straight from the guard's decisions, without kopf's handler machinery.

kopf serves an admission review by building a cause, selecting handlers through their filters,
running them with progress state and logging, and then deep-copying the pod to diff the handlers'
patch back into JSON-patch operations. For a pod review that was most of the guard's time (a
profile put half of it in ``Patch.as_json_patch`` alone), while the guard already holds the
operations. ``route`` puts ``PodReviews`` in front of kopf's webhook function for the two pod
webhooks; every other review (the GpuTenant one) still goes to kopf.

The answers are the same as kopf's: a refusal carries the ``kopf.AdmissionError``'s message and
code, any other error refuses with 500 (the webhook fails closed), and a review that is not a pod
CREATE or UPDATE carrying its object and user is refused with 400.
"""

from __future__ import annotations

import base64
import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import kopf

from gputenant.guard.configuration import MUTATE_POD, VALIDATE_POD
from gputenant.guard.webhook import DENIED, TENANTS_INDEX, Guard

log = logging.getLogger(__name__)

DecisionObserver = Callable[[str, str, float], None]
"""Told of each pod validation: the first refusing rule's id (or "none"), allowed/refused, seconds."""
POD_RESOURCE = {"group": "", "version": "v1", "resource": "pods"}
REVIEWED_OPERATIONS = ("CREATE", "UPDATE")
BAD_REQUEST = 400
GUARD_ERROR = 500


class PodReviews:
    """Answers the ``mutate-pod`` and ``validate-pod`` webhooks with ``Guard.pod_patch`` and
    ``Guard.pod_refusal``, reading the tenants from kopf's index."""

    webhooks: tuple[str, ...] = (MUTATE_POD, VALIDATE_POD)

    def __init__(self, guard: Guard, observe: DecisionObserver | None = None):
        self.guard = guard
        self.observe = observe

    def answer(self, request: dict, webhook: str, tenants: kopf.Index) -> dict:
        """The AdmissionReview response to a pod review sent to `webhook`."""
        payload, refused = judgeable(request, POD_RESOURCE, "pods")
        if refused is not None:
            return refused
        try:
            if webhook == MUTATE_POD:
                return response(request, payload, allowed=True, patch=self._patch(payload, tenants))
            message = self._refusal(payload, tenants)
        except kopf.AdmissionError as error:
            return response(request, payload, allowed=False, code=error.code or GUARD_ERROR, message=str(error))
        except Exception as error:  # a bug must refuse the pod, not let it through
            log.exception("the admission guard failed on a pod review; the pod is refused")
            return response(request, payload, allowed=False, code=GUARD_ERROR, message=str(error) or repr(error))
        if message is None:
            return response(request, payload, allowed=True)
        return response(request, payload, allowed=False, code=DENIED, message=message)

    def _patch(self, payload: dict, tenants: kopf.Index) -> list[dict]:
        return self.guard.pod_patch(payload["object"], tenants, operation=payload["operation"],
                                    subresource=payload.get("subResource"), old=payload.get("oldObject"))

    def _refusal(self, payload: dict, tenants: kopf.Index) -> str | None:
        started = time.perf_counter()
        rule, message = self.guard.pod_refusal(payload["object"], payload["userInfo"], tenants,
                                               operation=payload["operation"], old=payload.get("oldObject"))
        if self.observe is not None:
            self.observe(rule, "allowed" if message is None else "refused", time.perf_counter() - started)
        return message


def judgeable(request: dict, resource: dict, what: str) -> tuple[dict, dict | None]:
    """The review's request, and the 400 answer when it cannot be judged (else None)."""
    payload = request.get("request")
    if not isinstance(payload, dict):
        return {}, response(request, {}, allowed=False, code=BAD_REQUEST, message="the AdmissionReview has no request")
    problem = malformed(payload, resource, what)
    if problem:
        return payload, response(request, payload, allowed=False, code=BAD_REQUEST, message=problem)
    return payload, None


def malformed(payload: dict, resource: dict, what: str) -> str | None:
    """Why a review cannot be judged, or None: a webhook reviews CREATE and UPDATE of its one
    `resource` (named `what` in the message), with the object and the user."""
    if payload.get("resource") != resource:
        return f"this webhook reviews {what} only, not {payload.get('resource')}"
    if payload.get("operation") not in REVIEWED_OPERATIONS:
        return f"this webhook reviews {' and '.join(REVIEWED_OPERATIONS)} only, not {payload.get('operation')}"
    if not isinstance(payload.get("object"), dict) or not isinstance(payload.get("userInfo"), dict):
        return "the review carries no object or no user"
    return None


def response(request: dict, payload: dict, *, allowed: bool, patch: list[dict] | None = None,
              code: int | None = None, message: str | None = None) -> dict:
    answer: dict[str, Any] = {"uid": payload.get("uid", ""), "allowed": allowed}
    if patch:
        answer["patch"] = base64.b64encode(json.dumps(patch).encode()).decode("ascii")
        answer["patchType"] = "JSONPatch"
    if not allowed:
        answer["status"] = {"message": message, "code": code}
    return {"apiVersion": request.get("apiVersion", "admission.k8s.io/v1"),
            "kind": request.get("kind", "AdmissionReview"), "response": answer}


WebhookFn = Callable[..., Awaitable[Any]]


class Reviews(Protocol):
    """Answers some webhooks straight from the tenants index."""

    webhooks: tuple[str, ...]

    def answer(self, request: dict, webhook: str, tenants: kopf.Index) -> dict: ...


def route(fn: WebhookFn, *reviewers: Reviews) -> WebhookFn:
    """kopf's webhook function `fn` with the webhooks of `reviewers` (pods, Services) answered by
    them. The tenants are read from the index kopf gives its own handlers (the ``indices`` bound
    into `fn`)."""
    indices = getattr(fn, "keywords", {}).get("indices")
    if indices is None or TENANTS_INDEX not in indices:
        raise RuntimeError("kopf's webhook function carries no tenants index; the pinned kopf version "
                           "binds `indices` into it (kopf._core.reactor.running)")
    tenants = indices[TENANTS_INDEX]

    by_webhook = {webhook: reviewer for reviewer in reviewers for webhook in reviewer.webhooks}

    async def serve(request: dict, *, webhook: str | None = None, **kwargs: Any) -> Any:
        if webhook in by_webhook:
            return by_webhook[webhook].answer(request, webhook, tenants)
        return await fn(request, webhook=webhook, **kwargs)

    return serve
