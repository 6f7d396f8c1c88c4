"""When to look again at a tenant that waits for something normal (a control plane starting, pods
stopping), and whether a change of its control-plane pod is news. A wait is not a failure: it never
grows a backoff, and after MAX_LOOKS looks in a row the resync and the control-plane pod
watch are what remain. The cell asks; its work queue runs the looks (`gputenant.work_queue`)."""

from __future__ import annotations

import logging

from gputenant.reconcile.context import Outcome
from gputenant.reconcile.controlplane import PodSignature

log = logging.getLogger(__name__)

MAX_LOOKS = 150
"""Looks in a row for one tenant (150 × 2 s: five minutes of a control plane that does not come)."""


class Rechecks:
    """Per tenant: the looks again in a row, and when the last pass read its control plane and the
    pods it saw then."""

    def __init__(self, max_looks: int = MAX_LOOKS):
        self.max_looks = max_looks
        self._looks: dict[str, int] = {}
        self._judged_at: dict[str, float] = {}
        self._seen: dict[str, dict[str, PodSignature]] = {}

    def follow(self, name: str, wait_after: float | None) -> float | None:
        """After a pass of tenant `name`: the delay of its next look when it waits and has looks left;
        None when it does not wait (the count starts again) or has waited MAX_LOOKS times in a row."""
        if wait_after is None:
            self._looks.pop(name, None)
            return None
        looks = self._looks.get(name, 0)
        if looks >= self.max_looks:
            if looks == self.max_looks:
                log.info("tenant %s: still waiting after %d looks; the resync and the control-plane "
                         "pod watch take over", name, looks)
                self._looks[name] = looks + 1
            return None
        self._looks[name] = looks + 1
        return wait_after

    def judged(self, name: str, outcome: Outcome) -> None:
        """A pass of tenant `name` ended: note when it read the control plane and the pods it saw."""
        if outcome.control_plane_read_at is not None and \
                outcome.control_plane_read_at >= self._judged_at.get(name, float("-inf")):
            self._judged_at[name] = outcome.control_plane_read_at
            self._seen[name] = dict(outcome.control_plane_pods)

    def is_news(self, name: str, pod: str, signature: PodSignature, changed_at: float) -> bool:
        """Whether the tenant's control-plane pod `pod`, now `signature` since `changed_at`, is worth a
        look: not when the last pass that read the control plane read it after that moment, or saw
        `pod` just so (a pod it did not list was not serving). Asked once the pass in flight, if any,
        ended: it often did either, as the pod turns ready while Helm installs, and the watch's event
        can reach the operator after the listing that already had it."""
        if self._judged_at.get(name, float("-inf")) >= changed_at:
            log.debug("tenant %s: its control-plane change was judged by the pass in flight", name)
            return False
        seen = self._seen.get(name)
        if seen is not None and seen.get(pod) == signature:
            log.debug("tenant %s: the last pass saw pod %s as it is now", name, pod)
            return False
        return True

    def forget(self, name: str) -> None:
        """The tenant is gone."""
        self._looks.pop(name, None)
        self._judged_at.pop(name, None)
        self._seen.pop(name, None)
