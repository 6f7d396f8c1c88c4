"""Whether each HAMi pool's HAMi-core library reaches its shares (pure).

The guard's init container (``guard.hami_caps``) copies the library into every capped pod; a pod whose copy
fails never starts, so the evidence is on the pods: a pool whose shares' init containers cannot pull the
pool's library image, or find the library in it, cannot be delivered, and the pool report names it as a
problem with the pods and the kubelet's reason. A pool none of whose shares has run yet is "not yet
seen", not a problem.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gputenant.config.models import OperatorConfig
from gputenant.config.pools import Pool
from gputenant.guard.hami_caps import INIT_CONTAINER
from gputenant.sharing import registry

WAITING_FAILURES = frozenset({"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull",
                              "CreateContainerConfigError", "CreateContainerError", "RunContainerError",
                              "CrashLoopBackOff"})
"""Kubelet reasons of a waiting init container that will not start or keeps failing."""
SHOWN_FAILURES = 3


@dataclass(frozen=True)
class LibraryDelivery:
    pool: str
    image: str
    path: str
    delivered: int = 0
    """Shares whose library init container completed."""
    failures: list[str] = field(default_factory=list)
    """``<namespace>/<pod>: <reason>`` of shares whose copy failed or cannot start."""

    @property
    def problem(self) -> str | None:
        if not self.failures:
            return None
        shown = "; ".join(self.failures[:SHOWN_FAILURES])
        more = f" and {len(self.failures) - SHOWN_FAILURES} more" if len(self.failures) > SHOWN_FAILURES else ""
        return (f"HamiCoreLibraryNotDelivered: the HAMi-core library {self.path} in image {self.image} does not reach "
                f"{len(self.failures)} share(s), which do not start ({shown}{more}); check that the nodes can "
                "pull the image and that pools[].hami.library.path names libvgpu.so in it")


def _belongs(pod: dict, pool: Pool) -> bool:
    selector = (pod.get("spec") or {}).get("nodeSelector") or {}
    return bool(pool.node_selector) and all(selector.get(k) == v for k, v in pool.node_selector.items())


def _library_status(pod: dict) -> dict | None:
    for status in (pod.get("status") or {}).get("initContainerStatuses") or []:
        if status.get("name") == INIT_CONTAINER:
            return status
    return None


def library_failure(pod: dict) -> str | None:
    """Why the guard's init container could not deliver HAMi-core to this pod; None when it did, is
    still at it, or the pod has none."""
    status = _library_status(pod)
    return _failure(status) if status is not None else None


def _failure(status: dict) -> str | None:
    state = status.get("state") or {}
    waiting, terminated = state.get("waiting") or {}, state.get("terminated") or {}
    last = (status.get("lastState") or {}).get("terminated") or {}
    if waiting.get("reason") in WAITING_FAILURES:
        return f"{waiting['reason']}: {(waiting.get('message') or last.get('message') or '').strip()[:160]}".rstrip(": ")
    if terminated and terminated.get("exitCode") not in (0, None):
        return f"exit {terminated['exitCode']}: {(terminated.get('message') or '').strip()[:160]}".rstrip(": ")
    return None


def library_deliveries(config: OperatorConfig, pods: list[dict]) -> list[LibraryDelivery]:
    """One entry per HAMi pool, from the pods the guard capped (those carrying its init container)."""
    result = []
    for pool in config.pools:
        if not registry.of_pool(pool).caps_in_process:
            continue
        library = pool.hami_settings().library
        delivered, failures = 0, []
        for pod in pods:
            status = _library_status(pod) if _belongs(pod, pool) else None
            if status is None:
                continue
            terminated = (status.get("state") or {}).get("terminated") or {}
            failure = _failure(status)
            if failure:
                metadata = pod.get("metadata") or {}
                failures.append(f"{metadata.get('namespace')}/{metadata.get('name')}: {failure}")
            elif terminated.get("exitCode") == 0:
                delivered += 1
        result.append(LibraryDelivery(pool.name, library.image, library.path, delivered, sorted(failures)))
    return result
