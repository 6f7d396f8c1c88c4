"""No forged packets from a tenant pod: every container drops ``NET_RAW``.

NetworkPolicies judge a packet by its source address, so a pod that can write its own IP header
walks through them as a neighbour of its victim. Writing one needs a raw socket (or a transparent
one), and both need ``CAP_NET_RAW`` (or ``CAP_NET_ADMIN``, which no runtime grants by default and
Pod Security refuses to add). Container runtimes give ``NET_RAW`` to every container unless it is
dropped, and Pod Security ``baseline`` (the Trusted and Internal tiers) leaves it to root
containers; so the guard drops it from every container of every tenant pod at admission and
refuses one that asks for it back. Dropping it at admission, rather than validating source
addresses on each node, holds on any CNI and needs nothing installed on the nodes
(docs/threat-model.md, "The network"). ``ping`` still works where the node allows unprivileged
ICMP sockets (``net.ipv4.ping_group_range``); nothing else a workload needs uses raw sockets.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

SPOOFING = ("NET_RAW",)
"""Dropped from every container."""
REFUSED_ADDS = frozenset({"NET_RAW", "NET_ADMIN", "ALL"})
"""Capabilities a tenant container may not add back (with or without the CAP_ prefix)."""
CONTAINER_KINDS = ("containers", "initContainers", "ephemeralContainers")


def _names(capabilities: Iterable[str] | None) -> set[str]:
    return {str(name).upper().removeprefix("CAP_") for name in capabilities or ()}


def drops_spoofing(container: dict) -> bool:
    """Whether the container's capabilities drop everything that forges a source address."""
    dropped = _names(((container.get("securityContext") or {}).get("capabilities") or {}).get("drop"))
    return "ALL" in dropped or set(SPOOFING) <= dropped


def added_spoofing(container: dict) -> list[str]:
    """The capabilities the container adds that would let it forge packets."""
    added = ((container.get("securityContext") or {}).get("capabilities") or {}).get("add") or []
    return [name for name in added if str(name).upper().removeprefix("CAP_") in REFUSED_ADDS]


def new_containers(pod: dict, old: dict | None) -> Iterator[tuple[str, int, dict]]:
    """(kind, index, container) of the pod's containers the request brings: all of them on CREATE
    (`old` None), the ephemeral containers an UPDATE adds (the others cannot change)."""
    spec = pod.get("spec") or {}
    existing = {c.get("name") for c in ((old or {}).get("spec") or {}).get("ephemeralContainers") or []}
    for kind in CONTAINER_KINDS if old is None else ("ephemeralContainers",):
        for index, container in enumerate(spec.get(kind) or []):
            if kind != "ephemeralContainers" or container.get("name") not in existing:
                yield kind, index, container


def drop_patch(pod: dict, old: dict | None = None) -> list[dict]:
    """JSON-patch operations that add ``NET_RAW`` to the drop list of every new container."""
    patch = []
    for kind, index, container in new_containers(pod, old):
        if drops_spoofing(container):
            continue
        base = f"/spec/{kind}/{index}/securityContext"
        context = container.get("securityContext")
        capabilities = (context or {}).get("capabilities")
        missing = [name for name in SPOOFING if name not in _names((capabilities or {}).get("drop"))]
        if context is None:
            patch.append({"op": "add", "path": base, "value": {"capabilities": {"drop": missing}}})
        elif capabilities is None:
            patch.append({"op": "add", "path": f"{base}/capabilities", "value": {"drop": missing}})
        elif capabilities.get("drop") is None:
            patch.append({"op": "add", "path": f"{base}/capabilities/drop", "value": missing})
        else:
            patch.extend({"op": "add", "path": f"{base}/capabilities/drop/-", "value": name} for name in missing)
    return patch
